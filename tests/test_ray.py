"""Scoring on Ray Data (`ragframe.ray`, `ragframe score DIR -o OUT --ray`).

On a local Ray cluster started by this module (`ray.init(num_cpus=2)`, loopback only, shut
down at the end), against the scripted server. The promises: the Ray path gives what a
single-process run gives (score and detail columns, row order within blocks), with the
cluster's concurrency shared among actors and actors spread over several endpoints; an actor
killed mid-run (SIGKILL) is restarted by Ray and every row is scored; a driver killed mid-run
and started again with the same command sends nothing for a finished partition and nothing
the shared cache had answered. Without Ray, the error names the extra and `import ragframe`
imports nothing of Ray. The shared cache's files and the judge's endpoints are unit-tested
first (no cluster needed).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from conftest import judge_for, wait_for
from test_arrow import rows

import ragframe
from ragframe import Judge
from ragframe.judge.cache import SharedAnswerCache
from ragframe.judge.limits import Reservations, share
from ragframe.testing.server import FakeServer, Faults, Reply, auto_answer

METRICS = ["faithfulness", "context_recall"]
ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------- no cluster needed


def test_shared_cache_one_writer_per_file_reading_all(tmp_path: Path) -> None:
    first = SharedAnswerCache(tmp_path, "actor-0")
    second = SharedAnswerCache(tmp_path, "actor-1")
    same_name = SharedAnswerCache(tmp_path, "actor-0")  # claimed by `first`: another file
    payload = {"value": '{"a":1}', "content": "{}", "usage": {"prompt_tokens": 3}}
    first.put("k1", "m", payload)
    second.put("k2", "m", payload)
    assert same_name.path.name == "actor-0.1.sqlite3"
    assert set(same_name.get_many(["k1", "k2", "k3"])) == {"k1", "k2"}  # reads every file
    assert set(first.get_many(["k1", "k2"])) == {"k1", "k2"}
    assert len(first) == 1 and len(same_name) == 0  # each wrote only its own
    for cache in (first, second, same_name):
        cache.close()
    again = SharedAnswerCache(tmp_path, "actor-0")  # released at close: the name is free again
    assert again.path.name == "actor-0.sqlite3" and set(again.get_many(["k1"])) == {"k1"}
    again.close()


def test_an_actor_reads_the_answers_of_the_others(tmp_path: Path) -> None:
    """Each actor's session reads every actor's file: rows one actor scored cost another
    nothing (a batch retried, or a rerun's batch, lands on any actor)."""
    pytest.importorskip("ray")
    from ragframe.engine.arrow import ArrowSession, prepare
    from ragframe.ray import actor_judge

    frame = rows(4)
    with FakeServer() as server:
        judge = judge_for(server, tmp_path, concurrency=2)
        scored = []
        for slot in (0, 1):
            own = actor_judge(judge, slot, 2, tmp_path / "cache")
            with ArrowSession(own) as session:
                scored.append(session.score(frame, prepare(frame, METRICS, session.judge)))
            own.cache.close()  # type: ignore[union-attr]
            if slot == 0:
                sent = len(server.chat_attempts)
    assert sent > 0 and len(server.chat_attempts) == sent  # the second actor sent nothing
    assert scored[1].equals(scored[0])


KILLED_WRITER = """
import os, signal, sys
from ragframe.judge.cache import SharedAnswerCache
cache = SharedAnswerCache(sys.argv[1], "actor-0")
for i in range(40):
    cache.put(f"k{i}", "m", {"value": "1", "content": "x"})  # returns once committed
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_answers_committed_before_a_sigkill_are_read_by_the_others(tmp_path: Path) -> None:
    """A writer killed without closing leaves its answers in its WAL; another actor's
    read-only connection recovers them (the -shm is writable), none is lost or passed over."""
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "actor-0.sqlite3-wal").stat().st_size > 0  # not checkpointed
    reader = SharedAnswerCache(tmp_path, "actor-1")
    assert len(reader.get_many([f"k{i}" for i in range(40)])) == 40
    reader.close()


def test_cluster_limits_are_shared_out() -> None:
    assert [share(16, 3, i) for i in range(3)] == [6, 5, 5]
    assert sum(share(7, 7, i) for i in range(7)) == 7


def test_every_actor_gets_batches_of_a_modest_log() -> None:
    """16 rows per request slot of an actor, fewer when the log would not give every actor
    two batches; never fewer than one row per slot."""
    pytest.importorskip("ray")
    from ragframe.ray import batch_rows

    assert batch_rows(32, 4) == 128  # size unknown: 16 per slot
    assert batch_rows(32, 4, 100_000) == 128
    for log, actors in [(300, 4), (200, 2), (600, 4), (50, 4)]:
        size = batch_rows(32, actors, log)
        assert -(-log // size) >= min(2 * actors, log // (32 // actors))
    assert batch_rows(32, 4, 10) == 8


def test_the_cluster_buckets_reserve_as_the_rate_limiter_waits() -> None:
    """One second's worth at once, then one request per 1/rate s, however the asks are
    grouped; a request larger than the token bucket waits for a full one, then leaves debt."""
    one_call = Reservations(600, None).reserve([1] * 14, now=0.0)
    grouped = Reservations(600, None)
    in_calls = grouped.reserve([1] * 4, now=0.0) + grouped.reserve([1] * 10, now=0.0)
    assert one_call == pytest.approx(in_calls)
    assert one_call == pytest.approx([0.0] * 10 + [0.1, 0.2, 0.3, 0.4])
    tokens = Reservations(None, 600)  # 10 tokens a second
    assert tokens.reserve([4, 4, 4, 30, 1], now=0.0) == pytest.approx([0, 0, 0.2, 1.2, 3.3])
    later = Reservations(600, 600)
    later.reserve([10], now=0.0)
    assert later.reserve([1], now=5.0) == [0.0]  # refilled meanwhile


def test_several_endpoints_one_identity() -> None:
    urls = ["http://10.0.0.2:8000/v1", "http://10.0.0.1:8000/v1"]
    judge = Judge("m", base_url=urls, api_key="k", cache=False)
    assert judge.base_url == urls[0]
    assert judge.endpoint_host == "10.0.0.1:8000,10.0.0.2:8000"
    second = judge.for_endpoint(1)
    assert second.base_url == urls[1] and second.endpoint_host == judge.endpoint_host
    assert Judge("m", base_url=",".join(urls), api_key="k", cache=False).base_urls == tuple(urls)
    smaller = judge.replace(concurrency=3, requests_per_minute=10.0)
    assert (smaller.concurrency, smaller.requests_per_minute, judge.concurrency) == (3, 10.0, 16)


def test_without_ray_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import ragframe, ragframe.engine.arrow, ragframe.cli, ragframe.cli.ray_score\n"
        "loaded = [m for m in sys.modules if sys.modules[m] and m.split('.')[0] == 'ray']\n"
        "assert not loaded, loaded\n"
        "try:\n    import ragframe.ray\nexcept ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("RayNotInstalled") and "pip install 'ragframe[ray]'" in out.stdout


# ------------------------------------------------------------------- on a local cluster


def blocks(frame: pl.DataFrame, size: int) -> list[pa.Table]:
    return [frame.slice(i, size).to_arrow() for i in range(0, frame.height, size)]


def scored_in_order(ds: Any, frame: pl.DataFrame) -> pl.DataFrame:
    """The output's rows, each block checked to keep its input order, put in input order."""
    import ray

    position = {key: i for i, key in enumerate(frame.get_column("id"))}
    parts = []
    for ref in ds.to_arrow_refs():
        block = pl.from_arrow(ray.get(ref))
        assert isinstance(block, pl.DataFrame)
        order = [position[k] for k in block.get_column("id")]
        assert order == sorted(order)  # row order within a block is the input's
        parts.append(block)
    return pl.concat(parts).sort(pl.col("id").replace_strict(position))


def test_ray_equals_one_process_over_two_endpoints(cluster: str, tmp_path: Path) -> None:
    from ragframe.ray import evaluate

    frame = rows(24)
    with FakeServer(latency=0.05) as one, FakeServer(latency=0.05) as two:
        expected = ragframe.run(frame, METRICS, judge=judge_for(one, tmp_path)).frame
        one.reset()
        judge = judge_for(one, tmp_path, base_url=[one.base_url, two.base_url], concurrency=4)
        ds = ray_data().from_arrow(blocks(frame, 8))
        out = evaluate(ds, METRICS, judge, actors=2, batch_size=4, num_cpus=0.5)
        got = scored_in_order(out, frame)
        assert got.equals(expected)
        # Two actors, one per endpoint, each with 2 of the cluster's 4 slots.
        assert one.chat_requests and two.chat_requests
        assert one.max_in_flight <= 2 and two.max_in_flight <= 2


def test_an_actor_killed_mid_run_is_restarted(cluster: str, tmp_path: Path) -> None:
    from ragframe.ray import evaluate, scorer_actors

    frame = rows(40)
    with FakeServer(latency=0.05) as server:
        expected = ragframe.run(frame, METRICS, judge=judge_for(server, tmp_path)).frame
        server.reset()
        judge = judge_for(server, tmp_path, concurrency=4)
        ds = ray_data().from_arrow(blocks(frame, 8))
        out = evaluate(ds, METRICS, judge, actors=2, batch_size=4, num_cpus=0.5, cache_dir=tmp_path)
        killed: list[int] = []
        killer = threading.Thread(target=kill_an_actor, args=(server, 20, killed), daemon=True)
        killer.start()
        got = scored_in_order(out, frame)
        killer.join(60)
    assert killed, "no actor was killed: the run ended before 20 requests"
    assert got.equals(expected)  # every row, scored as one process scores it
    restarted = [a for a in scorer_actors() if a["pid"] not in killed and a["starts"] > 1]
    assert restarted  # Ray restarted the killed actor (same actor id, a new process)


def test_one_limiter_actor_holds_the_cluster_rate(cluster: str, tmp_path: Path) -> None:
    """By default one limiter actor holds the cluster's rate: every request (429s included)
    asks it, many per call,
    so the cluster sends no faster than its rate (a second's burst, then 10/s: the n-th
    request goes (n - 10) / 10 s after the first ask at the earliest); a 429 still pauses
    the actor's pool and the request is sent again."""
    from ragframe.ray import evaluate, limiter_counts

    frame = rows(16)
    with FakeServer(faults=Faults(rate_429=0.1, retry_after=0.05)) as server:
        judge = judge_for(server, tmp_path, concurrency=4, requests_per_minute=600)
        ds = ray_data().from_arrow(blocks(frame, 8))
        out = evaluate(ds, METRICS, judge, actors=2, batch_size=8, num_cpus=0.5)
        asked = time.monotonic()  # before the first ask: the dataset is lazy
        got = scored_in_order(out, frame)
        starts = sorted(r.started for r in server.requests if r.path.endswith("/completions"))
    assert got.height == 16 and got.get_column("context_recall").null_count() == 0
    assert any(r.status == 429 for r in server.requests)  # throttled, and sent again
    counts = limiter_counts()
    assert counts is not None and counts["granted"] == len(starts) > 20
    assert counts["calls"] < counts["granted"]  # asks travel together
    assert starts[-1] - asked >= (len(starts) - 10) / 10


def test_limits_must_be_known(cluster: str, tmp_path: Path) -> None:
    from ragframe.ray import evaluate

    ds = ray_data().from_arrow(blocks(rows(2), 2))
    with pytest.raises(ragframe.ConfigError, match="divided, actor"):
        evaluate(ds, METRICS, Judge("m", api_key="k", cache=False), limits="both")  # type: ignore[arg-type]


def kill_an_actor(server: FakeServer, after: int, killed: list[int]) -> None:
    """SIGKILL one scoring actor's process once the server has answered `after` requests."""
    from ragframe.ray import scorer_actors

    deadline = time.monotonic() + 60
    while len(server.chat_requests) < after and time.monotonic() < deadline:
        time.sleep(0.02)
    actors = scorer_actors()
    if actors and time.monotonic() < deadline:
        pid = actors[0]["pid"]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)


