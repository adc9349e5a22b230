"""Send the same rows through ragframe, ragas and deepeval against one local fake judge.

Why this script exists: requests, tokens and wall time per row are what an evaluation costs,
and counting them at the server (not from each framework's own bookkeeping) measures all
three the same way. The server is ragframe's ``FakeServer`` run in this process, with a
handler that also answers the peers' plain prompts (ragas writes its JSON schema into the
prompt text; the stock handler would answer ``{}`` and every ragas metric would fail on the
fake server, not on its own merits). Each framework runs in its own virtual environment as
a subprocess; the server is reset between runs.

Run from the repository's venv (see bench/peers/README.md)::

    python bench/peers/compare.py --rows 100 --out bench/out/peers
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import html
import json
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.testing.server import FakeServer, Reply, schema_of, synthesize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: The shared data sits beside the project: <project root>/../shared.
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "expertqa_rag.parquet"
METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")
FRAMEWORKS = ("ragframe", "ragas", "deepeval")
_SCHEMA_MARK = "JSON Schema:"
_INPUT_MARK = "\ninput: "


# --------------------------------------------------------------------------------------------
# The judge: valid JSON for every framework's request shape
# --------------------------------------------------------------------------------------------


def _prompt_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for m in body.get("messages") or ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(p["text"] for p in c if isinstance(p, dict) and "text" in p)
    return "\n".join(parts)


def _json_after(text: str, mark: str, last: bool = False) -> Any:
    """The JSON value that follows ``mark`` in ``text`` (first or last occurrence), or None."""
    i = text.rfind(mark) if last else text.find(mark)
    if i < 0:
        return None
    j = text.find("{", i + len(mark))
    if j < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[j:])
    except ValueError:
        return None
    return value


def _binary_ints(schema: Any) -> Any:
    """Unbounded integers become 0/1: ragas' verdict, attributed and noncommittal fields are
    binary in its prompts' examples but unbounded in the schema, and a random 0..100 would
    give scores above 1 that no real judge would cause."""
    if isinstance(schema, list):
        return [_binary_ints(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _binary_ints(v) for k, v in schema.items()}
    if out.get("type") == "integer" and "minimum" not in out and "maximum" not in out:
        out["minimum"], out["maximum"] = 0, 1
    return out


def _long_reasons(schema: Any) -> Any:
    """A ``reason`` string gets at least REASON_CHARS characters (a sentence, as a real judge
    writes), where its schema allows it; the stock answer's 1-3 words would make the
    frameworks that ask for reasons look cheaper in completion tokens than they are."""
    if isinstance(schema, list):
        return [_long_reasons(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _long_reasons(v) for k, v in schema.items()}
    props = out.get("properties")
    if isinstance(props, dict) and isinstance(props.get("reason"), dict):
        reason = dict(props["reason"])
        max_len = reason.get("maxLength")
        if "minLength" not in reason and (not isinstance(max_len, int) or max_len >= REASON_CHARS):
            # Optional[str] in pydantic is anyOf [string, null]: lengthen the string branch.
            if isinstance(reason.get("anyOf"), list):
                reason["anyOf"] = [
                    {**b, "minLength": REASON_CHARS} if b.get("type") == "string" else b
                    for b in reason["anyOf"]
                    if isinstance(b, dict)
                ]
            else:
                reason["minLength"] = REASON_CHARS
        out["properties"] = {**props, "reason": reason}
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
REASON_CHARS = 100
#: Which row text a top-level output list is drawn from, one item per sentence: claims of the
#: answer (ragframe, deepeval), ragas' statements, deepeval's truths of the contexts, facts of
#: the ground truth (ragframe) and ragas' per-sentence classifications of the reference.
_ITEMS_FROM = {
    "claims": "answer",
    "statements": "answer",
    "truths": "contexts",
    "facts": "ground_truth",
    "classifications": "ground_truth",
}
#: deepeval's verdict lists, one item per claim or statement it lists in the prompt, per
#: context or per reference sentence, told apart by their prompt templates (deepeval 4.3:
#: metrics/*/templates/generate_verdicts.txt).
_VERDICTS_FROM = (
    ("each claim contradicts", "listed:Claims:"),
    ("each statement is relevant to address", "listed:Statements:"),
    ("each node in the retrieval context was remotely useful", "n_contexts"),
    ("in the given expected output below", "ground_truth"),
)
#: The string field of a list item that carries the extracted sentence.
_TEXT_FIELDS = ("statement", "fact", "claim", "truth")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()] or [text.strip()]


def _norm(text: str) -> str:
    text = re.sub(r"\\[nrt]", " ", html.unescape(text))  # repr()/JSON escapes of newlines
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _listed(text: str, marker: str) -> int | None:
    """Length of the Python list literal printed after the last ``marker`` (deepeval renders
    its claims and statements that way)."""
    i = text.rfind(marker)
    j = text.find("[", i) if i >= 0 else -1
    k = text.find("]", j) if j >= 0 else -1
    while k >= 0:
        try:
            value = ast.literal_eval(text[j : k + 1])
        except (ValueError, SyntaxError):
            k = text.find("]", k + 1)
            continue
        return len(value) if isinstance(value, list) else None
    return None


class RowIndex:
    """Finds which benchmark row a prompt is about, to fill its lists like a real judge would:
    with the sentences of the text they are extracted from."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        def key(text: str) -> str:
            return _norm(text)[:80]

        self.items: dict[str, list[tuple[str, list[str]]]] = {
            "answer": [(key(r["answer"]), split_sentences(r["answer"])) for r in rows],
            "ground_truth": [
                (key(r["ground_truth"]), split_sentences(r["ground_truth"])) for r in rows
            ],
            "contexts": [
                (key(r["contexts"][0]), [x for c in r["contexts"] for x in split_sentences(c)])
                for r in rows
            ],
            "n_contexts": [(key(r["contexts"][0]), list(r["contexts"])) for r in rows],
        }

    def find(self, source: str, norm_text: str) -> list[str] | None:
        for k, items in self.items[source]:
            if k and k in norm_text:
                return items
        return None


