"""Cost: tokens per row, the price table, dry-run estimates, max_cost, input truncation."""

from __future__ import annotations

import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.judge.pricing import cost, price_of


def rows(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"question {i}" for i in range(n)],
            "answer": [f"answer {i}" for i in range(n)],
            "contexts": [[f"context {i}a", f"context {i}b"] for i in range(n)],
            "ground_truth": [f"truth {i}" for i in range(n)],
        }
    )


def test_price_table_and_snapshots():
    assert price_of("gpt-4o-mini") == (0.15, 0.60)
    assert price_of("gpt-4o-mini-2024-07-18") == (0.15, 0.60)
    assert price_of("gpt-4o-2024-08-06") == (2.50, 10.00)
    assert price_of("my-own-model") is None
    assert cost((0.15, 0.60), 1_000_000, 500_000) == pytest.approx(0.45)
    assert cost(None, 10, 10) is None


def test_detail_tokens_add_up_to_the_run_total(server, judge):
    result = ragframe.run(rows(6), ["context_precision", "context_recall"], judge=judge)
    per_row = sum(
        d["prompt_tokens"] + d["completion_tokens"]
        for name in ("context_precision", "context_recall")
        for d in result.frame[f"{name}_detail"]
    )
    # No prompt is shared between rows here, so per-row tokens sum to the run's tokens.
    assert per_row == result.stats.prompt_tokens + result.stats.completion_tokens > 0


def test_cost_in_summary_when_price_known(server, make_judge):
    judge = make_judge(price=(1.0, 2.0))
    result = ragframe.run(rows(3), ["context_recall"], judge=judge)
    summary = result.summary()
    expected = (summary["prompt_tokens"] * 1.0 + summary["completion_tokens"] * 2.0) / 1e6
    assert summary["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert make_judge().price is None  # "fake-judge" is not in the table: no made-up cost
    assert (
        ragframe.run(rows(1), ["context_recall"], judge=make_judge()).summary()["cost_usd"] is None
    )


def test_dry_run_counts_without_sending_and_matches_single_stage_metrics(server, make_judge):
    judge = make_judge(cache=True, price=(1.0, 1.0))
    guess = ragframe.estimate(rows(5), ["context_precision", "context_recall"], judge=judge)
    assert server.requests == []
    assert guess["requests"] == 10
    assert guess["requests_by_task"] == {
        "context_precision.reference": 5,
        "context_recall.attribute": 5,
    }
    assert guess["prompt_tokens"] > 0 and guess["cost_usd"] > 0
    real = ragframe.run(rows(5), ["context_precision", "context_recall"], judge=judge)
    assert real.stats.requests == guess["requests"]
    # Prompt tokens are estimated as characters / 4; the fake server counts the same way.
    assert guess["prompt_tokens"] == pytest.approx(real.stats.prompt_tokens, rel=0.25)
    # Answers now in the cache are free: a second estimate counts nothing.
    assert ragframe.estimate(rows(5), ["context_recall"], judge=judge)["requests"] == 0


def test_dry_run_follows_multi_stage_metrics(server, judge):
    guess = ragframe.estimate(rows(4), ["faithfulness"], judge=judge)
    assert guess["requests_by_task"]["answer.claims"] == 4
    assert guess["requests_by_task"]["faithfulness.verify"] == 4  # 4 typical claims: 1 a row
    assert server.requests == []


def test_max_cost_stops_the_run(server, make_judge):
    judge = make_judge(price=(1000.0, 1000.0), max_cost=0.05, concurrency=1)
    with pytest.raises(ragframe.BudgetExceeded, match="max_cost"):
        ragframe.run(rows(20), ["context_recall"], judge=judge)
    assert 0 < server.count() < 20


def test_max_cost_needs_a_price(make_judge):
    with pytest.raises(ragframe.ConfigError, match="price"):
        make_judge(max_cost=1.0)


def test_cli_dry_run_and_max_cost_refusal(server, tmp_path, capsys):
    path = tmp_path / "in.parquet"
    rows(3).write_parquet(path)
    out = tmp_path / "out.parquet"
    common = [
        "score",
        str(path),
        "-o",
        str(out),
        "--metrics",
        "context_recall",
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--no-cache",
        "--no-progress",
        "--price",
        "1,1",
    ]
    assert main([*common, "--dry-run"]) == 0
    assert "estimate: 3 requests" in capsys.readouterr().out
    assert server.requests == [] and not out.exists()
    assert main([*common, "--max-cost", "0.0000001"]) == 2
    assert "exceeds --max-cost" in capsys.readouterr().err
    assert server.requests == [] and not out.exists()


def test_long_inputs_are_truncated_by_rule(server, make_judge):
    huge = "x" * 200_000
    df = rows(1).with_columns(pl.lit([huge, "short"]).alias("contexts"))
    ragframe.run(df, ["context_recall"], judge=make_judge(max_text_chars=1_000))
    user = server.chat_requests[0]["messages"][1]["content"]
    assert "x" * 1_000 + " [... truncated 199000 characters]" in user
    assert "x" * 1_001 not in user
    assert "short" in user
    with pytest.raises(ragframe.ConfigError):
        make_judge(max_text_chars=0)


def test_estimate_of_a_file_is_counted_chunk_by_chunk(server, judge, tmp_path, monkeypatch):
    path = tmp_path / "log.parquet"
    frame = rows(7)
    frame.write_parquet(path)
    metrics = ["faithfulness", "context_recall"]
    whole = ragframe.estimate(frame, metrics, judge=judge)

    def whole_file(*args: object, **kwargs: object) -> None:
        raise AssertionError("the estimate of a file must not load it whole")

    monkeypatch.setattr(pl, "read_parquet", whole_file)
    chunked = ragframe.estimate(path, metrics, judge=judge, chunk_rows=3)
    assert chunked == whole and chunked["rows"] == 7
    assert server.requests == []
    with pytest.raises(ragframe.ConfigError, match="chunk_rows"):
        ragframe.estimate(path, metrics, judge=judge, chunk_rows=0)
    (tmp_path / "not.parquet").write_text("question,answer\n")
    with pytest.raises(ragframe.InputError, match="as Parquet"):
        ragframe.estimate(tmp_path / "not.parquet", metrics, judge=judge)