def ray_data() -> Any:
    import ray.data

    return ray.data


# ---------------------------------------------------------------- the command line

DRIVER = """
import sys
from ragframe.cli import main
sys.exit(main(sys.argv[1:]))
"""
# Until `ragframe score` has --ray wired in, the same command through its parts.
DRIVER_PARTS = """
import argparse, sys
from ragframe.cli import common, options, score
from ragframe.cli.ray_score import add_ray_options, score_with_ray
from ragframe.metrics import resolve
parser = argparse.ArgumentParser()
command = score.add_parser(parser.add_subparsers())
if not any("--ray" in action.option_strings for action in command._actions):
    add_ray_options(command)
args = parser.parse_args(sys.argv[1:])
metrics = resolve(common.parse_metrics(args.metrics))
judge = options.judge_from_args(args)
sys.exit(score_with_ray(args, judge, metrics, common.parse_columns(args.columns)))
"""


def ray_command(
    source: Path,
    out: Path,
    server: FakeServer,
    cache: Path,
    address: str,
    metrics: list[str] = METRICS,
) -> list[str]:
    from ragframe.cli import build_parser

    wired = "--ray" in build_parser()._subparsers._group_actions[0].choices["score"].format_help()  # type: ignore[union-attr]
    code = DRIVER if wired else DRIVER_PARTS
    return [
        sys.executable, "-c", code, "score", str(source), "-o", str(out),
        "--metrics", ",".join(metrics), "--model", "fake-judge", "--base-url", server.base_url,
        "--ray", address, "--actors", "2", "--concurrency", "2", "--batch-rows", "3",
        "--cache", str(cache), "--no-progress",
    ]  # fmt: skip


