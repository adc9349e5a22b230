"""One run, every path: each option of `ragframe score` is honoured by every path that runs it,
or refused before the first request (exit 2, the option and the path named, zero requests at
the server). Never dropped.

The reference is the in-memory run of the same `RunSpec` (parsed from the same command line)
through `ragframe.engine.run.execute`, with its own cache, so both send their requests. Against
it, each path's output must have the same columns and scores, the same "run" record in its
metadata (the path aside), the same summary table, and the same exit status (the gates
checked on the reference's frame).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import judge_for
from polars.testing import assert_frame_equal

import ragframe
from ragframe._sync import run_sync
from ragframe.cli import build_parser, main
from ragframe.cli import options as cli_options
from ragframe.cli import score as score_cli
from ragframe.engine import PATHS, RunSpec, refuse_unsupported
from ragframe.engine.run import execute
from ragframe.engine.spec import FLAGS
from ragframe.engine.summary import format_summary
from ragframe.errors import ConfigError
from ragframe.testing.server import FakeServer

METRICS = "faithfulness,context_recall"

#: One command-line option (or a group that goes together) per row: the RunSpec field it
#: sets, and its arguments. Every field of FLAGS appears (a test below checks it).
OPTIONS: dict[str, tuple[str, list[str]]] = {
    "metrics": ("metrics", ["--metrics", "context_recall"]),
    "columns": ("columns", ["--columns", "question=prompt"]),
    "reasons": ("reasons", ["--no-reasons"]),
    "threshold": ("thresholds", ["--threshold", "faithfulness=0.7"]),
    "strict": ("strict", ["--strict", "context_recall"]),
    "fail_under": ("fail_under", ["--fail-under", "faithfulness=0.99"]),
    "min_pass_rate": (
        "min_pass_rate",
        ["--min-pass-rate", "faithfulness=0.9", "--threshold", "faithfulness=0.7"],
    ),
    "ignore_failed": ("ignore_failed", ["--ignore-failed", "--fail-under", "context_recall=0.1"]),
    "repeats": ("repeats", ["--repeats", "2"]),
    "seed": ("seed", ["--seed", "3"]),
    "sample": ("sample", ["--sample", "4", "--seed", "1"]),
    "chunk_rows": ("chunk_rows", ["--chunk-rows", "2"]),
    "dry_run": ("dry_run", ["--dry-run"]),
    "max_cost": ("max_cost", ["--max-cost", "50", "--price", "0.1,0.2"]),
    "limits": (
        "",
        ["--concurrency", "2", "--requests-per-minute", "60000", "--tokens-per-minute", "1e9"],
    ),
    "timeout": ("", ["--timeout", "30", "--temperature", "0.5"]),
    "retry_failed": ("", ["--retry-failed"]),
    "max_text_chars": ("", ["--max-text-chars", "12"]),
    "calibration": ("calibration", ["--calibration", "CALIBRATION"]),
    "jury": ("judges", ["--jury", "JURY"]),
    "jury_aggregate": ("aggregate", ["--jury", "JURY", "--jury-aggregate", "median"]),
    "actors": ("actors", ["--actors", "2"]),
    "batch_rows": ("batch_rows", ["--batch-rows", "2"]),
    # Options together: a path honours each, or refuses the pair before the first request.
    "jury_sample": ("", ["--jury", "JURY", "--sample", "4", "--seed", "1"]),
    "jury_dry_run": ("", ["--jury", "JURY", "--dry-run"]),
    "jury_max_cost": ("", ["--jury", "JURY", "--max-cost", "50", "--price", "0.1,0.2"]),
    "chunk_rows_sample": ("", ["--chunk-rows", "2", "--sample", "4"]),
    "chunk_rows_repeats": ("", ["--chunk-rows", "2", "--repeats", "2"]),
    "chunk_rows_jury": ("", ["--chunk-rows", "2", "--jury", "JURY"]),
    # Refused by a check of the run itself, not by the table of paths.
    "jury_no_calibration": ("", ["--jury", "JURY", "--calibration", "NOFILE"]),
    "jury_twice": ("", ["--jury", "juror-a,juror-a"]),
    "repeats_too_many": ("", ["--repeats", "101"]),
    "repeats_with_jury": ("", ["--jury", "JURY", "--repeats", "2"]),
}
#: What the jury rows seat: two models on the test server (one named with its URL).
JURY = "juror-a,juror-b@{url}"
IN_MEMORY = ("repeats", "sample", "jury", "jury_aggregate", "jury_sample", "jury_max_cost")
#: The rows refused before the first request by a check of the run (not `PATHS`), with a
#: fragment of the one line that says why.
REFUSED = {
    "jury_no_calibration": "cannot read a calibration",
    "jury_twice": "seats the same judge twice",
    "repeats_too_many": "repeats must be a positive integer, at most 100",
    "repeats_with_jury": "judges= with repeats=",
}


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A faithfulness calibration fitted on synthetic labels (a logistic map: few labels)."""
    rng = np.random.default_rng(0)
    scores = rng.random(60)
    labels = rng.random(60) < scores
    labelled = pl.DataFrame({"faithfulness": scores, "faithful": labels})
    path = tmp_path_factory.mktemp("calibration") / "faithfulness.calib.json"
    ragframe.calibrate(labelled, score="faithfulness", label="faithful").save(path)
    return str(path)


