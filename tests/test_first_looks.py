"""A first run's rough edges (issue 14): one overwrite rule, a readable summary with intervals,
`--version`, help that shows the defaults, and sampling from the command line."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.engine.summary import KEPT_SCORES, Tally, metric_summary
from ragframe.errors import ConfigError


def rows(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "question": [f"What is fact {i}?" for i in range(n)],
            "answer": [f"Fact {i} is true." for i in range(n)],
            "contexts": [[f"Fact {i} is true.", "Unrelated text."] for i in range(n)],
            "ground_truth": [f"Fact {i} is true." for i in range(n)],
        }
    )


def test_write_parquet_refuses_an_existing_file_like_the_cli(server, judge, tmp_path):
    result = ragframe.run(rows(2), ["context_recall"], judge=judge)
    target = tmp_path / "scored.parquet"
    result.write_parquet(target)
    with pytest.raises(ConfigError, match="exists"):
        result.write_parquet(target)
    result.write_parquet(target, overwrite=True)
    assert pl.read_parquet(target).equals(result.frame)


def test_summary_reads_as_a_table_in_text_and_html(server, judge):
    result = ragframe.run(rows(6), ["context_recall", "context_precision"], judge=judge)
    text = str(result)
    assert "95% interval" in text.splitlines()[0]
    line = next(x for x in text.splitlines() if x.split()[:1] == ["context_recall"])
    summary = result.summary()["metrics"]["context_recall"]
    assert f"{summary['mean']:.3f}" in line and str(summary["scored"]) in line
    html = result._repr_html_()
    assert html.count("<tr>") == 3 and "context_precision" in html and "95% interval" in html


def test_each_mean_has_its_interval_and_n(server, judge):
    result = ragframe.run(rows(8), ["context_recall"], judge=judge)
    line = result.summary()["metrics"]["context_recall"]
    scores = result.frame["context_recall"].drop_nulls()
    assert line["scored"] == scores.len() and line["level"] == 0.95
    assert math.isclose(line["mean"], scores.mean())
    if scores.n_unique() > 1:
        assert line["ci_low"] < line["mean"] < line["ci_high"]
    else:  # every score equal: the interval is that one value
        assert line["ci_low"] == line["ci_high"] == line["mean"]


def test_streamed_tally_matches_the_in_memory_summary_below_the_cut():
    rng = np.random.default_rng(1)
    values = pl.Series([*rng.random(300).tolist(), None, None])
    tally = Tally("higher")
    for start in range(0, values.len(), 50):
        tally.add(values.slice(start, 50))
    assert tally.summary() == metric_summary(values, "higher")


def test_streamed_tally_past_the_cut_gives_the_in_memory_interval():
    rng = np.random.default_rng(2)
    values = rng.random(KEPT_SCORES + 5_000)
    tally = Tally("lower")
    for chunk in np.array_split(values, 7):
        tally.add(pl.Series(chunk))
    line = tally.summary()
    assert line["interval_method"] == "t" and line["scored"] == values.size
    whole = metric_summary(pl.Series(values), "lower")
    for key in ("mean", "ci_low", "ci_high"):
        assert math.isclose(line[key], whole[key], rel_tol=1e-9)
    assert tally.kept == []  # the scores are not held past the cut


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"ragframe {ragframe.__version__}"


def test_score_help_shows_the_defaults(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "where.sqlite3"))
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 16;" in text and "(default: 120)" in text
    # argparse wraps a long path anywhere: compare without the wrapping
    unwrapped = "".join(text.split())
    assert f"(default:{tmp_path / 'where.sqlite3'};" in unwrapped
    assert "the embedded local judge runs" in text
    assert "faithfulness,answer_relevancy,context_precision,context_recall" in unwrapped


def test_evaluate_scores_a_reproducible_sample_that_joins_back(server, judge):
    log = rows(40)
    first = ragframe.run(log, ["context_recall"], judge=judge, sample=7, seed=3)
    again = ragframe.evaluate(log, ["context_recall"], judge=judge, sample=7, seed=3)
    other = ragframe.evaluate(log, ["context_recall"], judge=judge, sample=7, seed=4)
    sampled = first.frame
    assert sampled.columns[0] == "row_index" and sampled.height == 7
    assert sampled["row_index"].to_list() == again["row_index"].to_list()
    assert sampled["row_index"].to_list() != other["row_index"].to_list()
    # Every input column untouched: the sampled rows are the log's rows at row_index.
    back = log.with_row_index("row_index").join(sampled.select("row_index"), on="row_index")
    assert back.drop("row_index").equals(sampled.select(log.columns))
    assert first.summary()["sample"] == {**first.extra["sample"], "rows": 7, "of": 40}
    assert "from a uniform random sample of 7 of the log's 40 rows (seed 3)" in str(first)


def test_score_sample_from_the_command_line(server, tmp_path, capsys):
    source, target = tmp_path / "log.parquet", tmp_path / "sample.parquet"
    rows(30).write_parquet(source)
    argv = ["score", str(source), "-o", str(target), "--metrics", "context_recall"]
    argv += ["--model", "fake-judge", "--base-url", server.base_url, "--no-progress"]
    argv += ["--embedding-model", "fake-embedding", "--no-cache"]
    assert main([*argv, "--sample", "5", "--seed", "11"]) == 0
    out = capsys.readouterr().out
    scored = pl.read_parquet(target)
    assert scored.height == 5 and scored["row_index"].is_sorted()
    assert ragframe.read_metadata(target)["summary"]["sample"]["of"] == 30
    assert "sample of 5 of the log's 30 rows (seed 11)" in out
    assert "the whole log (30 rows, dry run" in out
    sent = len(server.chat_requests)
    assert sent == 5  # the whole log's estimate sends nothing


class FirstTotal:
    """A stand-in for tqdm that keeps the totals shown before the first request finished."""

    totals: ClassVar[list[int]] = []

    def __init__(self, total: int, **options: Any) -> None:
        self.total, self.n = total, 0
        FirstTotal.totals.append(total)

    def update(self, k: int) -> None:
        self.n += k

    def refresh(self) -> None:
        if self.n == 0 and self.total != FirstTotal.totals[-1]:
            FirstTotal.totals.append(self.total)

    def close(self) -> None: ...


@pytest.mark.parametrize("source", ["frame", "parquet", "jsonl"])
def test_the_progress_bar_starts_at_the_runs_planned_total(
    server, make_judge, tmp_path, monkeypatch, source
):
    """Every row's every stage is planned before the first request: 6 rows x (faithfulness's
    claims and verification + context_recall) = 18, for a frame and a Parquet file (which
    records its rows). JSON Lines does not: its plan grows chunk by chunk (4 rows first)."""
    from ragframe.engine.stream import score_file
    from ragframe.judge import backends

    FirstTotal.totals = []
    monkeypatch.setattr(backends, "_bar_class", lambda: FirstTotal)
    judge = make_judge(progress=True)
    metrics = ["faithfulness", "context_recall"]
    if source == "frame":
        ragframe.run(rows(6), metrics, judge=judge)
    else:
        path = tmp_path / f"log.{source}"
        rows(6).write_parquet(path) if source == "parquet" else rows(6).write_ndjson(path)
        score_file(path, tmp_path / "out.parquet", metrics, judge=judge, chunk_rows=4)
    shown = [total for total in FirstTotal.totals if total]  # the bar opens at 0, then plans
    assert shown[0] == (12 if source == "jsonl" else 18) and shown[-1] == 18
    assert server.count() == 18


def test_a_rerun_of_remembered_failures_sends_nothing_and_still_exits_4(server, tmp_path, capsys):
    """Every context_recall answer cut off at max_tokens: exit 4. Run again, unchanged: the
    failures are remembered, nothing is sent, the summary says so, and the status is still 4."""
    from ragframe.testing.server import Reply

    server.handler = lambda body: Reply(content='{"facts": [{"fa', finish_reason="length")
    source = tmp_path / "log.parquet"
    rows(3).write_parquet(source)
    argv = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--overwrite"]
    argv += ["--metrics", "context_recall", "--model", "fake-judge", "--no-progress"]
    argv += ["--base-url", server.base_url, "--cache", str(tmp_path / "cache.sqlite3")]
    assert main(argv) == 4
    sent = server.count()
    assert sent == 6  # 3 rows, each asked and re-asked once (the repair)
    capsys.readouterr()
    assert main(argv) == 4
    assert server.count() == sent
    assert "remembered failures (not sent again; --retry-failed sends them): 3" in (
        capsys.readouterr().out
    )
    assert main([*argv, "--retry-failed"]) == 4
    assert server.count() == 2 * sent


def test_a_sampled_file_says_so_in_summarize(server, judge, tmp_path):
    """The metadata records the sample where `summarize` reads it; the file is written in row
    groups, so a reader after a few rows decodes few of them."""
    import pyarrow.parquet as pq

    result = ragframe.run(rows(40), ["context_recall"], judge=judge, sample=9, seed=5)
    target = tmp_path / "sample.parquet"
    result.write_parquet(target)
    table = ragframe.summarize(target)
    assert table.select("sample_rows", "population_rows").row(0) == (9, 40)
    big = pl.concat([result.frame] * 300)  # 2,700 rows
    result.frame = big
    result.write_parquet(target, overwrite=True)
    assert pq.ParquetFile(target).metadata.num_row_groups == 2


def test_repeats_through_run_and_the_command_line(server, judge, tmp_path, capsys):
    """repeats=k scores k times at seeds 0..k-1; the summary carries the spread and it is
    printed; a rerun of the same repeats from the cache sends nothing."""
    result = ragframe.run(rows(6), ["context_recall"], judge=judge, repeats=3)
    seeds = sorted({body["seed"] for body in server.chat_requests})
    assert seeds == [0, 1, 2] and result.frame["context_recall_repeats"].list.len().max() == 3
    figures = result.summary()["repeats"]
    assert figures["k"] == 3 and "context_recall" in figures["metrics"]
    assert "repeats: 3 runs" in str(result)
    source = tmp_path / "log.parquet"
    rows(6).write_parquet(source)
    argv = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--repeats", "2"]
    argv += ["--metrics", "context_recall", "--model", "fake-judge", "--no-progress"]
    argv += ["--base-url", server.base_url, "--cache", str(tmp_path / "c.sqlite3")]
    assert main(argv) == 0
    sent = server.count()
    assert main([*argv, "--overwrite"]) == 0 and server.count() == sent
    assert "repeats: 2 runs" in capsys.readouterr().out


def test_evaluate_says_how_many_repeats_it_takes():
    """check_repeats refuses more than MAX_REPEATS; evaluate's docstring did not say so."""
    from ragframe.engine.run import evaluate
    from ragframe.engine.spec import MAX_REPEATS

    assert f"1 to {MAX_REPEATS}" in " ".join((evaluate.__doc__ or "").split())


@pytest.mark.parametrize("text", ["faithfulness", " a, ,b ,", "all", ",,"])
def test_the_command_line_splits_a_list_as_a_run_splits_its_metrics(text):
    """One comma split: `--by`, `--strict`... as `--metrics` and `RunSpec` (where "all",
    and only there, means every metric)."""
    from ragframe.cli.common import parse_metrics
    from ragframe.engine.spec import comma_names, metric_names

    assert parse_metrics(text) == list(comma_names(text))
    if text != "all":
        assert tuple(parse_metrics(text)) == metric_names(text)