def partitions(root: Path, frame: pl.DataFrame, per_file: int) -> list[Path]:
    files = []
    for i in range(0, frame.height, per_file):
        path = root / f"day={i // per_file}" / "part-0.parquet"
        path.parent.mkdir(parents=True)
        frame.slice(i, per_file).write_parquet(path)
        files.append(path)
    return files


def cached_answers(cache: Path) -> int:
    """The distinct answers in every actor's file (read-only, as the actors read them)."""
    keys: set[str] = set()
    for path in cache.glob("*.sqlite3"):
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        keys.update(key for (key,) in db.execute("SELECT key FROM answers"))
        db.close()
    return len(keys)


def test_a_driver_killed_mid_run_resumes(cluster: str, tmp_path: Path) -> None:
    frame = rows(24)
    files = partitions(tmp_path / "in", frame, 6)
    out, cache = tmp_path / "out", tmp_path / "cache"
    targets = [out / f.relative_to(tmp_path / "in") for f in files]
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-not-a-real-key", "RAY_ADDRESS": ""}
    gate = threading.Event()
    gate.set()
    # The last row's requests wait at the server until the gate opens: the driver is surely
    # killed before the last partition is answered, however loaded the host. (One batch
    # held: one actor waits, the other scores the rest, no batch queued behind the held one.)
    with FakeServer(held_while_closed(gate, r"\[23\]"), latency=0.2) as server:
        reference = ragframe.run(frame, METRICS, judge=judge_for(server, tmp_path, concurrency=8))
        needed = reference.stats.requests  # every distinct request of the 24 rows
        server.reset()
        gate.clear()
        command = ray_command(tmp_path / "in", out, server, cache, cluster)
        driver = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        first_done = wait_for(lambda: targets[0].exists() or driver.poll() is not None, 120)
        driver.send_signal(signal.SIGKILL)
        _, problem = driver.communicate()
        assert driver.returncode == -signal.SIGKILL, problem[-3000:]
        assert first_done and targets[0].exists() and not targets[-1].exists()
        # Its actors die with it: once each actor's claim on its cache file is released (the
        # kernel drops the lock when the process is gone), nothing more can be answered.
        assert wait_for(lambda: released(cache), 60)
        gate.set()
        assert wait_for(lambda: server.in_flight == 0, 30)
        finished = {t: t.stat().st_mtime_ns for t in targets if t.exists()}
        answered = cached_answers(cache)
        assert 0 < answered < needed
        server.reset()
        again = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        assert again.returncode == 0, again.stderr[-3000:]
        # Nothing re-sent: neither a finished partition's requests nor any answered one,
        # whichever actor answered it (each reads every actor's file).
        assert len(server.chat_attempts) == needed - answered
        assert {t: t.stat().st_mtime_ns for t in finished} == finished  # skipped, untouched
        assert f"{len(finished)} already scored" in again.stdout
    for source, target in zip(files, targets, strict=True):
        ids = pl.read_parquet(source).get_column("id").implode()
        expected = reference.frame.filter(pl.col("id").is_in(ids))
        assert pl.read_parquet(target).equals(expected)
        meta = ragframe.read_metadata(target)
        assert meta["judge"]["model"] == "fake-judge" and meta["summary"]["rows"] == 6
        assert set(meta["metrics"]) == set(METRICS) and meta["input"]["rows"] == 6


