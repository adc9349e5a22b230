"""The README's first run on the embedded judge: how long a new user waits, and what for.

The README's main command, `ragframe score data/first_run.parquet -o out/first_run.parquet
--overwrite` (10 short ExpertQA rows, the four core metrics, SmolLM2-135M through xllamacpp,
local MiniLM embeddings), run with an empty cache; `--input data/sample.parquet` runs it on
the 20-row sample, the README's first run before issue 29. Every measurement is a fresh Python
process, so server start, model load and the embedder are paid as a user pays them. Printed per
run: wall seconds, requests, prompt and completion tokens, failures, scored rows per metric, and the
machine's 1-minute load average before and after (other work on a 2-core machine slows
llama.cpp a lot: say how busy it was beside every figure).

    python bench/bench_first_run.py --cli                # the README command, verbatim
    python bench/bench_first_run.py --cli --input data/sample.parquet   # on the 20-row sample
    python bench/bench_first_run.py --rows 4             # the same through the Python API
    python bench/bench_first_run.py --rows 4 --servers 1 --threads 2 --bounds 4,120
    python bench/bench_first_run.py --rows 3 --repeat 2  # determinism: same scores twice?
    python bench/bench_first_run.py --rows 4 --set cont_batching=false --set n_batch=512
    python bench/bench_first_run.py --rows 4 --judge repair_attempts=0
    python bench/bench_first_run.py --rates                   # llama.cpp's own speed here
    python bench/bench_first_run.py --replay trace.jsonl --servers 1 --threads 2
    python bench/bench_first_run.py --replay trace.jsonl --limit 20 --order stage \
        --set cache_prompt=true --repeat 2                # prompt cache: same answers?
    python bench/bench_first_run.py --rates --quant q4_1      # the weights as shipped

`--cli` runs `ragframe score` itself (with `--cache` pointed at a fresh file and
`--no-progress` added) and reads the figures from the output's metadata; without it a child
process runs `ragframe.run` with the settings given, which default to the shipped ones
(`ragframe.judge.local`). `--repeat K` scores K times from K fresh caches: runs 2..K in the
same process (the server keeps its prompt cache) and, with `--restart`, each in a new process
(a new server), and says whether scores and details came back identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample.parquet"
FIRST_RUN = ROOT / "data" / "first_run.parquet"
CORE = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]


def clean_env() -> dict[str, str]:
    """No endpoint, key or model from the user's setup: the embedded judge is what runs."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def rows_file(source: Path, rows: int | None, folder: Path) -> Path:
    """The input itself for all of it, else its first `rows` rows in a file of their own."""
    sample = pl.read_parquet(source)
    if rows is None or rows >= sample.height:
        return source
    path = folder / f"sample_{rows}.parquet"
    sample.head(rows).write_parquet(path)
    return path


def digest(frame: pl.DataFrame, metrics: list[str]) -> tuple[str, dict[str, list[Any]]]:
    """Scores per metric, and one hash over scores and details (a rerun must match it)."""
    cols = [c for m in metrics for c in (m, f"{m}_detail")]
    text = json.dumps(frame.select(cols).to_dicts(), sort_keys=True, default=str)
    scores = {m: frame[m].round(4).to_list() for m in metrics}
    return hashlib.sha256(text.encode()).hexdigest()[:16], scores


def figures(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "prompt_tokens", "completion_tokens", "failures", "repairs", "retries")
    return {k: stats.get(k) for k in keys} | {"by_task": stats.get("requests_by_task")}


# ----------------------------------------------------------------------------- child


def apply_settings(settings: dict[str, Any]) -> None:
    """Set the embedded judge up as asked, before anything starts it."""
    from ragframe.judge import local

    quant = settings.get("quant")
    if quant and quant != "Q4_0":  # other weights than the shipped default, converted here
        source = local._gguf_path()
        assert source is not None
        weights = Path(tempfile.mkdtemp()) / f"smollm2-{quant}.gguf"
        if quant == "Q4_1":
            weights = source  # the file as shipped
        else:
            local._requantize(source, weights, quant)
        local._weights = lambda: weights  # type: ignore[assignment]
    defaults = local.LOCAL_DEFAULTS
    if settings.get("max_tokens") is not None:
        defaults["max_tokens"] = settings["max_tokens"]
    if settings.get("bounds") is not None:
        defaults["output_bounds"] = tuple(settings["bounds"])
    overrides: dict[str, Any] = settings.get("set") or {}
    if overrides:
        original = local._params

        def patched(*args: Any, **kwargs: Any) -> Any:
            params = original(*args, **kwargs)
            for name, value in overrides.items():
                target = params
                *path, leaf = name.split(".")
                for part in path:
                    target = getattr(target, part)
                setattr(target, leaf, value)
            return params

        local._params = patched  # type: ignore[assignment]
    server: dict[str, Any] = {}
    names = (("slots", "n_parallel"), ("ctx", "n_ctx_per_slot"), ("threads", "threads"))
    for key, arg in (*names, ("servers", "servers")):
        if settings.get(key) is not None:
            server[arg] = settings[key]
    if "servers" in server:
        defaults["concurrency"] = server["servers"] * server.get("n_parallel", 1)
    local.start_local_judge(**server)


