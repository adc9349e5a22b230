"""Nothing is sent before a refusal, and nothing accepted is silently ignored.

Each test counts the requests at the fake server: a refusal sends none. The option-by-path
matrix of the command line (with the jury and the refused combinations) is in
`tests/test_one_run.py`; these are the library's side and the figures around a run.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import judge_for
from test_one_run import argv, frame

import ragframe
from ragframe.cli import main
from ragframe.engine.arrow import score_arrow
from ragframe.engine.prepare import choose_metrics
from ragframe.engine.repeats import check_repeats
from ragframe.engine.spec import MAX_REPEATS, RunSpec
from ragframe.engine.stream import score_file
from ragframe.errors import BudgetExceeded, ConfigError, RagframeError
from ragframe.metrics import RagasScore
from ragframe.testing.server import FakeServer

PRICE = (1000.0, 1000.0)  # dollars per million tokens: a few dollars a run, easy to cap


# ------------------------------------------------------------------ metrics named by a string


def test_a_single_string_is_one_metric_name_or_a_comma_separated_list(
    server: FakeServer, tmp_path: Path
) -> None:
    judge = judge_for(server, tmp_path)
    one = ragframe.evaluate(frame(2), metrics="context_recall", judge=judge)
    assert "context_recall" in one.columns and "faithfulness" not in one.columns
    two = ragframe.evaluate(frame(2), metrics="context_recall, faithfulness", judge=judge)
    assert {"context_recall", "faithfulness"} <= set(two.columns)
    assert ragframe.estimate(frame(2), "context_recall", judge=judge)["requests"] == 2
    arrow = score_arrow(frame(2).to_arrow(), "context_recall", judge)
    assert "context_recall" in arrow.column_names and "faithfulness" not in arrow.column_names
    chosen = choose_metrics("context_recall,faithfulness", (), None)  # score_arrow without judge
    assert [m.name for m in chosen] == ["context_recall", "faithfulness"]
    assert RunSpec(metrics="faithfulness").metrics == ("faithfulness",)
    assert RunSpec(metrics="all").metrics == "all"


# ------------------------------------------------------------------- options evaluate lacks


def test_an_option_evaluate_does_not_take_is_refused_not_dropped(
    server: FakeServer, tmp_path: Path
) -> None:
    judge = judge_for(server, tmp_path)
    for option in ({"fail_under": {"faithfulness": 0.9}}, {"dry_run": True}, {"chunk_rows": 2}):
        with pytest.raises(ConfigError, match=next(iter(option))):
            ragframe.run(frame(2), ["faithfulness"], judge=judge, **option)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no such option 'fail_under'"):
        ragframe.estimate(frame(2), ["faithfulness"], judge=judge, fail_under={"faithfulness": 1})
    assert server.count() == 0


# ---------------------------------------------------------------------------- the jury


def test_a_jury_checks_every_judge_and_calibration_before_the_first_request(
    server: FakeServer, tmp_path: Path
) -> None:
    a, b = (judge_for(server, tmp_path, model) for model in ("juror-a", "juror-b"))
    with pytest.raises(RagframeError, match="cannot read a calibration"):
        ragframe.run(frame(3), ["faithfulness"], judges=[a, b], calibration=tmp_path / "no.json")
    with pytest.raises(ConfigError, match="seats the same judge twice"):
        ragframe.run(frame(3), ["faithfulness"], judges=[a, judge_for(server, tmp_path, "juror-a")])
    with pytest.raises(ConfigError, match="not both"):
        ragframe.estimate(frame(3), ["faithfulness"], judge=a, judges=[a, b])
    assert server.count() == 0 and server.count("/embeddings") == 0


def test_a_jury_scores_a_sample_and_estimates_a_dry_run(server: FakeServer, tmp_path: Path) -> None:
    a, b = (judge_for(server, tmp_path, model) for model in ("juror-a", "juror-b"))
    guess = ragframe.estimate(frame(4), ["context_recall"], judges=[a, b])
    assert guess["requests"] == 2 * 4 and server.count() == 0
    result = ragframe.run(frame(4), ["context_recall"], judges=[a, b], sample=2)
    assert result.frame.height == 2 and server.count() == 2 * 2
    assert result.extra["sample"]["rows"] == 2


# ----------------------------------------------------------------------------- repeats


def test_repeats_have_a_documented_bound_checked_before_anything_is_read(
    server: FakeServer, tmp_path: Path
) -> None:
    assert check_repeats(MAX_REPEATS) == MAX_REPEATS
    for bad in (MAX_REPEATS + 1, 100_000_000):
        with pytest.raises(ConfigError, match=f"positive integer, at most {MAX_REPEATS}"):
            RunSpec(metrics=("faithfulness",), repeats=bad)
        with pytest.raises(ConfigError, match=f"at most {MAX_REPEATS}"):
            ragframe.run(frame(2), ["faithfulness"], judge=judge_for(server, tmp_path), repeats=bad)
        with pytest.raises(ConfigError, match=f"at most {MAX_REPEATS}"):
            ragframe.estimate(frame(2), ["faithfulness"], repeats=bad)
    assert server.count() == 0


def test_repeats_share_one_max_cost_as_a_single_run_does(
    server: FakeServer, tmp_path: Path
) -> None:
    """`Judge(max_cost=)` caps the whole repeated run: each repeat used to get a budget of its
    own, so k repeats could spend k times the cap."""
    once = ragframe.run(
        frame(4), ["context_recall"], judge=judge_for(server, tmp_path, price=PRICE)
    )
    one_run = once.stats.cost
    assert one_run is not None and one_run > 0
    server.reset()
    cap = 1.5 * one_run  # above one repeat, well below three
    judge = judge_for(server, tmp_path, price=PRICE, max_cost=cap, concurrency=1)
    with pytest.raises(BudgetExceeded, match="stopped in repeat 2 of 3: the repeats have spent"):
        ragframe.run(frame(4), ["context_recall"], judge=judge, repeats=3)
    assert server.count() < 3 * once.stats.requests


def test_a_dry_run_and_max_cost_count_every_repeat(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    frame(4).write_parquet(source)
    base = argv(source, out, server, tmp_path / "c.sqlite3", ["--price", "1000,1000"])
    assert main([*base, "--dry-run"]) == 0
    single = capsys.readouterr().out
    assert main([*base, "--dry-run", "--repeats", "3"]) == 0
    repeated = capsys.readouterr().out
    requests = [int(text.split()[1]) for text in (single, repeated)]
    assert requests[1] == 3 * requests[0] and "x 3 repeats" in repeated
    dollars = float(single.split("$")[1].split()[0])
    assert main([*base, "--repeats", "3", "--max-cost", f"{2 * dollars:.4f}"]) == 2
    assert "exceeds --max-cost" in capsys.readouterr().err
    assert server.count() == 0 and not out.exists()


# ------------------------------------------------------------------ scores outside [0, 1]


def test_a_score_outside_0_1_is_surfaced_alike_in_memory_and_streamed(tmp_path: Path) -> None:
    """A score past [0, 1] is a metric's bug: null with the value in the detail's error, the
    same on every path (the streamed summary used to clip it into its mean, while the
    in-memory summary refused the whole run's figures)."""
    data = pl.DataFrame({"a": [1.3, 0.5, 1.0], "b": [1.0, 0.5, 1.0 + 1e-12]})
    combo = RagasScore(of=("a", "b"), name="combo")
    result = ragframe.run(data, [combo])
    assert result.frame.get_column("combo").to_list() == [None, 0.5, 1.0]
    errors = result.frame.get_column("combo_detail").struct.field("error").to_list()
    assert errors[0] is not None and "outside [0, 1]" in errors[0] and "combo" in errors[0]
    assert errors[1:] == [None, None]
    data.write_parquet(tmp_path / "in.parquet")
    streamed = score_file(tmp_path / "in.parquet", tmp_path / "out.parquet", [combo])
    assert streamed.summary()["metrics"] == result.summary()["metrics"]
    assert streamed.summary()["metrics"]["combo"]["failed"] == 1
    pl.testing.assert_frame_equal(pl.read_parquet(tmp_path / "out.parquet"), result.frame)


# ------------------------------------------------------------ texts cut before judging


def long_answer_frame() -> pl.DataFrame:
    """Row 0's answer is 2,000 characters (over a 100-character limit); row 1 is short."""
    data = frame(2)
    return data.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.col("answer") + " " + "x" * 2000)
        .otherwise(pl.col("answer"))
        .alias("answer")
    )


