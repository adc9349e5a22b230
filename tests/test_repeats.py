"""Repeatability: k runs with seeds base..base+k-1, combined per row, with the spread and the
test-retest reliability of each metric (scripted judge whose verdicts depend on the seed)."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import fenced, reply, router

import ragframe
from ragframe.engine.repeats import (
    check_repeat_seeds,
    check_repeats,
    icc1,
    merge_stats,
    repeat_judges,
    retest_figures,
    runs_needed,
    score_repeats,
)
from ragframe.errors import ConfigError
from ragframe.inputs.io import read_metadata
from ragframe.judge.client import RunStats
from ragframe.judge.config import SEED_MAX
from ragframe.metrics import Faithfulness
from ragframe.testing.server import Reply

CLAIMS = ["claim 1", "claim 2", "claim 3", "claim 4"]
BASE_SEED = 7
#: Supported claims (of 4) per row (rows) and repeat (columns): what the scripted judge says
#: for row i at seed BASE_SEED + r.
SUPPORTED = np.array([[0, 1, 0], [1, 1, 2], [2, 3, 2], [3, 3, 4], [4, 4, 4], [1, 2, 3]])
EXPECTED = SUPPORTED / 4


def frame(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(n)],
            "answer": [f"Answer {i}." for i in range(n)],
            "contexts": [[f"Context {i}."] for i in range(n)],
        }
    )


def verify_by_seed(body: dict[str, Any]) -> Any:
    """Row i (from its context) at seed BASE_SEED + r: the first SUPPORTED[i, r] claims hold."""
    row = int(re.search(r"Context (\d+)\.", fenced(body, "context")[0]).group(1))
    supported = SUPPORTED[row, body["seed"] - BASE_SEED]
    claims = fenced(body, "claim")
    return reply(
        {
            "verdicts": [
                {"index": k, "reason": f"seed {body['seed']}", "supported": bool(k <= supported)}
                for k in range(1, len(claims) + 1)
            ]
        }
    )


@pytest.fixture
def scripted(server: Any) -> Any:
    server.handler = router(
        answer_claims=reply({"claims": CLAIMS}), faithfulness_verify=verify_by_seed
    )
    return server


def repeats(judge: Any, k: int, n: int = 6, **options: Any) -> Any:
    metrics = options.pop("metrics", None) or [Faithfulness()]
    return asyncio.run(score_repeats(frame(n), metrics, judge, k, **options))


def seeds_sent(server: Any) -> set[int]:
    return {b["seed"] for b in server.chat_requests}


# ------------------------------------------------------------------------------ figures


def test_icc1_matches_the_one_way_anova_by_hand():
    """Scores [0, .25, .5, .75] then each + 0.25: MSB = 2 * var(row means) = 0.2083,
    MSW = 0.125 / 4 = 0.03125, ICC = (MSB - MSW) / (MSB + MSW) = 17 / 23. A pure shift
    between repeats is noise to ICC(1,1) (a Pearson correlation would say 1.0)."""
    matrix = np.array([[0, 0.25], [0.25, 0.5], [0.5, 0.75], [0.75, 1.0]])
    assert icc1(matrix) == pytest.approx(17 / 23)
    assert icc1(np.array([[0.1, 0.1], [0.9, 0.9]])) == 1.0  # repeats agree exactly
    assert icc1(np.full((5, 3), 0.5)) is None  # nothing varies: undefined
    assert icc1(np.array([[0.5, 0.5]])) is None  # one row


def test_retest_recovers_the_reliability_of_simulated_noise():
    """Rows with true scores of SD 0.2 and repeat noise of SD 0.1: the reliability is
    0.04 / (0.04 + 0.01) = 0.8, the per-row SD about 0.1 (times c4(3) = 0.886, the mean SD's
    bias at k = 3), and the interval covers 0.8."""
    rng = np.random.default_rng(1)
    true = rng.normal(0.5, 0.2, size=(2000, 1))
    scores = true + rng.normal(0, 0.1, size=(2000, 3))
    figures = retest_figures(pl.Series("m_repeats", scores.tolist()))
    assert figures.n == 2000 and figures.incomplete == 0
    assert figures.retest == pytest.approx(0.8, abs=0.02)
    assert figures.ci_low < 0.8 < figures.ci_high
    assert figures.ci_high - figures.ci_low < 0.05
    assert figures.row_sd == pytest.approx(0.1 * 0.886, rel=0.05)
    assert figures.mean_sd == pytest.approx(0.1 / math.sqrt(2000), rel=0.05)
    assert figures.runs_needed == 3  # 0.9 * 0.2 / (0.8 * 0.1) = 2.25 -> 3


def test_runs_needed_by_spearman_brown():
    assert runs_needed(0.5) == 9  # 9 * 0.5 / (1 + 8 * 0.5) = 0.9
    assert runs_needed(0.9) == 1
    assert runs_needed(0.95) == 1
    assert runs_needed(0.0) is None and runs_needed(None) is None


# ------------------------------------------------------------------------- whole runs


def test_repeats_use_distinct_seeds_and_give_the_scripted_spread(scripted, make_judge):
    judge = make_judge(seed=BASE_SEED, temperature=0.7)
    result = repeats(judge, 3)
    assert seeds_sent(scripted) == {BASE_SEED, BASE_SEED + 1, BASE_SEED + 2}
    # Per repeat: one extraction and one verification per row.
    assert scripted.count() == 3 * 2 * 6
    out = result.frame
    assert out["faithfulness_repeats"].to_list() == EXPECTED.tolist()
    assert out["faithfulness"].to_list() == pytest.approx(EXPECTED.mean(axis=1).tolist())
    # The detail is repeat 0's: its verdicts, and their reasons name seed BASE_SEED.
    first = out["faithfulness_detail"][1]["claims"]
    assert [c["supported"] for c in first] == [True, False, False, False]
    assert {c["reason"] for c in first} == {f"seed {BASE_SEED}"}

    figures = result.summary["metrics"]["faithfulness"]
    assert figures["n"] == 6 and figures["incomplete"] == 0
    assert figures["row_sd"] == pytest.approx(EXPECTED.std(axis=1, ddof=1).mean())
    assert figures["mean_sd"] == pytest.approx(math.sqrt(EXPECTED.var(axis=1, ddof=1).mean() / 6))
    assert figures["retest"] == pytest.approx(icc1(EXPECTED))
    assert figures["ci_low"] <= figures["retest"] <= figures["ci_high"]
    assert result.summary["k"] == 3
    assert result.summary["seeds"] == [BASE_SEED, BASE_SEED + 1, BASE_SEED + 2]
    assert result.summary["temperature"] == 0.7
    assert "warning" not in result.summary
    assert result.stats.requests == 36  # the three runs' requests together
    assert {b["temperature"] for b in scripted.chat_requests} == {0.7}


def test_rerunning_the_same_repeats_sends_nothing(scripted, make_judge):
    first = repeats(make_judge(seed=BASE_SEED, cache=True), 2)
    sent = scripted.count()
    assert sent == 24
    again = repeats(make_judge(seed=BASE_SEED, cache=True), 2)
    assert scripted.count() == sent
    # Each repeat's columns were kept (6 rows x 2 repeats): reused whole (engine.reuse).
    assert again.stats.reused == 12 and again.stats.requests == 0
    assert again.frame.equals(first.frame)
    # A third repeat reuses the first two and sends only its new seed.
    repeats(make_judge(seed=BASE_SEED, cache=True), 3)
    assert scripted.count() == sent + 12
    assert {b["seed"] for b in scripted.chat_requests[sent:]} == {BASE_SEED + 2}


def test_one_repeat_is_a_normal_run(scripted, make_judge):
    judge = make_judge(seed=BASE_SEED)
    single = repeats(judge, 1)
    assert single.summary is None
    normal = ragframe.evaluate(frame(6), [Faithfulness()], judge=make_judge(seed=BASE_SEED))
    assert single.frame.equals(normal)
    assert seeds_sent(scripted) == {BASE_SEED}
    assert "faithfulness_repeats" not in single.frame.columns


def test_temperature_zero_is_kept_and_flagged(scripted, make_judge):
    result = repeats(make_judge(seed=BASE_SEED), 2)
    assert {b["temperature"] for b in scripted.chat_requests} == {0.0}
    assert "temperature 0" in result.summary["warning"]
    overridden = repeats(make_judge(seed=BASE_SEED, cache=False), 2, temperature=0.5)
    assert overridden.summary["temperature"] == 0.5 and "warning" not in overridden.summary


def test_a_failed_repeat_leaves_the_others_and_a_scored_detail(server, make_judge):
    """Row 0's verification fails at seed BASE_SEED (repeat 0): its mean comes from repeats
    1 and 2, its detail from repeat 1 (scored, no error), and it is left out of the figures."""

    def verify(body: dict[str, Any]) -> Any:
        if body["seed"] == BASE_SEED and "Context 0." in fenced(body, "context"):
            return Reply(content='{"verdicts": [', finish_reason="length")
        return verify_by_seed(body)

    server.handler = router(answer_claims=reply({"claims": CLAIMS}), faithfulness_verify=verify)
    result = repeats(make_judge(seed=BASE_SEED, repair_attempts=0), 3)
    out = result.frame
    assert out["faithfulness_repeats"][0].to_list() == [None, *EXPECTED[0, 1:]]
    assert out["faithfulness"][0] == pytest.approx(EXPECTED[0, 1:].mean())
    detail = out["faithfulness_detail"][0]
    assert detail["error"] is None
    assert {c["reason"] for c in detail["claims"]} == {f"seed {BASE_SEED + 1}"}
    figures = result.summary["metrics"]["faithfulness"]
    assert figures["n"] == 5 and figures["incomplete"] == 1
    assert figures["retest"] == pytest.approx(icc1(EXPECTED[1:]))


def test_pass_column_applies_the_threshold_to_the_mean(scripted, make_judge):
    result = repeats(make_judge(seed=BASE_SEED), 3, metrics=[Faithfulness(threshold=0.5)])
    means = EXPECTED.mean(axis=1)
    assert result.frame["faithfulness_pass"].to_list() == [bool(m >= 0.5) for m in means]
    columns = result.frame.columns
    assert columns.index("faithfulness_repeats") == columns.index("faithfulness") + 1


def test_repeats_refuse_bad_k_and_shadowed_columns(scripted, make_judge):
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="repeats must be a positive integer"):
            check_repeats(bad)
    df = frame(2).with_columns(pl.lit(0.0).alias("faithfulness_repeats"))
    with pytest.raises(ConfigError, match="faithfulness_repeats"):
        asyncio.run(score_repeats(df, [Faithfulness()], make_judge(), 2))
    assert scripted.count() == 0


def test_repeat_judges_and_merged_stats(make_judge):
    judge = make_judge(seed=None)
    judges = repeat_judges(judge, 3)
    assert [j.seed for j in judges] == [0, 1, 2] and judge.seed is None
    assert repeat_judges(judge, 1) == [judge]
    one = RunStats(requests=3, prompt_tokens=10, lowest_concurrency=8)
    one.by_task["a"] = 3
    two = RunStats(requests=2, prompt_tokens=5, lowest_concurrency=4, structured_mode="prompt")
    two.by_task["a"] = 2
    merged = merge_stats([one, two])
    assert (merged.requests, merged.prompt_tokens, merged.by_task["a"]) == (5, 15, 5)
    assert merged.lowest_concurrency == 4 and merged.structured_mode == "prompt"
    assert one.by_task["a"] == 3  # the inputs are left as they were


def test_repeat_seeds_past_the_largest_seed_are_refused_up_front(server, make_judge):
    """A judge seed near 2**63 - 1 with k repeats: seeds up to SEED_MAX are sent, one past it
    is refused on one line (run and dry run alike) before any request."""
    assert [j.seed for j in repeat_judges(make_judge(seed=SEED_MAX - 2), 3)][-1] == SEED_MAX
    judge = make_judge(seed=SEED_MAX - 1)
    for attempt in (ragframe.run, ragframe.estimate):
        with pytest.raises(ConfigError, match="up to 9223372036854775808") as refused:
            attempt(frame(2), [Faithfulness()], judge=judge, repeats=3)
        message = str(refused.value)
        assert "\n" not in message and f"at most {SEED_MAX - 2}" in message
    assert server.count("") == 0
    # The check alone, for callers that refuse before reading any row.
    assert check_repeat_seeds(make_judge(seed=None), 3) == 0
    with pytest.raises(ConfigError, match="fewer repeats"):
        check_repeat_seeds(judge, 3)


def test_run_with_repeats_reports_them(scripted, make_judge, tmp_path):
    """`ragframe.run(..., repeats=k)`: the combined frame, the summary's `repeats` entry (also
    in the file's metadata and the printed summary), the k runs' requests together."""
    judge = make_judge(seed=BASE_SEED, temperature=0.7)
    result = ragframe.run(frame(6), [Faithfulness()], judge=judge, repeats=3)
    summary = result.summary()
    assert summary["metrics"]["faithfulness"]["mean"] == pytest.approx(EXPECTED.mean())
    assert summary["requests"] == 36
    figures = summary["repeats"]["metrics"]["faithfulness"]
    assert figures["retest"] == pytest.approx(icc1(EXPECTED))
    assert figures["n"] == 6
    path = tmp_path / "scored.parquet"
    result.write_parquet(path)
    assert read_metadata(path)["summary"]["repeats"] == summary["repeats"]
    assert "retest ICC" in str(result)
    with pytest.raises(ConfigError, match="repeats"):
        ragframe.run(frame(1), [Faithfulness()], judge=judge, repeats=0)


def test_the_estimate_counts_every_repeat_and_what_each_has_cached(scripted, make_judge):
    """A dry run with repeats counts each repeat's requests at its own seed: k times a single
    run's from an empty cache; after a run of 2 repeats, only the third's."""
    judge = make_judge(seed=BASE_SEED, temperature=0.7, cache=True)
    one = ragframe.estimate(frame(6), [Faithfulness()], judge=judge)
    three = ragframe.estimate(frame(6), [Faithfulness()], judge=judge, repeats=3)
    assert one["repeats"] == 1 and three["repeats"] == 3
    assert three["requests"] == 3 * one["requests"] == 3 * 2 * 6
    assert three["prompt_tokens"] == 3 * one["prompt_tokens"]
    assert scripted.count() == 0  # nothing sent
    ragframe.run(frame(6), [Faithfulness()], judge=judge, repeats=2)
    after = ragframe.estimate(frame(6), [Faithfulness()], judge=judge, repeats=3)
    assert after["requests"] == one["requests"]  # repeats 0 and 1 are cached


def test_the_runs_seed_seeds_the_repeats_bootstrap(scripted, make_judge, monkeypatch):
    import ragframe.engine.repeats as module

    seen: list[int] = []
    original = module.repeat_summary

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["seed"])
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "repeat_summary", spy)
    judge = make_judge(seed=BASE_SEED, temperature=0.7)
    ragframe.run(frame(6), [Faithfulness()], judge=judge, repeats=3, seed=5)
    assert seen == [5]


def test_the_dry_run_line_names_the_repeats(scripted, tmp_path, capsys):
    from ragframe.cli import main

    source = tmp_path / "log.parquet"
    frame(6).write_parquet(source)
    argv = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--dry-run"]
    argv += ["--metrics", "faithfulness", "--model", "fake-judge", "--no-cache"]
    argv += ["--base-url", scripted.base_url, "--repeats", "3", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "estimate: 36 requests" in out and "6 rows x 3 repeats" in out
    assert scripted.count() == 0


def test_repeats_at_a_temperature_from_the_command_line(server, tmp_path):
    from ragframe.cli import main

    source, target = tmp_path / "log.parquet", tmp_path / "out.parquet"
    frame(6).write_parquet(source)
    argv = ["score", str(source), "-o", str(target), "--metrics", "faithfulness"]
    argv += ["--model", "fake-judge", "--no-cache", "--base-url", server.base_url]
    argv += ["--repeats", "2", "--temperature", "0.7", "--no-progress"]
    assert main(argv) == 0
    assert {b["temperature"] for b in server.chat_requests} == {0.7}
    assert seeds_sent(server) == {0, 1}  # the default judge seed 0, then 1
    assert pl.read_parquet(target)["faithfulness_repeats"].list.len().to_list() == [2] * 6
    with pytest.raises(ConfigError, match="temperature must be 0 or more"):
        ragframe.Judge(temperature=-0.1)
