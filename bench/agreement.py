"""Faithfulness of ragframe, ragas and deepeval beside each other: agreement with the experts
of ExpertQA on the same rows, through the same judge endpoint, with the requests and tokens
each one spent, counted at the endpoint.

    python bench/agreement.py --rows 20                                  # the embedded judge
    python bench/agreement.py --rows 100 --base-url URL --model M        # your judge

The rows are the first N of ragframe's judge-benchmark set `expertqa` (ExpertQA
retrieve-and-read answers, labelled claim by claim by domain experts; MIT): a prefix of that
file is a fair sample. Each tool scores faithfulness; `ragframe.agreement` then measures each
tool's scores against the experts' `faithful` (binary: AUROC, and balanced accuracy and
Cohen's kappa at a cross-validated threshold) and `frac_cited_claims_supported` (Spearman),
every figure with its 95 % bootstrap interval, on the rows that tool scored.

Every request goes through a counting proxy started here in front of the endpoint, so each
tool's requests and tokens are measured the same way (from the usage the endpoint returns),
whatever the tool itself reports. The peers run in their own virtual environments
(`bash bench/peers/setup.sh`; ragas 0.4.3, deepeval 4.3.1), through `bench/peers/run_ragas.py`
and `run_deepeval.py` at their defaults; a peer whose environment is missing is reported as
such. Without `--base-url` the embedded judge (SmolLM2-135M through llama.cpp) is started and
ragframe drives it with its documented local settings (`ragframe.judge.local.LOCAL_DEFAULTS`:
a completion cap, bounded lists and strings, 2 requests at once, no reasons); the peers have
no such settings and run as they are. A 135M model is near chance as a judge: on it these
figures test the plumbing, not the metrics. With a real endpoint every tool runs at its
defaults, ragframe's cache off; `$OPENAI_API_KEY`, when set, is sent to the endpoint by the
proxy (the tools themselves get a placeholder).

Writes `--out` (default bench/out/agreement): rows.jsonl, one JSON per peer run, results.json
and results.md (the table).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEERS = HERE / "peers"
TOOLS = ("ragframe", "ragas", "deepeval")
VENVS = {
    "ragas": Path(os.environ.get("PEERS_RAGAS_VENV", PEERS / ".venv-ragas")),
    "deepeval": Path(os.environ.get("PEERS_DEEPEVAL_VENV", PEERS / ".venv-deepeval")),
}


# ------------------------------------------------------------------------------ counting proxy


class Ledger:
    """Requests, statuses and token usage per tool, as the endpoint answered them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tool = "none"
        self.counts: dict[str, Counter[str]] = {}

    def note(self, what: str) -> None:
        with self.lock:
            self.counts.setdefault(self.tool, Counter())[what] += 1

    def add(self, path: str, status: int, usage: dict[str, Any] | None) -> None:
        with self.lock:
            c = self.counts.setdefault(self.tool, Counter())
            c["requests"] += 1
            c[f"path {path}"] += 1
            c[f"status {status}"] += 1
            for key in ("prompt_tokens", "completion_tokens"):
                c[key] += int((usage or {}).get(key) or 0)