def option_args(name: str, calibration_file: str, server: FakeServer) -> list[str]:
    given = {
        "CALIBRATION": calibration_file,
        "JURY": JURY.format(url=server.base_url),
        "NOFILE": str(Path(calibration_file).with_name("no-such.calib.json")),
    }
    return [given.get(a, a) for a in OPTIONS[name][1]]


def frame(n: int = 6) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "prompt": [f"What is fact {i}?" for i in range(n)],
            "question": [f"What is fact {i}?" for i in range(n)],
            "answer": [f"Fact {i} is true. Fact {i + 1} is false." for i in range(n)],
            "contexts": [[f"Fact {i} is true.", "Unrelated text."] for i in range(n)],
            "ground_truth": [f"Fact {i} is true." for i in range(n)],
        }
    )


def argv(source: Path, out: Path, server: FakeServer, cache: Path, option: list[str]) -> list[str]:
    base = ["score", str(source), "-o", str(out), "--metrics", METRICS, "--model", "fake-judge"]
    base += ["--base-url", server.base_url, "--cache", str(cache), "--no-progress", "--overwrite"]
    # a later --metrics / --threshold wins in argparse: the option's own value is the one used
    return base + option


def reference(command: list[str]) -> tuple[Any, RunSpec]:
    """The in-memory run of the command's own RunSpec (its judge built by the same code)."""
    args = build_parser().parse_args(command)
    spec = score_cli.run_spec(args)
    judge = None if spec.judges else cli_options.judge_from_args(args)
    # In memory the rows are one piece: the streamed run's chunk size is only recorded, and
    # a Ray run's actors and batches are not part of the record.
    unsized = replace(spec, chunk_rows=None, actors=None, batch_rows=None)
    result = run_sync(execute(args.input, unsized, judge))
    result.run["chunk_rows"] = spec.chunk_rows
    return result, spec


def refusal(name: str, command: list[str]) -> tuple[str, list[str]] | None:
    """Why the command is refused before the first request: (the path, the flags it names,
    or a fragment of the line), or None when it runs."""
    args = build_parser().parse_args(command)
    try:
        spec = score_cli.run_spec(args)
    except ConfigError:
        return "", [REFUSED[name]]
    path = score_cli.run_path(args, spec)
    flags = [FLAGS[f] for f in spec.given() if f not in PATHS[path]]
    if flags:
        return path, flags
    return ("", [REFUSED[name]]) if name in REFUSED else None


def expected_status(result: Any, spec: RunSpec) -> int:
    if not spec.gated:
        return 0
    return 0 if ragframe.check_gates(result.frame, **spec.gate_options()).passed else 1