def held_while_closed(gate: threading.Event, pattern: str) -> Callable[[dict[str, Any]], Any]:
    """A server handler: requests whose messages match `pattern` wait while `gate` is
    closed (a client that hangs up meanwhile is dropped); every request gets a valid answer."""
    held = re.compile(pattern)

    async def handle(body: dict[str, Any]) -> str:
        if held.search(json.dumps(body.get("messages"))):
            while not gate.is_set():
                await asyncio.sleep(0.02)
        return auto_answer(body)

    return handle


def released(cache: Path) -> bool:
    """Whether no live process holds a claim on an actor's file in `cache` (see `_claim`)."""
    for path in cache.glob("*.lock"):
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def refused(body: dict[str, Any]) -> Reply:
    """A server handler refusing every request for good (a 400 is not retried)."""
    return Reply(status=400, content="refused: this test's server takes no request")


def test_fail_fast_on_ray_stops_with_the_one_line_of_one_process(
    cluster: str, tmp_path: Path
) -> None:
    """`score --ray --fail-fast`, every request refused: the line and exit status of the
    same command without Ray. (Ray wraps an actor's error in its own, whose text is the
    worker's traceback with Ray's retry advice appended; that used to escape as a traceback,
    exit status 1, which means a failed gate.) Nothing is written."""
    files = partitions(tmp_path / "in", rows(6), 3)
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-not-a-real-key", "RAY_ADDRESS": ""}
    metrics = ["faithfulness"]  # one first stage: whichever row fails first, the same line
    with FakeServer(refused) as server:
        plain = [sys.executable, "-c", DRIVER, "score", str(files[0]), "-o", str(tmp_path / "a.pq")]
        plain += ["--metrics", "faithfulness", "--model", "fake-judge"]
        plain += ["--base-url", server.base_url, "--no-cache", "--no-progress", "--fail-fast"]
        one = subprocess.run(plain, env=env, cwd=ROOT, capture_output=True, text=True)
        on_ray = ray_command(
            tmp_path / "in", tmp_path / "out", server, tmp_path / "c", cluster, metrics
        )
        got = subprocess.run(
            [*on_ray, "--fail-fast"], env=env, cwd=ROOT, capture_output=True, text=True
        )
    assert one.returncode == 2, one.stderr[-3000:]
    line = one.stderr.strip().splitlines()[-1]
    assert line.startswith("ragframe: error: ") and "refused: this test's server" in line
    assert got.returncode == 2, got.stderr[-3000:]
    assert got.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in got.stderr
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_fail_fast_on_ray_raises_the_error_as_raised(cluster: str, tmp_path: Path) -> None:
    """`score_partitions` with fail_fast raises the actor's ragframe error itself: the class
    and message one process raises, without Ray's wrapper or the advice it appends."""
    from ragframe.ray import score_partitions

    frame = rows(4)
    partitions(tmp_path / "in", frame, 4)
    with FakeServer(refused) as server:
        judge = judge_for(server, tmp_path, fail_fast=True, concurrency=2)
        with pytest.raises(ragframe.JudgeError) as alone:
            ragframe.run(frame, ["faithfulness"], judge=judge)
        with pytest.raises(ragframe.JudgeError) as on_ray:
            score_partitions(
                tmp_path / "in", tmp_path / "out", ["faithfulness"], judge, actors=1,
                num_cpus=0.5,
            )  # fmt: skip
    import ray.exceptions

    assert type(on_ray.value) is type(alone.value)
    assert not isinstance(on_ray.value, ray.exceptions.RayError)
    assert str(on_ray.value) == str(alone.value)
    assert "refused: this test's server" in str(alone.value)


def test_every_additive_count_of_a_session_is_carried_from_the_actors() -> None:
    """A partition's stats add up its batches' `stats_counts`: a count left out of that list
    (kept_failures was) reads 0 in a Ray run's summary whatever the actors saw. The figures
    that do not add up across actors (the pool's lowest limit, its pauses) are listed apart."""
    import dataclasses

    from ragframe.judge.results import RunStats
    from ragframe.ray.actors import stats_counts

    not_additive = {"lowest_concurrency", "rate_limit_pauses", "rate_limit_paused_s"}
    counts = {
        f.name
        for f in dataclasses.fields(RunStats)
        if f.type in ("int", int) and f.name not in not_additive
    }
    assert counts <= set(stats_counts(RunStats()))
