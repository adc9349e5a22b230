"""Every numeric option of every subcommand refuses a value no run can use (`--timeout 0` used
to retry every request six times and write an all-null file, exit 4): exit status 2, one line
naming the option and its rule, before any file is read or any request sent.

The table is checked against the parsers themselves, so a new numeric option fails
`test_every_numeric_option_is_in_the_table` until it is validated and listed here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe.cli import build_parser, main
from ragframe.errors import ConfigError
from ragframe.judge import Judge
from ragframe.testing.server import FakeServer

COUNTS = ("0", "-1", "1.5", "x")  # a whole number 1 or more
SEEDS = ("-1", "1.5", "x")  # a whole number 0 or more
SHOWN = ("-1", "1.5")  # rows shown: 0 shows none
POSITIVE = ("0", "-1", "nan", "inf", "x")  # seconds, rates
NON_NEGATIVE = ("-1", "nan", "inf")  # dollars, temperature, seconds to wait
LEVELS = ("0", "1", "95", "-0.5", "nan")  # 0 < level < 1

TABLE: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {
    (("score",), "--concurrency"): COUNTS,
    (("score",), "--temperature"): NON_NEGATIVE,
    (("score",), "--requests-per-minute"): POSITIVE,
    (("score",), "--tokens-per-minute"): POSITIVE,
    (("score",), "--timeout"): POSITIVE,
    (("score",), "--sample"): COUNTS,
    (("score",), "--seed"): SEEDS,
    (("score",), "--repeats"): COUNTS,
    (("score",), "--chunk-rows"): COUNTS,
    (("score",), "--max-text-chars"): COUNTS,
    (("score",), "--max-cost"): NON_NEGATIVE,
    (("score",), "--actors"): COUNTS,
    (("score",), "--batch-rows"): COUNTS,
    **{
        (("batch", sub), option): values
        for sub in ("submit", "status", "collect", "run", "export", "import")
        for option, values in (("--timeout", POSITIVE), ("--max-attempts", COUNTS))
    },
    (("batch", "run"), "--poll-interval"): POSITIVE,
    (("batch", "run"), "--wait"): NON_NEGATIVE,
    (("summarize",), "--level"): LEVELS,
    (("summarize",), "--seed"): SEEDS,
    (("gate",), "--worst"): SHOWN,
    (("score",), "--worst"): SHOWN,
    (("compare",), "--level"): LEVELS,
    (("compare",), "--seed"): SEEDS,
    (("compare",), "--changed"): SHOWN,
    (("compare",), "--margin"): ("-1", "1", "1.5", "nan", "inf"),
    (("report",), "--worst"): SHOWN,
    (("report",), "--level"): LEVELS,
    (("judge-bench",), "--limit"): COUNTS,
    (("judge-bench",), "--seed"): SEEDS,
    (("judge-bench",), "--folds"): ("1", "0", "-1", "x"),  # cross-validation needs 2 folds
    (("judge-bench",), "--level"): LEVELS,
    (("judge-bench",), "--concurrency"): COUNTS,
    (("judge-bench",), "--timeout"): POSITIVE,
    (("judge-bench",), "--max-cost"): NON_NEGATIVE,
    (("prefer",), "--concurrency"): COUNTS,
    (("prefer",), "--timeout"): POSITIVE,
    (("prefer",), "--level"): LEVELS,
    (("prefer",), "--seed"): SEEDS,
    (("calibrate",), "--folds"): ("1", "0", "-1", "x"),  # cross-fitting needs 2 folds
    (("calibrate",), "--level"): LEVELS,
    (("calibrate",), "--seed"): SEEDS,
    (("human-estimate",), "--level"): LEVELS,
    (("human-estimate",), "--width"): POSITIVE,
    (("label-sheet",), "-n"): COUNTS,
    (("label-sheet",), "--strata"): COUNTS,
    (("label-sheet",), "--seed"): SEEDS,
    (("generate",), "-n"): COUNTS,
    (("generate",), "--seed"): SEEDS,
    (("generate",), "--oversample"): POSITIVE,
    (("generate",), "--questions-per-request"): COUNTS,
    (("generate",), "--duplicate-threshold"): POSITIVE,
    (("generate",), "--chunk-tokens"): COUNTS,
    (("generate",), "--overlap-tokens"): SEEDS,  # a whole number 0 or more
    (("generate",), "--concurrency"): COUNTS,
    (("generate",), "--temperature"): NON_NEGATIVE,
    (("generate",), "--requests-per-minute"): POSITIVE,
    (("generate",), "--tokens-per-minute"): POSITIVE,
    (("generate",), "--timeout"): POSITIVE,
    (("generate",), "--max-text-chars"): COUNTS,
    (("generate",), "--max-cost"): NON_NEGATIVE,
}


def numeric_options() -> dict[tuple[tuple[str, ...], str], Any]:
    """(subcommand path, option) -> its type, for every option that takes a number."""
    found: dict[tuple[tuple[str, ...], str], Any] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.type in (int, float) or hasattr(action.type, "rule"):
                found[(path, action.option_strings[-1])] = action.type
            elif (
                isinstance(action.default, int | float)
                and not isinstance(action.default, bool)
                and action.nargs != 0
            ):  # a number parsed by hand: it must be listed too
                found[(path, action.option_strings[-1])] = action.type

    walk(build_parser(), ())
    return found


def test_every_numeric_option_is_in_the_table() -> None:
    found = numeric_options()
    assert set(found) == set(TABLE), (
        f"not in TABLE: {sorted(set(found) - set(TABLE))}; "
        f"in TABLE, gone: {sorted(set(TABLE) - set(found))}"
    )
    unchecked = sorted(key for key, kind in found.items() if kind in (int, float, None))
    assert not unchecked, f"give these a validating type from ragframe.cli.common: {unchecked}"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small log and a manifest path: every command would get as far as a request."""
    root = tmp_path_factory.mktemp("numeric")
    pl.DataFrame(
        {
            "question": ["What is blue?"],
            "answer": ["The sky is blue."],
            "contexts": [["The sky is blue."]],
            "ground_truth": ["The sky."],
        }
    ).write_parquet(root / "in.parquet")
    return root