def _shape_lists(
    schema: dict[str, Any], given: Any, rows: RowIndex | None, text: str, ledger: Ledger
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Size the top-level output lists whose length the request leaves open, and say which
    sentences fill them: a list named like an input list gets its length (ragas' NLI step:
    one verdict per statement given); an extracted list (``_ITEMS_FROM``) gets the sentences
    of its source text; deepeval's verdict lists get one item per thing they judge. Counts
    the request fixes (minItems == maxItems, as ragframe sends) are kept; new counts stay
    within the request's bounds."""
    props = schema.get("properties")
    fills: dict[str, list[str]] = {}
    if not isinstance(props, dict):
        return schema, fills
    new_props = dict(props)
    norm: str | None = None
    for name, sub in props.items():
        if not isinstance(sub, dict) or sub.get("type") != "array":
            continue
        lo, hi = sub.get("minItems"), sub.get("maxItems")
        if isinstance(lo, int) and lo == hi:
            continue
        n: int | None = None
        if isinstance(given, dict) and isinstance(given.get(name), list):
            n = len(given[name])
            if all(isinstance(x, str) for x in given[name]):
                fills[name] = given[name]  # a judge echoes the statement it rules on
            ledger.sized[f"{name} by input list"] += 1
        elif rows is not None:
            src = _ITEMS_FROM.get(name)
            if name == "verdicts":
                low = text.lower()
                src = next((s for phrase, s in _VERDICTS_FROM if phrase in low), None)
            if src is None:
                continue
            if src.startswith("listed:"):
                n = _listed(text, src.removeprefix("listed:"))
            else:
                norm = _norm(text) if norm is None else norm
                found = rows.find(src, norm)
                if found is not None:
                    n = len(found)
                    if name != "verdicts":
                        fills[name] = found
            ledger.sized[f"{name} by {src}" if n is not None else f"{name}: not found"] += 1
        if n is None:
            continue
        n = max(n, lo if isinstance(lo, int) else 0)
        n = min(n, hi) if isinstance(hi, int) else n
        new_props[name] = {**sub, "minItems": n, "maxItems": n}
    return {**schema, "properties": new_props}, fills


def _fill(value: Any, fills: dict[str, list[str]]) -> Any:
    """Put the source sentences into the synthesized lists (strings, or an item's text field)."""
    if not isinstance(value, dict):
        return value
    for name, sentences in fills.items():
        items = value.get(name)
        if not isinstance(items, list):
            continue
        for i, sentence in enumerate(sentences[: len(items)]):
            if isinstance(items[i], str):
                items[i] = sentence
            elif isinstance(items[i], dict):
                field_name = next((f for f in _TEXT_FIELDS if f in items[i]), None)
                if field_name is not None and isinstance(items[i][field_name], str):
                    items[i][field_name] = sentence
    return value


@dataclass
class Ledger:
    """What the server answered during one run: usage as returned to the client."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_tokens: int = 0
    embedding_inputs: int = 0
    chat_answers: int = 0
    n_hist: Counter[int] = field(default_factory=Counter)
    schema_source: Counter[str] = field(default_factory=Counter)
    response_format: Counter[str] = field(default_factory=Counter)
    sized: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "embedding_tokens": self.embedding_tokens,
            "embedding_inputs": self.embedding_inputs,
            "chat_answers": self.chat_answers,
            "n_hist": {str(k): v for k, v in sorted(self.n_hist.items())},
            "schema_source": dict(self.schema_source),
            "response_format": dict(self.response_format),
            "sized": dict(self.sized),
        }


class Answerer:
    """Valid synthetic JSON for the schema a request carries, wherever it carries it: in
    ``response_format`` (ragframe; deepeval's structured outputs) or in the prompt text
    (ragas' PydanticPrompt writes "...as specified in JSON Schema: {...}"). Lists are sized
    like a real judge's (see ``_shape_lists``) and reasons are a sentence long, so that every
    framework's answers have the same realistic shape; the content stays synthetic."""

    def __init__(self, rows: list[dict[str, Any]] | None = None, seed: int = 0) -> None:
        self.seed = seed
        self.rows = RowIndex(rows) if rows else None
        self.ledger = Ledger()

    def answer(self, body: dict[str, Any], variant: int = 0) -> str:
        first = variant == 0
        rf = body.get("response_format")
        if first:
            self.ledger.response_format[str(rf.get("type") if isinstance(rf, dict) else None)] += 1
        text = _prompt_text(body)
        schema = schema_of(body)
        given: Any = None
        source = "response_format"
        if not schema:
            schema = _json_after(text, _SCHEMA_MARK)
            source = "prompt_text"
            if isinstance(schema, dict):
                given = _json_after(text, _INPUT_MARK, last=True)
                if isinstance(given, dict):  # search the decoded input, not JSON escapes
                    text = "\n".join(str(v) for v in given.values())
        if not isinstance(schema, dict) or not schema:
            if first:
                self.ledger.schema_source["none"] += 1
            return "{}"
        if first:
            self.ledger.schema_source[source] += 1
            ledger = self.ledger
        else:
            ledger = Ledger()  # extra choices: count the sizing once per request
        schema = _long_reasons(_binary_ints(schema))
        schema, fills = _shape_lists(schema, given, self.rows, text, ledger)
        key = json.dumps([self.seed, variant, body.get("messages")], sort_keys=True)
        return json.dumps(_fill(synthesize(schema, random.Random(key)), fills))

    def __call__(self, body: dict[str, Any]) -> Reply:
        return Reply(content=self.answer(body))


class PeerServer(FakeServer):
    """FakeServer that answers ``n`` > 1 with n choices (ragas asks for n=3) and keeps a
    ledger of the usage it returns, since ``/stats`` counts requests but not tokens."""

    def __init__(self, answerer: Answerer, *, stock: bool = False, **kwargs: Any) -> None:
        # stock: FakeServer's own handler (a schema in response_format, else "{}"), to show
        # what the peers do with it; the ledger still counts usage.
        super().__init__(handler=None if stock else answerer, **kwargs)
        self.answerer = answerer
        self.stock = stock

    def _completion(
        self, body: dict[str, Any], content: str | None, finish: str, reply: Reply
    ) -> dict[str, Any]:
        out = super()._completion(body, content, finish, reply)
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        for i in range(1, max(1, n)):
            extra = self.answerer.answer(body, variant=i) if not self.stock else content or ""
            out["choices"].append(
                {**out["choices"][0], "index": i,
                 "message": {"role": "assistant", "content": extra, "refusal": None}}
            )  # fmt: skip
            out["usage"]["completion_tokens"] += len(extra) // 4 + 1
        usage = out["usage"]
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        ledger = self.answerer.ledger
        ledger.prompt_tokens += usage["prompt_tokens"]
        ledger.completion_tokens += usage["completion_tokens"]
        ledger.chat_answers += 1
        ledger.n_hist[n] += 1
        return out

    def _embeddings(self, body: dict[str, Any], fault: str | None) -> Any:
        label, out = super()._embeddings(body, fault)
        if out.status == 200 and isinstance(out.body, dict):
            self.answerer.ledger.embedding_tokens += out.body["usage"]["prompt_tokens"]
            self.answerer.ledger.embedding_inputs += len(out.body["data"])
        return label, out


# --------------------------------------------------------------------------------------------
# Rows, runs, report
# --------------------------------------------------------------------------------------------


def select_rows(n: int, path: Path = DATA) -> list[dict[str, Any]]:
    """The first ``n`` rows by id that have context text, an answer and a ground truth."""
    df = (
        pl.read_parquet(path)
        .filter(
            pl.col("has_context_text")
            & (pl.col("contexts").list.len() > 0)
            & (pl.col("answer").str.len_chars() > 0)
            & (pl.col("ground_truth").str.len_chars() > 0)
        )
        .sort("id")
        .head(n)
        .select("id", "question", "answer", "contexts", "ground_truth")
    )
    if df.height < n:
        raise SystemExit(f"only {df.height} usable rows in {path}, asked for {n}")
    return df.to_dicts()


def python_of(framework: str) -> str:
    if framework == "ragframe":
        return sys.executable
    venv = Path(os.environ.get(f"PEERS_{framework.upper()}_VENV", HERE / f".venv-{framework}"))
    py = venv / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"{py} missing: run bash bench/peers/setup.sh first")
    return str(py)


def run_one(
    server: PeerServer,
    framework: str,
    metrics: list[str],
    rows_path: Path,
    out_dir: Path,
    timeout: float,
    rep: int = 0,
) -> dict[str, Any]:
    """One framework on one metric set: reset the server, run the subprocess, read both."""
    tag = f"{framework}-{'+'.join(metrics) if len(metrics) < len(METRICS) else 'all'}-{rep + 1}"
    result_path = out_dir / f"{tag}.json"
    log_path = out_dir / f"{tag}.log"
    result_path.unlink(missing_ok=True)
    server.reset()
    server.answerer.ledger = Ledger()
    env = {
        **os.environ,
        "RAGAS_DO_NOT_TRACK": "true",
        "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
        "DEEPEVAL_NO_INSPECT_PROMPT": "1",
        "OPENAI_API_KEY": "sk-fake-local",
        "OPENAI_BASE_URL": server.base_url,
        "PYTHONUNBUFFERED": "1",
        "TQDM_DISABLE": "1",
    }
    cmd = [
        python_of(framework), str(HERE / f"run_{framework}.py"),
        "--rows", str(rows_path), "--base-url", server.base_url,
        "--metrics", ",".join(metrics), "--out", str(result_path),
    ]  # fmt: skip
    load_before = os.getloadavg()[0]
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    timed_out = False
    # A scratch working directory: deepeval writes .deepeval/ where it runs.
    with (
        tempfile.TemporaryDirectory(prefix=f"peers-{framework}-") as cwd,
        log_path.open("w") as log,
    ):
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, timeout=timeout, check=False,
            )  # fmt: skip
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    process_s = time.monotonic() - t0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    # CPU seconds of the runner (runs are sequential, so the children's delta is this one)
    # and of this process, which is mostly the server answering it.
    client_cpu = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime
    server_cpu = self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
    time.sleep(0.5)  # let answers in flight at a timeout settle into the records
    records = list(server.requests)
    by_status: Counter[str] = Counter(f"{r.path} {r.status}" for r in records)
    shapes: Counter[str] = Counter(_shape(r.body) for r in records if isinstance(r.body, dict))
    runner: dict[str, Any] = {}
    if result_path.exists():
        runner = json.loads(result_path.read_text())
    return {
        "framework": framework,
        "metrics": metrics,
        "rc": rc,
        "timed_out": timed_out,
        "process_s": round(process_s, 2),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "client_cpu_s": round(client_cpu, 2),
        "server_cpu_s": round(server_cpu, 2),
        "server": {
            "stats": server.stats(),
            "by_path_status": dict(by_status),
            "handler_errors": [repr(e) for e in server.handler_errors][:5],
            "request_shapes": dict(shapes.most_common()),
            "samples": [_sample(r.body) for r in records[:3] if isinstance(r.body, dict)],
        },
        "ledger": server.answerer.ledger.as_dict(),
        "runner": runner,
        "log": str(log_path),
    }


def _shape(body: dict[str, Any]) -> str:
    """The parameters a request set (not its text): what each framework sends."""
    rf = body.get("response_format")
    parts = [f"response_format={rf.get('type') if isinstance(rf, dict) else None}"]
    parts += [f"{k}={body[k]}" for k in ("n", "temperature", "max_tokens", "seed") if k in body]
    if "input" in body:
        parts = [f"embeddings x{len(body['input']) if isinstance(body['input'], list) else 1}"]
    return " ".join(parts)


def _sample(body: dict[str, Any]) -> dict[str, Any]:
    """A request with each message cut to its head and tail, to see what is sent."""
    msgs = []
    for m in body.get("messages") or ():
        c = str(m.get("content", "")) if isinstance(m, dict) else ""
        msgs.append({"role": m.get("role"), "chars": len(c),
                     "head": c[:400], "tail": c[-300:] if len(c) > 700 else ""})  # fmt: skip
    keep = {k: v for k, v in body.items() if k not in ("messages", "input")}
    if "response_format" in keep:
        keep["response_format"] = json.dumps(keep["response_format"])[:400]
    return {**keep, "messages": msgs}


def _one(run: dict[str, Any], n_rows: int) -> dict[str, Any]:
    """Per row figures of one run."""
    reqs = run["server"]["stats"]["requests"]
    ledger, runner = run["ledger"], run["runner"]
    failed = runner.get("failed", {})
    if run["timed_out"]:
        fail = f"timeout ({n_rows} rows)"
    elif not runner or "failed" not in runner:
        fail = f"crashed rc={run['rc']} ({n_rows} rows)"
    elif len(run["metrics"]) == 1:
        fail = str(failed.get(run["metrics"][0], n_rows))
    else:
        fail = ", ".join(f"{m}: {failed.get(m, n_rows)}" for m in run["metrics"])
    return {
        "chat_per_row": sum(v for k, v in reqs.items() if k.endswith("/chat/completions")) / n_rows,
        "emb_per_row": sum(v for k, v in reqs.items() if k.endswith("/embeddings")) / n_rows,
        "prompt_tok_per_row": ledger["prompt_tokens"] / n_rows,
        "completion_tok_per_row": ledger["completion_tokens"] / n_rows,
        "emb_tok_per_row": ledger["embedding_tokens"] / n_rows,
        "wall_s": runner.get("wall_s"),
        "process_s": run["process_s"],
        "client_cpu_s": run["client_cpu_s"],
        "failed": fail,
    }


def summarise(runs: list[dict[str, Any]], n_rows: int) -> dict[str, Any]:
    """One table line for the repeats of one (framework, metrics): the median of each figure
    over the repeats, with every repeat's wall time kept beside it."""
    each = [_one(r, n_rows) for r in runs]
    line: dict[str, Any] = {
        "framework": runs[0]["framework"],
        "metric": "all four"
        if len(runs[0]["metrics"]) == len(METRICS)
        else "+".join(runs[0]["metrics"]),
    }
    for key in ("chat_per_row", "emb_per_row", "prompt_tok_per_row", "completion_tok_per_row",
                "emb_tok_per_row", "process_s", "client_cpu_s"):  # fmt: skip
        line[key] = statistics.median(x[key] for x in each)
        line[f"{key}_all"] = [x[key] for x in each]
    walls = [x["wall_s"] for x in each if x["wall_s"] is not None]
    line["wall_s"] = statistics.median(walls) if walls else None
    line["wall_s_all"] = [x["wall_s"] for x in each]
    fails = [x["failed"] for x in each]
    line["failed"] = fails[0] if len(set(fails)) == 1 else " / ".join(fails)
    return line


def markdown(lines: list[dict[str, Any]]) -> str:
    head = (
        "| framework | metric | requests per row (chat + embeddings) | prompt tokens per row "
        "| completion tokens per row | embedding tokens per row | wall time (s) "
        "| process (s) | client CPU (s) | failed rows |\n" + "|---" * 10 + "|\n"
    )
    body = ""
    for x in lines:
        wall = "-" if x["wall_s"] is None else f"{x['wall_s']:.1f}"
        if len(x["wall_s_all"]) > 1 and x["wall_s"] is not None:
            ok = [w for w in x["wall_s_all"] if w is not None]
            wall += f" ({min(ok):.1f}-{max(ok):.1f})"
        emb = f" + {x['emb_per_row']:.2f}" if x["emb_per_row"] else ""
        body += (
            f"| {x['framework']} | {x['metric']} | {x['chat_per_row']:.2f}{emb} "
            f"| {x['prompt_tok_per_row']:.0f} | {x['completion_tok_per_row']:.0f} "
            f"| {x['emb_tok_per_row']:.0f} | {wall} | {x['process_s']:.1f} "
            f"| {x['client_cpu_s']:.1f} | {x['failed']} |\n"
        )
    return head + body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "peers")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--metrics", default=",".join(METRICS))
    p.add_argument("--no-each", action="store_true", help="only the all-metrics run")
    p.add_argument("--no-all", action="store_true", help="only the one-metric runs")
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--capacity", type=int, default=32)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--repeat", type=int, default=1, help="runs of each; the table shows medians")
    p.add_argument(
        "--stock-handler",
        action="store_true",
        help="answer with FakeServer's own handler ({} without a response_format schema)",
    )
    args = p.parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    metrics = [m for m in args.metrics.split(",") if m]
    for name in (*frameworks, *metrics):
        if name not in (*FRAMEWORKS, *METRICS):
            raise SystemExit(f"unknown framework or metric: {name}")
    args.out = args.out.resolve()  # the runners work in scratch directories
    args.out.mkdir(parents=True, exist_ok=True)
    rows = select_rows(args.rows)
    rows_path = args.out / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan: list[list[str]] = [] if args.no_each else [[m] for m in metrics]
    if not args.no_all and len(metrics) > 1:
        plan.append(metrics)
    server = PeerServer(
        Answerer(rows), stock=args.stock_handler, latency=args.latency, capacity=args.capacity
    ).start()
    runs: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    try:
        for framework in frameworks:
            for ms in plan:
                group = []
                for rep in range(args.repeat):
                    print(f"== {framework} {'+'.join(ms)} #{rep + 1}", flush=True)
                    run = run_one(server, framework, ms, rows_path, args.out, args.timeout, rep)
                    group.append(run)
                    print(json.dumps(_one(run, len(rows))), flush=True)
                runs.extend(group)
                lines.append(summarise(group, len(rows)))
    finally:
        server.stop()
    contexts = [len(r["contexts"]) for r in rows]
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "server": {"latency": args.latency, "capacity": args.capacity},
        "repeat": args.repeat,
        "handler": "stock" if args.stock_handler else "Answerer",
        "rows": len(rows),
        "contexts_per_row": {"mean": sum(contexts) / len(contexts), "max": max(contexts)},
        "versions": {r["framework"]: r["runner"].get("versions") for r in runs},
        "lines": lines,
        "runs": runs,
    }  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    table = markdown(lines)
    (args.out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
