"""`ragframe generate` (ragframe.cli.generate) against the stand-in judge: the files it writes,
the dry run's estimate against the requests a real run then sends, --max-cost, every
configuration error before any request (exit 2, one line), the cache, and one end-to-end run
as a subprocess.

The stand-in's answers are test_generate's `scripted` ones: distinct questions, every claim
supported, every question self-contained and answerable unless written as unanswerable.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import fenced, task_name, user_text, wait_for
from test_generate import DOCS, check, proposer, scripted

from ragframe.cli import main
from ragframe.engine.generate import DETAIL, estimate_generate
from ragframe.testing.server import messages_hash

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [
    "question",
    "ground_truth",
    "reference_contexts",
    "reference_context_ids",
    "doc_ids",
    "question_type",
    "generation_detail",
]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the four shipped-in-the-test documents under docs/."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGFRAME_CACHE", raising=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    return tmp_path


def judge_args(server: Any, folder: Path, *extra: str) -> list[str]:
    return [
        "--base-url",
        server.base_url,
        "--model",
        "fake-judge",
        "--embedding-model",
        "fake-embedding",
        "--cache",
        str(folder / "cache.sqlite3"),
        "--no-progress",
        "--no-config",
        *extra,
    ]


def generate(server: Any, folder: Path, *extra: str, n: int = 6) -> int:
    return main(["generate", "docs", "-n", str(n), *extra, *judge_args(server, folder)])


def by_task(server: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for body in server.chat_requests:
        name = task_name(body).replace("_", ".", 1)
        counts[name] = counts.get(name, 0) + 1
    return counts


def embedded_texts(server: Any) -> int:
    return sum(len(r.body["input"]) for r in server.requests if r.path.endswith("/embeddings"))


# ------------------------------------------------------------------------------ the files


def test_writes_the_test_set_and_the_rejected_file_and_the_summary_counts_them(
    server, folder, capsys
):
    def loose(item: int, pair: dict[str, str]) -> None:
        if item == 2:
            pair["question"] = "According to the passage, " + pair["question"]

    server.handler = scripted(generate_single_hop=proposer("single", loose))
    status = generate(
        server, folder, "-o", "set.parquet", "--rejected", "rejected.parquet", "--types",
        "single_hop", n=4,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    kept = pl.read_parquet(folder / "set.parquet")
    rejected = pl.read_parquet(folder / "rejected.parquet")
    assert kept.columns == COLUMNS and kept.height == 4
    assert kept.schema["generation_detail"] == DETAIL
    # a single_hop check reads its source chunk only: the chunk ids checked are recorded
    checked = kept["generation_detail"].struct.field("checked_chunk_ids")
    assert checked.to_list() == kept["reference_context_ids"].to_list()
    assert rejected.columns == [*COLUMNS, "rejected_by", "reason"]
    # 6 candidates in 2 requests of 3; the second of each request is not self-contained
    assert rejected.height == 2 and set(rejected["rejected_by"]) == {"self_contained"}
    assert rejected["question"].str.starts_with("According").all()
    assert rejected["reason"].str.contains("refers to a passage").all()
    assert "generated 4 of 4 rows" in out
    assert re.search(r"single_hop\s+4\s+2\s+0", out), out  # kept, rejected, surplus
    assert "rejected by check: self_contained 2" in out
    assert "wrote set.parquet and rejected.parquet" in out


def test_fewer_rows_than_asked_is_said_with_why_and_is_not_a_failure(server, folder, capsys):
    def answered(body: dict[str, Any]) -> str:
        verdicts = json.loads(check(body))["verdicts"]
        return json.dumps(
            {"verdicts": [{**v, "answerable": True, "answered_by": [1]} for v in verdicts]}
        )

    server.handler = scripted(generate_check_unanswerable=answered)
    status = generate(server, folder, "-o", "set.parquet", "--types", "unanswerable", n=3)
    out = capsys.readouterr().out
    assert status == 0
    assert pl.read_parquet(folder / "set.parquet").height == 0
    assert "Only 0 of the 3 rows asked for survived" in out
    assert "answerable 6" in out


def test_styles_and_a_personas_file_shape_the_prompts_and_are_recorded(server, folder, capsys):
    from ragframe.engine.generate import STYLES
    from ragframe.inputs.io import read_metadata

    server.handler = scripted()
    (folder / "personas.txt").write_text("\n a tenant worried about bills\n\nan electrician\n")
    status = generate(
        server, folder, "-o", "set.parquet", "--styles", "conversational", "--personas",
        "personas.txt", "--types", "single_hop_abstract", n=6,
    )  # fmt: skip
    assert status == 0, capsys.readouterr().err
    bodies = [b for b in server.chat_requests if task_name(b) == "generate_single_hop_abstract"]
    assert len(bodies) == 3
    assert all(STYLES["conversational"] in user_text(b) for b in bodies)
    asked = [user_text(b).split("Who asks: ", 1)[1].split(".", 1)[0] for b in bodies]
    assert sorted(set(asked)) == ["a tenant worried about bills", "an electrician"]
    kept = pl.read_parquet(folder / "set.parquet")
    detail = kept["generation_detail"]
    assert (detail.struct.field("query_style") == "conversational").all()
    assert set(detail.struct.field("persona")) == set(asked)
    recorded = read_metadata(folder / "set.parquet")["generate"]
    assert recorded["styles"] == "conversational"
    assert recorded["personas"] == ["a tenant worried about bills", "an electrician"]


# ------------------------------------------------------------------------------ the estimate


PERSONAS = ["a tenant worried about bills", "an electrician fitting batteries"]


@pytest.mark.parametrize(
    ("n", "options"),
    [
        (6, {"types": "single_hop,multi_hop,unanswerable"}),
        (10, {"types": "single_hop:2,multi_hop:1"}),
        # the chunks embedded for the unanswerable check's nearest chunks, no paired type
        (4, {"types": "unanswerable"}),
        # one question per request: three pairs of each paired type, none shared
        (6, {"types": "multi_hop,comparative,single_hop_abstract", "questions_per_request": 1}),
        (
            8,
            {
                "types": "single_hop_abstract:2,comparative:1",
                "styles": "keywords,misspelled:2",
                "personas": PERSONAS,
            },
        ),
    ],
    ids=["default", "weighted", "unanswerable", "paired types", "styles and personas"],
)
def test_the_dry_run_counts_the_requests_a_real_run_then_sends(server, folder, capsys, n, options):
    """Every check passes here, so the estimate must be exact: by task, in all, and in texts
    embedded (placeholders distinct, never rejected); styled prompts are counted as sent."""
    server.handler = scripted()
    extra = []
    for name, value in options.items():
        if name == "personas":
            (folder / "personas.txt").write_text("\n".join(value) + "\n")
            value = "personas.txt"
        extra += [f"--{name.replace('_', '-')}", str(value)]
    assert generate(server, folder, "--dry-run", *extra, n=n) == 0
    out = capsys.readouterr().out
    assert server.requests == []
    estimated = int(re.search(r"estimate: (\d+) requests", out)[1])
    from conftest import judge_for

    guess = estimate_generate(
        folder / "docs", n=n, judge=judge_for(server, folder), **options
    )  # the same figures from the library
    assert guess["requests"] == estimated
    assert server.requests == []

    assert generate(server, folder, "-o", "set.parquet", *extra, n=n) == 0
    assert "Only" not in capsys.readouterr().out  # every check passed
    assert len(server.requests) == estimated
    assert {k: v for k, v in guess["requests_by_task"].items() if k != "embeddings"} == by_task(
        server
    )
    assert guess["embedding_requests"] == server.count("/embeddings")
    assert guess["embedding_texts"] == embedded_texts(server)
    stages = ("generation: single_hop", "grounded (faithfulness)", "check (")
    if options["types"] == "unanswerable":  # not grounded; its chunks embedded all the same
        stages = ("generation: unanswerable", "check (", "embeddings: chunks")
    for stage in stages:
        assert stage in out


def test_after_a_run_the_dry_run_and_a_rerun_with_the_same_cache_send_nothing(
    server, folder, capsys
):
    server.handler = scripted()
    assert generate(server, folder, "-o", "set.parquet") == 0
    first = pl.read_parquet(folder / "set.parquet")
    assert server.requests
    server.reset()
    assert generate(server, folder, "--dry-run") == 0
    assert "estimate: 0 requests" in capsys.readouterr().out
    assert generate(server, folder, "-o", "again.parquet") == 0
    out = capsys.readouterr().out
    assert server.requests == []
    assert "requests: 0 (0 of them embeddings)" in out
    assert pl.read_parquet(folder / "again.parquet").equals(first)


def test_max_cost_below_the_estimate_stops_before_any_request(server, folder, capsys):
    server.handler = scripted()
    priced = ("--price", "1,2")
    assert generate(server, folder, "-o", "set.parquet", *priced, "--max-cost", "0.0001") == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"ragframe: error: the estimate \$\S+ exceeds --max-cost \$0\.0001; "
                        r"nothing was sent\n", err), err  # fmt: skip
    assert server.requests == [] and not (folder / "set.parquet").exists()
    # a cap above the estimate lets the run go
    assert generate(server, folder, "-o", "set.parquet", *priced, "--max-cost", "5") == 0
    assert server.requests


# ------------------------------------------------------------------------------ errors


def _no_text_column(folder: Path) -> list[str]:
    pl.DataFrame({"body": ["some words"]}).write_parquet(folder / "corpus.parquet")
    return ["corpus.parquet", "-o", "set.parquet"]


def _empty_folder(folder: Path) -> list[str]:
    (folder / "empty").mkdir()
    return ["empty", "-o", "set.parquet"]


def _existing(name: str) -> Any:
    def make(folder: Path) -> list[str]:
        (folder / name).write_bytes(b"keep me")
        return ["docs", "-o", "set.parquet", "--rejected", "rejected.parquet"]

    return make


ERRORS = {
    "no text column": (_no_text_column, r"no text column 'text'"),
    "empty folder": (_empty_folder, r"empty"),
    "unknown type": (
        lambda f: ["docs", "-o", "s.parquet", "--types", "single_hop,hypothetical"],
        r"unknown question type 'hypothetical'",
    ),
    "zero weight": (
        lambda f: ["docs", "-o", "s.parquet", "--types", "single_hop:0"],
        r"weight of 'single_hop' must be a positive number",
    ),
    "word weight": (
        lambda f: ["docs", "-o", "s.parquet", "--types", "single_hop:x,multi_hop"],
        r"weight of 'single_hop'",
    ),
    "output exists": (_existing("set.parquet"), r"'set.parquet' exists; add --overwrite"),
    "rejected exists": (_existing("rejected.parquet"), r"'rejected.parquet' exists"),
    "same file twice": (
        lambda f: ["docs", "-o", "s.parquet", "--rejected", "s.parquet"],
        r"-o and --rejected name the same file",
    ),
    "batch": (
        lambda f: ["docs", "-o", "s.parquet", "--batch"],
        r"--batch: the Batch API path does not take generation yet",
    ),
    "no output": (lambda f: ["docs"], r"-o/--output is required"),
    "unknown style": (
        lambda f: ["docs", "-o", "s.parquet", "--styles", "plain,shouty"],
        r"unknown query style 'shouty'; the query styles: plain, keywords",
    ),
    "bad style weight": (
        lambda f: ["docs", "-o", "s.parquet", "--styles", "keywords:-1"],
        r"weight of 'keywords' must be a positive number",
    ),
    "empty personas file": (
        lambda f: (
            (f / "p.txt").write_text("\n  \n")
            and ["docs", "-o", "s.parquet", "--personas", "p.txt"]
        ),
        r"--personas 'p.txt' names no persona",
    ),
    "missing personas file": (
        lambda f: ["docs", "-o", "s.parquet", "--personas", "nowhere.txt"],
        r"--personas 'nowhere.txt' cannot be read",
    ),
    "oversample below 1": (
        lambda f: ["docs", "-o", "s.parquet", "--oversample", "0.5"],
        "oversample",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_a_configuration_error_exits_2_on_one_line_before_any_request(server, folder, capsys, case):
    server.handler = scripted()
    make, message = ERRORS[case]
    argv = make(folder)
    for dry in ([], ["--dry-run"]) if case not in ("output exists", "rejected exists") else ([],):
        status = main(["generate", *argv, "-n", "4", *dry, *judge_args(server, folder)])
        err = capsys.readouterr().err
        if dry and case == "no output":
            assert status == 0  # a dry run needs no -o
            continue
        assert status == 2, (case, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ragframe: error: "), err
        assert re.search(message, lines[0]), lines[0]
    assert server.requests == []
    if case.endswith("exists"):  # the existing file is left as it was
        assert b"keep me" in b"".join(p.read_bytes() for p in folder.glob("*.parquet"))


def test_n_below_1_is_refused_by_the_parser_before_any_request(server, folder, capsys):
    """argparse's own refusal (its usage line, then the one error line), as every numeric
    option of every subcommand is refused."""
    server.handler = scripted()
    assert generate(server, folder, "-o", "s.parquet", n=0) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("ragframe generate: error: argument -n: must be")
    assert server.requests == []


# ------------------------------------------------------------------------------ the program


def test_the_program_end_to_end(server, folder):
    server.handler = scripted()
    proc = subprocess.run(
        [sys.executable, "-m", "ragframe.cli", "generate", "docs", "-o", "set.parquet", "-n",
         "3", "--rejected", "rejected.parquet", *judge_args(server, folder)],
        cwd=folder, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(folder)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "generated 3 of 3 rows" in proc.stdout
    kept = pl.read_parquet(folder / "set.parquet")
    assert kept.height == 3 and kept.columns == COLUMNS
    assert pl.read_parquet(folder / "rejected.parquet").height == 0
    for row in kept.iter_rows(named=True):  # every context an exact span of its document
        for doc, text in zip(row["doc_ids"], row["reference_contexts"], strict=True):
            assert text in DOCS[Path(doc).name]
    assert len(server.requests) > 0
    asked = {tuple(fenced(b, "context")) for b in server.chat_requests}
    assert {tuple(r) for r in kept["reference_contexts"]} <= asked


def test_ctrl_c_mid_run_exits_130_and_the_rerun_sends_only_what_was_left(server, folder):
    """SIGINT while the verifications are held at the server, every earlier answer committed:
    exit 130 (never 1) with the resume line and no output file; the rerun sends none of the
    requests answered before the signal, and writes the set."""
    gate = threading.Event()
    answer = scripted()

    async def held(body: dict[str, Any]) -> Any:
        while task_name(body) == "faithfulness_verify" and not gate.is_set():
            await asyncio.sleep(0.02)
        return answer(body)

    server.handler = held
    cache = folder / "cache.sqlite3"
    command = [
        sys.executable, "-m", "ragframe.cli", "generate", "docs", "-o", "set.parquet", "-n", "3",
        *judge_args(server, folder),
    ]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(folder)}
    proc = subprocess.Popen(command, cwd=folder, env=env, stderr=subprocess.PIPE, text=True)

    def answered() -> list[str]:
        return [
            messages_hash(r.body["messages"])
            for r in list(server.requests)
            if r.path.endswith("/chat/completions") and r.status == 200
        ]

    def committed() -> int:
        if not cache.exists():
            return 0
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30) as db:
            try:
                return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
            except sqlite3.OperationalError:
                return 0

    def held_with_the_rest_committed() -> bool:
        done = answered()
        return server.in_flight > 0 and bool(done) and committed() >= len(set(done))

    ready = wait_for(lambda: proc.poll() is not None or held_with_the_rest_committed(), 60)
    if not ready or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"the run never got mid-flight: {proc.communicate()[1][-2000:]}")
    before = set(answered())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "run the same command again" in err and "Traceback" not in err
    assert not (folder / "set.parquet").exists()
    gate.set()
    assert wait_for(lambda: server.in_flight == 0, 30)
    server.reset()
    rerun = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    resent = set(answered())
    assert resent and not resent & before  # the verifications left, nothing answered again
    assert pl.read_parquet(folder / "set.parquet").height == 3