def start_proxy(
    upstream: str, ledger: Ledger, api_key: str | None = None
) -> tuple[ThreadingHTTPServer, str]:
    """A proxy on 127.0.0.1 forwarding /v1/... to `upstream` (a base URL ending in /v1) and
    recording each answer in `ledger`; returns the server and its base URL. With `api_key`,
    the proxy sends it upstream in place of whatever key a tool sent (the peers' runners send
    a placeholder), so the key stays in this process."""
    base = upstream.rstrip("/")

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            path = self.path.removeprefix("/v1")
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() in ("content-type", "authorization", "accept")
            }
            if api_key:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                headers["Authorization"] = f"Bearer {api_key}"
            request = urllib.request.Request(
                base + path, data=body, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(request, timeout=900) as answer:
                    status, payload = answer.status, answer.read()
                    kind = answer.headers.get("Content-Type", "application/json")
            except urllib.error.HTTPError as err:
                status, payload = err.code, err.read()
                kind = err.headers.get("Content-Type", "application/json")
            except OSError as err:
                status, payload, kind = 502, json.dumps({"error": str(err)}).encode(), "text/json"
            usage = None
            if status == 200 and b'"usage"' in payload:
                try:
                    usage = json.loads(payload).get("usage")
                except ValueError:
                    usage = None
            ledger.add(path.split("?")[0], status, usage)
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (a peer's own timeout, or ours killing it)
                ledger.note("answered after the client hung up")

        do_POST = do_GET = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


# ------------------------------------------------------------------------------ the tools


def rows_of(n: int) -> pl.DataFrame:
    from ragframe.decide.judge_bench import load_set

    return load_set("expertqa", n).select(
        "id", "question", "answer", "contexts", "faithful", "frac_cited_claims_supported"
    )


def run_ragframe(rows: pl.DataFrame, base_url: str, model: str, local: bool) -> dict[str, Any]:
    import ragframe
    from ragframe import Judge
    from ragframe.judge.local import LOCAL_DEFAULTS

    options: dict[str, Any] = dict(LOCAL_DEFAULTS) if local else {}
    judge = Judge(
        model, base_url=base_url, api_key="sk-local", cache=False, progress=False, **options
    )
    t0 = time.monotonic()
    result = ragframe.run(rows, ["faithfulness"], judge=judge)
    errors = result.frame.get_column("faithfulness_detail").struct.field("error").drop_nulls()
    return {
        "scores": result.frame.get_column("faithfulness").to_list(),
        "wall_s": round(time.monotonic() - t0, 1),
        "errors": dict(Counter(e[:200] for e in errors.to_list()).most_common(5)),
        "config": {k: str(v) for k, v in options.items()},
    }


def run_peer(
    tool: str, rows_path: Path, base_url: str, model: str, timeout: float, out: Path
) -> dict[str, Any]:
    """One peer's runner in its own environment; its result file, or why there is none."""
    python = VENVS[tool] / "bin" / "python"
    if not python.exists():
        return {"missing": f"no environment at {VENVS[tool]} (run bash bench/peers/setup.sh)"}
    result_path = out / f"{tool}.json"
    env = {
        **os.environ,
        "RAGAS_DO_NOT_TRACK": "true",
        "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
        "DEEPEVAL_NO_INSPECT_PROMPT": "1",
        "OPENAI_API_KEY": "sk-local",  # the proxy sends the real key upstream
    }
    command = [
        str(python),
        str(PEERS / f"run_{tool}.py"),
        *("--rows", str(rows_path), "--base-url", base_url, "--metrics", "faithfulness"),
        *("--out", str(result_path), "--model", model),
    ]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch, open(out / f"{tool}.log", "w") as log:
        try:
            subprocess.run(command, cwd=scratch, env=env, stdout=log, stderr=log, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"timeout": f"stopped after {timeout:.0f} s", "wall_s": round(timeout, 1)}
    wall = round(time.monotonic() - t0, 1)
    if not result_path.exists():
        return {"crashed": f"no result; see {out / f'{tool}.log'}", "wall_s": wall}
    got = json.loads(result_path.read_text())
    return {
        "scores": (got.get("scores") or {}).get("faithfulness"),
        "wall_s": got.get("wall_s", wall),
        "errors": got.get("errors") or got.get("exception"),
        "versions": got.get("versions"),
    }


# ------------------------------------------------------------------------------ agreement


def figures(rows: pl.DataFrame, scores: list[float | None] | None, seed: int) -> dict[str, Any]:
    from ragframe.decide.agreement import agreement

    if not scores:
        return {}
    frame = rows.with_columns(pl.Series("score", scores, pl.Float64))
    binary = agreement(frame, "score", "faithful", direction="higher", seed=seed)
    ordinal = agreement(
        frame, "score", "frac_cited_claims_supported", "ordinal", direction="higher", seed=seed
    )
    table = pl.concat([binary, ordinal])
    out: dict[str, Any] = {"scored": int(frame["score"].count())}
    for name in ("auroc", "balanced_accuracy", "kappa", "spearman"):
        row = table.filter(pl.col("figure") == name).row(0, named=True)
        out[name] = {k: row[k] for k in ("value", "ci_low", "ci_high", "n")}
    return out


def cell(f: dict[str, Any] | None) -> str:
    if not f or f.get("value") is None:
        return "—"
    if f.get("ci_low") is None:
        return f"{f['value']:.2f}"
    return f"{f['value']:.2f} [{f['ci_low']:.2f}, {f['ci_high']:.2f}]"


def markdown(results: dict[str, Any], n: int) -> str:
    head = (
        "| tool | rows scored | AUROC vs `faithful` | balanced accuracy (CV) | kappa (CV) | "
        "Spearman vs `frac_cited_claims_supported` | requests | prompt tokens | "
        "completion tokens | wall s |"
    )
    lines = [head, "|" + " --- |" * 10]
    for tool, r in results.items():
        use = r.get("usage") or {}
        f = r.get("agreement") or {}
        why = r.get("missing") or r.get("timeout") or r.get("crashed")
        scored = f"{f.get('scored', 0)} of {n}" + (f" ({why})" if why else "")
        lines.append(
            f"| {tool} | {scored} | {cell(f.get('auroc'))} | {cell(f.get('balanced_accuracy'))} "
            f"| {cell(f.get('kappa'))} | {cell(f.get('spearman'))} | {use.get('requests', 0)} "
            f"| {use.get('prompt_tokens', 0)} | {use.get('completion_tokens', 0)} "
            f"| {r.get('wall_s', '—')} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: embedded judge)")
    parser.add_argument("--model", help="judge model (default: the embedded judge's)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per peer run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "agreement")
    args = parser.parse_args()
    args.out = args.out.resolve()  # the peers run in a scratch directory
    local = args.base_url is None
    upstream, model = args.base_url, args.model
    if local:
        from ragframe.judge.local import LOCAL_MODEL, start_local_judge

        upstream, model = start_local_judge(), model or LOCAL_MODEL
    if model is None:
        parser.error("--model is required with --base-url")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = rows_of(args.rows)
    rows_path = args.out / "rows.jsonl"
    rows_path.write_text(
        "\n".join(
            json.dumps({**r, "ground_truth": None})
            for r in rows.select("question", "answer", "contexts").to_dicts()
        )
        + "\n"
    )
    ledger = Ledger()
    key = None if local else os.environ.get("OPENAI_API_KEY")
    proxy, base_url = start_proxy(str(upstream), ledger, key)
    results: dict[str, Any] = {}
    for tool in args.tools.split(","):
        ledger.tool = tool
        print(f"{tool} ...", flush=True)
        if tool == "ragframe":
            got = run_ragframe(rows, base_url, str(model), local)
        else:
            got = run_peer(tool, rows_path, base_url, str(model), args.timeout, args.out)
        got["usage"] = dict(ledger.counts.get(tool, {}))
        got["agreement"] = figures(rows, got.get("scores"), args.seed)
        results[tool] = got
        print(f"  {json.dumps({k: v for k, v in got.items() if k != 'scores'}, default=str)}")
    proxy.shutdown()
    table = markdown(results, rows.height)
    meta = {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "judge": {"model": model, "local": local, "endpoint": "embedded" if local else upstream},
        "rows": rows.height,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}",
        "command": " ".join(sys.argv),
    }
    (args.out / "results.json").write_text(
        json.dumps({**meta, "results": results}, indent=2, default=str)
    )
    (args.out / "results.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