def trace_requests(path: str) -> None:
    """Append one JSON line per chat request to `path`: task, seconds, llama.cpp's timings."""
    from ragframe.judge import transport

    async def post_chat(self: Any, body: dict[str, Any]) -> Any:
        t0 = time.perf_counter()
        raw = await self._client.post("/chat/completions", body=body, cast_to=bytes)
        reply = json.loads(raw)
        timings = reply.get("timings") or {}
        line = {
            "t": round(t0, 2),
            "s": round(time.perf_counter() - t0, 2),
            "max_tokens": body.get("max_tokens"),
            "usage": reply.get("usage"),
            "finish": reply["choices"][0].get("finish_reason"),
            "timings": {k: round(v, 1) for k, v in timings.items() if isinstance(v, float | int)},
            "user_chars": len(body["messages"][-1]["content"]),
            "schema": ((body.get("response_format") or {}).get("json_schema") or {}).get("name"),
            "content": reply["choices"][0]["message"].get("content"),
            "body": body,
        }
        with open(path, "a") as handle:
            handle.write(json.dumps(line) + "\n")
        return transport._read_completion(raw)

    transport.Transport._post_chat = post_chat  # type: ignore[method-assign]


def sender() -> Any:
    """A function posting one chat body to a free server of the embedded judge (the first
    one free; a thread waits while every server has as many requests as the judge's
    concurrency gives it)."""
    import threading
    import urllib.request

    from ragframe.judge import local

    local.start_local_judge()
    urls = local.local_judge_urls()
    per_server = max(1, int(local.LOCAL_DEFAULTS["concurrency"]) // len(urls))
    free = [url for url in urls for _ in range(per_server)]
    ready = threading.Condition()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def send(body: dict[str, Any]) -> dict[str, Any]:
        with ready:
            while not free:
                ready.wait()
            url = free.pop(0)
        try:
            request = urllib.request.Request(
                url + "/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with opener.open(request, timeout=600) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]
        finally:
            with ready:
                free.append(url)
                ready.notify()

    return send


def replay(settings: dict[str, Any], started: float) -> None:
    """Send the chat bodies a `--trace` file recorded, in its order, as many at once as the
    judge's concurrency: the servers' settings compared on identical work (no stage waits)."""
    import concurrent.futures

    from ragframe.judge import local

    send = sender()
    lines = [json.loads(x) for x in Path(settings["replay"]).read_text().splitlines()]
    bodies = [x["body"] for x in sorted(lines, key=lambda x: x["t"])][: settings.get("limit")]
    order = ordered(bodies, settings.get("order") or "trace")
    workers = local.LOCAL_DEFAULTS["concurrency"]
    for attempt in range(settings["repeat"]):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            sent = list(pool.map(send, [bodies[i] for i in order]))
        wall = time.perf_counter() - t0
        replies = [reply for _, reply in sorted(zip(order, sent, strict=True))]
        # In the trace's order whatever the order sent: digests compare across --order.
        contents = [r["choices"][0]["message"]["content"] for r in replies]
        line = {
            "attempt": attempt,
            "run_s": round(wall, 1),
            "startup_s": round(started, 1) if attempt == 0 else 0.0,
            "digest": hashlib.sha256(json.dumps(contents).encode()).hexdigest()[:16],
            "requests": len(bodies),
            "prompt_tokens": sum(r["usage"]["prompt_tokens"] for r in replies),
            "completion_tokens": sum(r["usage"]["completion_tokens"] for r in replies),
            "cached_tokens": sum(r.get("timings", {}).get("cache_n", 0) for r in replies),
            "length_cut": sum(r["choices"][0]["finish_reason"] == "length" for r in replies),
        }
        print(json.dumps(line), flush=True)


ORDERS = ("trace", "reverse", "stage", "stage-reverse", "shuffle")


def ordered(bodies: list[dict[str, Any]], order: str) -> list[int]:
    """The replayed requests' positions in another arrival order, to see whether answers
    depend on it: `trace` as recorded, `reverse`, `stage` (grouped by schema, i.e. by shared
    instructions, stable within a stage), `stage-reverse` (the stages in reverse, each stage
    reversed), `shuffle` (stages mixed, a fixed seed)."""
    import random

    positions = list(range(len(bodies)))

    def stage(i: int) -> str:
        fmt = bodies[i].get("response_format") or {}
        return str((fmt.get("json_schema") or {}).get("name") or "")

    if order == "trace":
        return positions
    if order == "reverse":
        return positions[::-1]
    if order == "stage":
        return sorted(positions, key=stage)
    if order == "stage-reverse":
        return sorted(positions, key=stage)[::-1]
    if order == "shuffle":
        random.Random(29).shuffle(positions)
        return positions
    raise SystemExit(f"unknown --order {order!r}: {', '.join(ORDERS)}")


def rates(settings: dict[str, Any]) -> None:
    """llama.cpp's own speed on this machine: prefill (a long prompt, one token out) and
    generation with 1..concurrency requests at once (spread over the servers), as tokens per
    wall second and per CPU second of this process (the latter barely moves when other
    programs load the cores)."""
    import concurrent.futures

    from ragframe.judge import local

    post = sender()
    text = pl.read_parquet(SAMPLE)["contexts"].list.join("\n").str.join("\n")[0]

    def send(prompt: str, max_tokens: int) -> dict[str, Any]:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
        return post(body | {"temperature": 0, "model": local.LOCAL_MODEL})  # type: ignore[no-any-return]

    def timed(prompts: list[str], max_tokens: int, key: str) -> dict[str, Any]:
        w0, c0 = time.perf_counter(), time.process_time()
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            replies = list(pool.map(lambda p: send(p, max_tokens), prompts))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        tokens = sum(r["usage"][key] for r in replies)
        per_wall, per_cpu = round(tokens / wall, 1), round(tokens / cpu, 1)
        return {"tokens": tokens, "per_wall_s": per_wall, "per_cpu_s": per_cpu}

    send("Hello", 4)  # warm up
    line: dict[str, Any] = {"prefill": {"tokens": 0, "per_wall_s": [], "per_cpu_s": []}}
    for start in range(0, 4000, 1000):  # one request at a time, different texts
        one = timed([text[start : start + 5000]], 1, "prompt_tokens")
        line["prefill"]["tokens"] += one["tokens"]
        line["prefill"]["per_wall_s"].append(one["per_wall_s"])
        line["prefill"]["per_cpu_s"].append(one["per_cpu_s"])
    story = "Write a long story about a lighthouse keeper and the sea. Chapter {}:"
    for n in sorted({1, 2, int(local.LOCAL_DEFAULTS["concurrency"])}):
        prompts = [story.format(i) for i in range(n)]
        line[f"generate_{n}"] = timed(prompts, 200, "completion_tokens")
    print(json.dumps(line), flush=True)


def child(settings: dict[str, Any]) -> None:
    """Score the rows `repeat` times from fresh caches; print one JSON line per run."""
    t0 = time.perf_counter()
    import ragframe
    from ragframe.judge import local

    if settings.get("trace"):
        trace_requests(settings["trace"])
    apply_settings(settings)
    started = time.perf_counter() - t0
    if settings.get("replay"):
        replay(settings, started)
        return
    if settings.get("rates"):
        rates(settings)
        return
    frame = pl.read_parquet(settings["input"])
    for attempt in range(settings["repeat"]):
        with tempfile.TemporaryDirectory() as tmp:
            options = settings.get("judge") or {}
            judge = ragframe.Judge(cache=Path(tmp) / "cache.sqlite3", progress=False, **options)
            t1 = time.perf_counter()
            result = ragframe.run(frame, settings["metrics"], judge=judge)
            run_s = time.perf_counter() - t1
        hashed, scores = digest(result.frame, settings["metrics"])
        line = {
            "attempt": attempt,
            "run_s": round(run_s, 1),
            "startup_s": round(started, 1) if attempt == 0 else 0.0,
            "digest": hashed,
            "scores": scores,
            "defaults": {k: v for k, v in local.LOCAL_DEFAULTS.items()},
        }
        print(json.dumps(line | figures(result.stats.as_dict()), default=str), flush=True)


# ---------------------------------------------------------------------------- parent


def run_api(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One child process; its lines, each with the wall time, the process's CPU seconds (a
    figure less sensitive to a busy machine than wall time) and the load around it."""
    before = load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=ROOT,
    )
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{stderr[-4000:]}")
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    cpu = round(usage.ru_utime + usage.ru_stime - _cpu_spent(), 1)
    for line in lines:
        line |= {"process_wall_s": round(wall, 1), "process_cpu_s": cpu}
        line |= {"load_before": before, "load_after": load()}
    return lines


_CPU = [0.0]


def _children_cpu() -> float:
    """User and system CPU seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_spent() -> float:
    """CPU seconds of the children measured before this one (RUSAGE_CHILDREN accumulates)."""
    spent = _CPU[0]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    _CPU[0] = usage.ru_utime + usage.ru_stime
    return spent


def run_cli(input_file: Path, rows: int | None, folder: Path) -> dict[str, Any]:
    """The README command as a user types it, plus a fresh --cache file and --no-progress."""
    from ragframe.inputs.io import read_metadata

    source = rows_file(input_file, rows, folder)
    output = folder / "scored.parquet"
    shown = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
    args = ["ragframe", "score", str(shown)]
    args += ["-o", str(output), "--overwrite", "--cache", str(folder / "cache.sqlite")]
    args += ["--no-progress"]
    before = load()
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=clean_env(), cwd=ROOT)
    wall = time.perf_counter() - t0
    cpu = round(_children_cpu() - cpu0, 1)  # the servers' threads included
    if proc.returncode not in (0, 4):
        raise SystemExit(f"ragframe score failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    meta = read_metadata(output)
    stats = meta.get("summary") or {}  # the run's summary: requests, tokens, failures
    hashed, scores = digest(pl.read_parquet(output), CORE)
    return {
        "command": " ".join(args),
        "exit": proc.returncode,
        "process_wall_s": round(wall, 1),
        "process_cpu_s": cpu,
        "load_before": before,
        "load_after": load(),
        "run_s": stats.get("seconds"),
        "digest": hashed,
        "scores": scores,
    } | figures(stats)


def parse_set(items: list[str]) -> dict[str, Any]:
    """`name=value` pairs for xllamacpp.CommonParams (dotted names reach nested params);
    values are read as JSON (`false`, `512`), else kept as text."""
    out: dict[str, Any] = {}
    for item in items:
        name, _, raw = item.partition("=")
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cli", action="store_true", help="run the README command itself")
    parser.add_argument(
        "--input",
        type=Path,
        default=FIRST_RUN,
        help="the rows to score (default: data/first_run.parquet, the README's first run)",
    )
    parser.add_argument("--rows", type=int, help="only the first N rows of --input")
    parser.add_argument("--metrics", default=",".join(CORE))
    parser.add_argument("--servers", type=int, help="llama.cpp servers (default: one per CPU)")
    parser.add_argument(
        "--quant", type=str.upper, help="weights: Q4_0 (default), Q4_1 (as shipped), Q8_0, F16..."
    )
    parser.add_argument("--limit", type=int, help="--replay: only the first N requests")
    parser.add_argument(
        "--order", default="trace", choices=ORDERS, help="--replay: the order requests are sent in"
    )
    parser.add_argument("--slots", type=int, help="llama.cpp slots per server (n_parallel)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads per server")
    parser.add_argument("--ctx", type=int, help="context tokens per slot")
    parser.add_argument("--max-tokens", type=int, help="LOCAL_DEFAULTS max_tokens")
    parser.add_argument("--bounds", help="LOCAL_DEFAULTS output_bounds: items,chars")
    parser.add_argument("--set", action="append", default=[], help="CommonParams name=value")
    parser.add_argument("--judge", action="append", default=[], help="Judge argument name=value")
    parser.add_argument("--repeat", type=int, default=1, help="runs from fresh caches")
    parser.add_argument("--restart", action="store_true", help="each repeat in a new process")
    parser.add_argument("--json", type=Path, help="also append the results to this file")
    parser.add_argument("--trace", type=Path, help="append one line per chat request here")
    parser.add_argument("--replay", type=Path, help="send the requests of a --trace file")
    parser.add_argument("--rates", action="store_true", help="llama.cpp's prefill/decode speed")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.cli:
            results = [run_cli(args.input.resolve(), args.rows, folder)]
        else:
            settings = {
                "input": str(rows_file(args.input.resolve(), args.rows, folder)),
                "metrics": args.metrics.split(","),
                "slots": args.slots,
                "servers": args.servers,
                "quant": args.quant,
                "limit": args.limit,
                "order": args.order,
                "threads": args.threads,
                "ctx": args.ctx,
                "max_tokens": args.max_tokens,
                "bounds": [int(x) for x in args.bounds.split(",")] if args.bounds else None,
                "set": parse_set(args.set),
                "trace": str(args.trace.resolve()) if args.trace else None,
                "replay": str(args.replay.resolve()) if args.replay else None,
                "rates": args.rates,
                "judge": parse_set(args.judge),
            }
            processes = args.repeat if args.restart else 1
            settings["repeat"] = 1 if args.restart else args.repeat
            results = [line for _ in range(processes) for line in run_api(settings)]
    label = {"rows": args.rows, "input": str(args.input), "argv": sys.argv[1:]}
    for result in results:
        print(json.dumps(label | result, default=str))
    if len(results) > 1:
        same = len({r["digest"] for r in results}) == 1
        print(f"identical scores and details across {len(results)} runs: {same}")
    if args.json is not None:
        with args.json.open("a") as handle:
            for result in results:
                handle.write(json.dumps(label | result, default=str) + "\n")


if __name__ == "__main__":
    main()