def test_a_text_cut_before_judging_is_marked_counted_and_said(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = judge_for(server, tmp_path, max_text_chars=100)
    data = long_answer_frame()
    result = ragframe.run(data, ["faithfulness", "context_recall"], judge=judge)
    cut = {
        name: result.frame.get_column(f"{name}_detail").struct.field("inputs_cut").to_list()
        for name in ("faithfulness", "context_recall")
    }
    # faithfulness read the cut answer in row 0; context_recall does not read the answer.
    assert cut == {"faithfulness": [["answer"], []], "context_recall": [[], []]}
    assert any("truncated" in b["messages"][-1]["content"] for b in server.chat_requests)
    expected = {"rows": 1, "by_input": {"answer": 1}, "max_text_chars": 100}
    assert result.summary()["inputs_cut"] == expected
    assert "texts cut before judging: 1 row (" in str(result)
    # The streamed run counts them alike, into the file's metadata.
    data.write_parquet(tmp_path / "in.parquet")
    streamed = score_file(
        tmp_path / "in.parquet", tmp_path / "s.parquet", ["faithfulness"], judge=judge
    )
    assert streamed.summary()["inputs_cut"] == expected
    assert ragframe.read_metadata(tmp_path / "s.parquet")["summary"]["inputs_cut"] == expected
    # The command line takes the limit, and says so on stderr too.
    out = tmp_path / "cli.parquet"
    command = argv(tmp_path / "in.parquet", out, server, tmp_path / "c.sqlite3", [])
    assert main([*command, "--metrics", "faithfulness", "--max-text-chars", "100"]) == 0
    assert "warning: texts cut before judging: 1 row (" in capsys.readouterr().err
    assert ragframe.read_metadata(out)["summary"]["inputs_cut"] == expected
    # Under the limit nothing is cut, and the summary says nothing of it.
    assert main([*command, "--metrics", "faithfulness"]) == 0
    assert "cut" not in capsys.readouterr().err
    assert "inputs_cut" not in ragframe.read_metadata(out)["summary"]
    written = pl.read_parquet(out).get_column("faithfulness_detail")
    assert written.struct.field("inputs_cut").to_list() == [[], []]


def test_the_batch_api_path_marks_and_says_a_cut_text_too(
    server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    data = frame(2)
    data.with_columns(pl.col("answer") + " " + "y" * 60_000).write_parquet(source)
    command = ["batch", "run", str(source), "-o", str(out), "--manifest", str(tmp_path / "m")]
    command += ["--metrics", "faithfulness", "--model", "fake-judge", "--base-url", server.base_url]
    command += ["--cache", str(tmp_path / "b.sqlite3"), "--poll-interval", "0.05", "--wait", "60"]
    assert main(command) == 0
    assert "warning: texts cut before judging: 2 rows" in capsys.readouterr().err
    expected = {"rows": 2, "by_input": {"answer": 2}, "max_text_chars": 50_000}
    assert ragframe.read_metadata(out)["summary"]["inputs_cut"] == expected


def test_an_ambiguity_in_an_input_no_metric_reads_does_not_stop_the_run(
    server: FakeServer, tmp_path: Path
) -> None:
    """Two aliases of a ground truth (`reference`, `expected_output`) beside a run of
    faithfulness, which never reads one: the run scores (the check of texts cut before judging
    used to look at every input and refused it), and a metric that reads it is still refused."""
    log = pl.DataFrame(
        {
            "question": ["What is blue?"],
            "answer": ["The sky is blue."],
            "contexts": [["The sky is blue."]],
            "reference": ["The sky."],
            "expected_output": ["The sky, by day."],
        }
    )
    judge = judge_for(server, tmp_path)
    scored = ragframe.evaluate(log, ["faithfulness"], judge=judge)
    assert scored["faithfulness"].is_not_null().all()
    with pytest.raises(RagframeError, match="ground_truth"):
        ragframe.evaluate(log, ["answer_correctness"], judge=judge)