def argv_for(path: tuple[str, ...], files: Path, url: str) -> list[str]:
    """Arguments that make `path` a complete command, sending to `url`."""
    log, out, manifest = str(files / "in.parquet"), str(files / "out.parquet"), "m.json"
    judge = ["--model", "fake-judge", "--base-url", url]
    full: dict[tuple[str, ...], list[str]] = {
        ("score",): [log, "-o", out, *judge, "--no-cache", "--no-progress"],
        ("batch", "submit"): [log, "--manifest", str(files / manifest), *judge],
        ("batch", "status"): ["--manifest", str(files / manifest), *judge],
        ("batch", "collect"): ["--manifest", str(files / manifest), *judge],
        ("batch", "run"): [log, "-o", out, "--manifest", str(files / manifest), *judge],
        ("batch", "export"): [log, "--jsonl", str(files / "r.jsonl"), *judge],
        ("batch", "import"): [str(files / "r.jsonl"), "--manifest", str(files / manifest)],
        ("summarize",): [log],
        ("gate",): [log, "--fail-under", "faithfulness=0.5"],
        ("compare",): [log, log],
        ("report",): [log, "-o", str(files / "r.html")],
        ("judge-bench",): [*judge, "--limit", "2", "--no-cache", "--no-progress"],
        ("prefer",): [log, log, "--on", "question", "-o", out, *judge, "--no-cache"],
        ("calibrate",): [log, "-o", str(files / "c.json")],
        ("human-estimate",): [log, "--labels", log],
        ("label-sheet",): [log, "-n", "1", "-o", str(files / "sheet.csv")],
        ("generate",): [log, "-o", out, "-n", "1", *judge, "--no-cache", "--no-progress"],
    }
    return [*path, *full[path]]


CASES = [
    pytest.param(path, option, bad, id=f"{' '.join(path)} {option} {bad}")
    for (path, option), values in TABLE.items()
    for bad in values
]


@pytest.mark.parametrize(("path", "option", "bad"), CASES)
def test_a_bad_value_stops_before_any_request(
    path: tuple[str, ...],
    option: str,
    bad: str,
    fake: FakeServer,
    files: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = fake.count("")
    try:
        status = main([*argv_for(path, files, fake.base_url), f"{option}={bad}"])
    except SystemExit as stopped:  # argparse's own exit, where main lets it through
        status = stopped.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"argument {option}: must be" in err and repr(bad) in err, err
    assert len(err.strip().splitlines()[-1]) < 200  # one line that says the rule
    assert fake.count("") == before
    assert not (files / "out.parquet").exists()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("timeout", 0),
        ("timeout", -1.0),
        ("timeout", math.nan),
        ("timeout", math.inf),
        ("concurrency", 0),
        ("max_attempts", 0),
        ("repair_attempts", -1),
        ("rate_limit_wait", -1.0),
        ("backoff_base", math.nan),
        ("backoff_max", -1.0),
        ("temperature", math.nan),
        ("temperature", -0.5),
        ("requests_per_minute", 0),
        ("tokens_per_minute", -5.0),
        ("max_tokens", 0),
        ("max_text_chars", 0),
        ("seed", -1),
        ("max_cost", -1.0),
        ("price", (-1.0, 1.0)),
        ("price", (1.0, math.nan)),
    ],
)
def test_the_library_refuses_what_no_run_can_use(setting: str, value: Any) -> None:
    """`ragframe.run` users are protected too: Judge names the parameter, before any request."""
    with pytest.raises(ConfigError, match=rf"^{setting} must be"):
        Judge(
            "m",
            base_url="http://127.0.0.1:1/v1",
            api_key="k",
            cache=False,
            **{"price": (1.0, 1.0), setting: value},  # max_cost needs a price
        )


def test_the_library_accepts_the_edges() -> None:
    judge = Judge(
        "m",
        base_url="http://127.0.0.1:1/v1",
        api_key="k",
        cache=False,
        timeout=0.001,
        temperature=0,
        rate_limit_wait=0,
        max_cost=0,
        price=(0, 0),
        seed=None,
        repair_attempts=0,
    )
    assert judge.timeout == 0.001 and judge.max_cost == 0
    replaced = judge.replace(concurrency=1, max_cost=None)
    assert replaced.concurrency == 1
    with pytest.raises(ConfigError, match=r"^concurrency must be"):
        judge.replace(concurrency=0)