def table(text: str) -> list[str]:
    """The summary's metric lines (the table before the first blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("metric"))
    end = lines.index("", start)
    return lines[start:end]


def test_every_option_has_a_row_and_every_path_an_entry() -> None:
    assert {field for field, _ in OPTIONS.values() if field} == set(FLAGS)
    assert set(PATHS) == {"in-memory", "streamed", "ray", "arrow", "batch"}
    for path, honoured in PATHS.items():
        assert honoured <= set(FLAGS), path


@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_cli_honours_every_option_as_the_in_memory_run(
    name: str,
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    calibration_file: str,
) -> None:
    source = tmp_path / "log.parquet"
    frame().write_parquet(source)
    out = tmp_path / "out.parquet"
    option = option_args(name, calibration_file, server)
    command = argv(source, out, server, tmp_path / "cli.sqlite3", option)
    refused = refusal(name, command)
    status = main(command)
    printed = capsys.readouterr()
    sent = server.count()
    if refused is not None:  # one line naming the option(s) (and path), nothing sent or written
        path, said = refused
        assert status == 2 and sent == 0 and not out.exists(), printed.err
        assert all(s in printed.err for s in said) and path in printed.err
        assert len(printed.err.strip().splitlines()) == 1
        return
    if "--dry-run" in option:  # an estimate, nothing sent or written
        assert status == 0 and sent == 0 and not out.exists()
        assert printed.out.startswith("estimate:")
        return
    result, spec = reference(argv(source, out, server, tmp_path / "ref.sqlite3", option))
    assert sent > 0 and server.count() > sent  # both runs sent their own requests
    assert status == expected_status(result, spec), printed.out + printed.err
    written = pl.read_parquet(out)
    assert written.columns == result.frame.columns
    assert_frame_equal(written, result.frame)
    meta = ragframe.read_metadata(out)
    path = score_cli.run_path(build_parser().parse_args(command), spec)
    assert meta["run"] == {**result.run, "path": path}
    assert meta["run"]["path"] == ("in-memory" if name in IN_MEMORY else "streamed")
    assert table(printed.out) == table(format_summary(result.summary(), False))
    field = OPTIONS[name][0]
    if field and field not in ("metrics", "columns"):
        assert field in spec.given()  # the row tests the option it names


# ----------------------------------------------------------------------------- on Ray


def partitioned(root: Path, data: pl.DataFrame) -> list[Path]:
    files = []
    for i, start in enumerate(range(0, data.height, 3)):
        path = root / f"part={i}" / "data.parquet"
        path.parent.mkdir(parents=True)
        data.slice(start, 3).write_parquet(path)
        files.append(path)
    return files


@pytest.mark.parametrize("name", list(OPTIONS))
def test_ray_honours_every_option_or_refuses_it_before_any_request(
    name: str,
    cluster: str,
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    calibration_file: str,
) -> None:
    data = frame()
    source = tmp_path / "in"
    files = partitioned(source, data)
    whole = tmp_path / "log.parquet"
    data.write_parquet(whole)
    out = tmp_path / "out"
    option = option_args(name, calibration_file, server)
    command = argv(source, out, server, tmp_path / "ray-cache", option)
    command += ["--ray", cluster, "--actors", "2", "--batch-rows", "2"]
    refused = refusal(name, command)
    status = main(command)
    printed = capsys.readouterr()
    if refused is not None:
        path, said = refused
        assert status == 2 and server.count() == 0 and not out.exists()
        assert all(s in printed.err for s in said) and path in printed.err
        return
    sent = server.count()
    result, spec = reference(argv(whole, tmp_path / "x.parquet", server, tmp_path / "r", option))
    assert sent > 0 and server.count() > sent
    assert status == expected_status(result, spec), printed.out + printed.err
    outputs = [out / f.relative_to(source) for f in files]
    written = pl.concat([pl.read_parquet(f) for f in outputs])
    assert_frame_equal(written, result.frame)
    for path in outputs:
        assert ragframe.read_metadata(path)["run"] == {**result.run, "path": "ray"}
    assert table(printed.out) == table(format_summary(result.summary(), False))


# ----------------------------------------------------------------------- the spec itself


def test_a_path_refuses_what_it_cannot_honour_naming_option_and_path() -> None:
    spec = RunSpec(metrics=("faithfulness",), repeats=3, fail_under={"faithfulness": 0.9})
    refuse_unsupported(spec, "in-memory")  # honours everything
    with pytest.raises(ConfigError, match=r"--repeats is not available on the ray path"):
        refuse_unsupported(spec, "ray")
    with pytest.raises(ConfigError, match=r"--fail-under, --repeats are not available on the arr"):
        refuse_unsupported(spec, "arrow")
    with pytest.raises(ConfigError, match="unknown run path"):
        refuse_unsupported(spec, "carrier-pigeon")


def test_the_api_paths_record_the_same_run(server: FakeServer, tmp_path: Path) -> None:
    """`run`, `score_file` and `score_arrow` execute one spec: run records it, the streamed
    file records it with its path, and strict reaches the Arrow path (it used to be dropped)."""
    from ragframe.engine.arrow import score_arrow
    from ragframe.engine.stream import score_file

    judge = judge_for(server, tmp_path)
    data = frame(4)
    options = {"thresholds": {"faithfulness": 0.6}, "strict": ["context_recall"]}
    result = ragframe.run(data, METRICS.split(","), judge=judge, **options)
    assert result.run["strict"] == ["context_recall"] and result.run["path"] == "in-memory"
    data.write_parquet(tmp_path / "in.parquet")
    streamed = score_file(
        tmp_path / "in.parquet", tmp_path / "s.parquet", METRICS.split(","), judge=judge, **options
    )
    assert {**streamed.run, "path": "in-memory"} == result.run
    assert_frame_equal(pl.read_parquet(tmp_path / "s.parquet"), result.frame)
    arrow = pl.from_arrow(score_arrow(data.to_arrow(), METRICS.split(","), judge, **options))
    assert isinstance(arrow, pl.DataFrame)
    assert_frame_equal(arrow, result.frame)
    assert arrow.get_column("context_recall_pass").to_list() == [
        score == 1.0 for score in result.frame.get_column("context_recall")
    ]


def test_sample_with_no_cache_does_not_promise_free_answers(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "log.parquet"
    frame().write_parquet(source)
    base = argv(source, tmp_path / "o.parquet", server, tmp_path / "c.sqlite3", ["--sample", "2"])
    assert main([*base, "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "now cached are free" not in text and "no cache" in text
    assert main(base) == 0
    assert "the sample's answers now cached are free" in capsys.readouterr().out


# ------------------------------------------------------------------ on the Batch API


def batch_flags() -> set[str]:
    """The options `ragframe batch run` knows; its parser refuses the rest (exit 2)."""
    parser = build_parser()
    batch = parser._subparsers._group_actions[0].choices["batch"]  # type: ignore[union-attr]
    run = batch._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    return {flag for action in run._actions for flag in action.option_strings}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_batch_api_honours_its_options_and_refuses_the_rest_up_front(
    name: str,
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    calibration_file: str,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    frame().write_parquet(source)
    option = option_args(name, calibration_file, server)
    command = ["batch", "run", str(source), "-o", str(out), "--manifest", str(tmp_path / "m")]
    command += ["--metrics", METRICS, "--model", "fake-judge", "--base-url", server.base_url]
    command += ["--cache", str(tmp_path / "b.sqlite3"), "--poll-interval", "0.05", "--wait", "60"]
    unknown = [a for a in option if a.startswith("--") and a not in batch_flags()]
    status = main(command + option)
    printed = capsys.readouterr()
    if unknown:  # nothing sent at all: no upload, no batch, no request
        assert status == 2 and server.requests == [] and not out.exists()
        assert "unrecognized arguments" in printed.err and unknown[0] in printed.err
        return
    sent = server.count("/batches")
    result, _ = reference(argv(source, tmp_path / "r.parquet", server, tmp_path / "r", option))
    assert status == 0 and sent > 0, printed.err
    assert_frame_equal(pl.read_parquet(out), result.frame)
    run = ragframe.read_metadata(out)["run"]
    assert run["path"] == "batch"
    assert {k: v for k, v in run.items() if k not in ("path", "limits")} == {
        k: v for k, v in result.run.items() if k not in ("path", "limits")
    }
    assert run["limits"]["timeout"] == result.run["limits"]["timeout"]
    assert run["limits"]["retry_failed"] == result.run["limits"]["retry_failed"]


def test_a_calibration_adds_p_human_on_every_path_that_honours_it(
    server: FakeServer, tmp_path: Path, calibration_file: str
) -> None:
    """`evaluate(calibration=...)` adds `faithfulness_p_human` = the map applied to the score
    (null where the score is null), the streamed file the same; a calibration for a metric
    the run does not score is refused before any request."""
    from ragframe.engine.stream import score_file

    judge = judge_for(server, tmp_path)
    data = frame(4)
    cal = ragframe.Calibration.load(calibration_file)
    scored = ragframe.evaluate(data, ["faithfulness"], judge=judge, calibration=calibration_file)
    expected = cal.predict(scored.get_column("faithfulness").to_numpy())
    assert scored.get_column("faithfulness_p_human").to_list() == pytest.approx(list(expected))
    data.write_parquet(tmp_path / "in.parquet")
    score_file(tmp_path / "in.parquet", tmp_path / "s.parquet", ["faithfulness"], judge=judge,
               spec=RunSpec.of(("faithfulness",), calibration=cal))  # fmt: skip
    assert_frame_equal(pl.read_parquet(tmp_path / "s.parquet"), scored)
    before = server.count()
    with pytest.raises(ConfigError, match="does not score"):
        ragframe.evaluate(data, ["context_recall"], judge=judge, calibration=cal)
    assert server.count() == before
