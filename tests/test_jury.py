"""A jury of judges through one engine (`evaluate(..., judges=[...])`), with scripted judges on
the fake server, told apart by their model names: the majority's verdicts win over a judge
that always answers wrongly, the jury's score equals its own detail, the claims are extracted
once (by the lead judge) and verified by every judge, and a rerun resumes from the cache."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import fenced, judge_for, reply, task_name

import ragframe
from ragframe.errors import ConfigError
from ragframe.testing.server import FakeServer, auto_answer

CLAIMS = ["The sky is blue.", "Grass is green.", "Snow is black."]


def rows(n: int = 4, first: int = 0) -> pl.DataFrame:
    numbers = range(first, first + n)
    return pl.DataFrame(
        {
            "question": [f"What colour is thing {i}?" for i in numbers],
            "answer": [f"Answer {i}: sky blue, grass green, snow black." for i in numbers],
            "contexts": [[f"Row {i}.", "The sky is blue.", "Grass is green."] for i in numbers],
            "ground_truth": ["Blue, green, white."] * n,
        }
    )


def scripted(body: dict[str, Any]) -> Any:
    """Claims: three per answer. Verdicts: an honest judge supports the first two claims (all
    three on rows 100 and up); the liar ("liar" in its model name) answers every claim the
    other way."""
    task = task_name(body)
    if task == "answer_claims":
        return reply({"claims": CLAIMS})
    if task == "faithfulness_verify":
        liar = "liar" in body["model"]
        text = body["messages"][-1]["content"]
        row = int(re.search(r"Row (\d+)\.", text).group(1))  # type: ignore[union-attr]
        supported = 3 if row >= 100 else 2
        verdicts = [
            {"index": i + 1, "reason": f"checked {claim}", "supported": (i < supported) != liar}
            for i, claim in enumerate(fenced(body, "claim"))
        ]
        return reply({"verdicts": verdicts})
    return auto_answer(body)


def jury(server: FakeServer, tmp_path: Path) -> list[ragframe.Judge]:
    """Two honest judges and a liar, each with a cache of its own."""
    models = ("honest-a", "honest-b", "liar-c")
    return [judge_for(server, tmp_path, m, cache=tmp_path / f"{m}.sqlite3") for m in models]


def test_the_majority_outvotes_a_judge_that_always_answers_wrongly(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        result = ragframe.run(rows(), ["faithfulness", "context_recall"], judges=judges)
    scored = result.frame
    assert scored["faithfulness"].to_list() == pytest.approx([2 / 3] * 4)
    assert scored["faithfulness@honest-a"].to_list() == pytest.approx([2 / 3] * 4)
    assert scored["faithfulness@liar-c"].to_list() == pytest.approx([1 / 3] * 4)
    claims = scored["faithfulness_detail"][0]["claims"]
    assert [c["supported"] for c in claims] == [True, True, False]
    assert [c["votes"] for c in claims] == [
        [True, True, False],
        [True, True, False],
        [False, False, True],
    ]
    assert scored["faithfulness_detail"][0]["judges"] == ["honest-a", "honest-b", "liar-c"]
    # context_recall has no shared items: the mean of the three judges' scores
    judges = ("honest-a", "honest-b", "liar-c")
    own = scored.select(pl.mean_horizontal([f"context_recall@{j}" for j in judges])).to_series()
    assert scored["context_recall"].to_list() == pytest.approx(own.to_list())
    assert result.run["jury"] == ["honest-a", "honest-b", "liar-c"]


def test_claims_are_extracted_once_and_verified_by_every_judge(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        ragframe.run(rows(), ["faithfulness"], judges=judges)
        by = [(task_name(b), b["model"]) for b in server.chat_requests]
        with FakeServer(handler=scripted) as alone:
            one = judge_for(alone, tmp_path, "honest-a")
            ragframe.run(rows(), ["faithfulness"], judge=one)
            single = alone.count()
    extractions = [m for t, m in by if t == "answer_claims"]
    assert extractions and set(extractions) == {"honest-a"}  # the lead judge alone extracts
    verifications = [m for t, m in by if t == "faithfulness_verify"]
    assert sorted(set(verifications)) == ["honest-a", "honest-b", "liar-c"]
    assert len(verifications) == 3 * len(rows())
    assert len(by) <= 3 * single and len(by) < 3 * single  # fewer: the shared stage


def test_the_jury_score_equals_its_own_detail(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        metrics = ["faithfulness", "context_recall", "context_precision"]
        scored = ragframe.evaluate(rows(), metrics, judges=judges, aggregate="median")
    for row in scored.iter_rows(named=True):
        claims = row["faithfulness_detail"]["claims"]
        verdicts = [c["supported"] for c in claims if c["supported"] is not None]
        assert row["faithfulness"] == pytest.approx(sum(verdicts) / len(verdicts))
        given = sorted(s for s in row["context_recall_detail"]["scores"] if s is not None)
        assert row["context_recall"] == pytest.approx(given[len(given) // 2])  # the median
        relevant = [v["relevant"] for v in row["context_precision_detail"]["verdicts"]]
        hits = [sum(relevant[: k + 1]) / (k + 1) for k, r in enumerate(relevant) if r]
        assert row["context_precision"] == pytest.approx(sum(hits) / len(hits) if hits else 0.0)


def test_agreement_is_measured_and_printed(tmp_path: Path) -> None:
    """24 claims: alpha with its interval; 18 (fewer than MIN_UNITS): alpha, n and why there
    is no interval (one that covered about 90 % would be printed as 95 %)."""
    from ragframe.stats.alpha import MIN_UNITS

    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        result = ragframe.run(rows(8), ["faithfulness"], judges=judges)
        few = ragframe.run(rows(6), ["faithfulness"], judges=judges)
    items = result.extra["jury"]["metrics"]["faithfulness"]["items"]
    assert items["n"] == 24 and items["alpha"] is not None and items["alpha"] < 0.5
    assert -1 <= items["ci_low"] <= items["alpha"] <= items["ci_high"] <= 1
    text = str(result)
    assert "jury of 3: honest-a, honest-b, liar-c" in text
    assert f"alpha over claims {items['alpha']:.3f} [{items['ci_low']:.3f}, " in text
    withheld = few.extra["jury"]["metrics"]["faithfulness"]["items"]
    assert withheld["n"] == 18 < MIN_UNITS and withheld["alpha"] is not None
    assert withheld["ci_low"] is None and withheld["ci_high"] is None
    assert withheld["note"] == f"18 units with 2 values or more; an interval needs {MIN_UNITS}"
    assert (
        f"alpha over claims {withheld['alpha']:.3f} (n=18; no interval: {withheld['note']})"
        in str(few)
    )


def test_a_tie_is_not_a_majority(tmp_path: Path) -> None:
    """Two judges that disagree on every claim: each claim's vote is a tie, and a tie does
    not show the claim holds: every verdict False, the jury's score 0 (not 1)."""
    with FakeServer(handler=scripted) as server:
        pair = [judge_for(server, tmp_path, m) for m in ("honest-a", "liar-b")]
        scored = ragframe.evaluate(rows(2), ["faithfulness"], judges=pair)
    assert scored["faithfulness@honest-a"].to_list() == pytest.approx([2 / 3] * 2)
    assert scored["faithfulness"].to_list() == [0.0, 0.0]
    for detail in scored["faithfulness_detail"]:
        claims = detail["claims"]
        assert [c["votes"] for c in claims] == [[True, False], [True, False], [False, True]]
        assert [c["supported"] for c in claims] == [False, False, False]


def test_a_jury_resumes_from_its_judges_caches(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        first = ragframe.evaluate(rows(), ["faithfulness"], judges=judges)
        sent = server.count()
        again = ragframe.evaluate(rows(), ["faithfulness"], judges=jury(server, tmp_path))
        assert server.count() == sent  # every answer came from the judges' caches
    assert again.equals(first)


def test_what_a_jury_cannot_do_is_refused_before_any_request(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        with pytest.raises(ConfigError, match="at least 2 judges"):
            ragframe.run(rows(), ["faithfulness"], judges=judges[:1])
        with pytest.raises(ConfigError, match="not both"):
            ragframe.run(rows(), ["faithfulness"], judges=judges, judge=judges[0])
        with pytest.raises(ConfigError, match="repeats"):
            ragframe.run(rows(), ["faithfulness"], judges=judges, repeats=2)
        with pytest.raises(ConfigError, match="mean or median"):
            ragframe.run(rows(), ["faithfulness"], judges=judges, aggregate="mode")
        assert server.count() == 0


def test_the_dry_run_counts_every_judge_and_each_judge_meets_people(tmp_path: Path) -> None:
    """`estimate(judges=...)` adds up every judge's requests and cost; `agreement` reads each
    judge's column and the jury's side by side."""
    with FakeServer(handler=scripted) as server:
        judges = jury(server, tmp_path)
        one = ragframe.estimate(rows(), ["faithfulness"], judge=judges[0])
        all_three = ragframe.estimate(rows(), ["faithfulness"], judges=judges)
        assert all_three["requests"] == sum(
            ragframe.estimate(rows(), ["faithfulness"], judge=j)["requests"] for j in judges
        )
        assert all_three["requests"] == 3 * one["requests"] and server.count() == 0
        log = pl.concat([rows(4), rows(4, first=100)])  # people: the last four faithful
        scored = ragframe.evaluate(log, ["faithfulness"], judges=judges)
    labelled = scored.with_columns(faithful=pl.Series([False] * 4 + [True] * 4))

    def auroc(column: str) -> float:
        table = ragframe.agreement(labelled, score=column, label="faithful", direction="higher")
        return float(table.filter(pl.col("figure") == "auroc")["value"].item())

    assert auroc("faithfulness@honest-a") == 1.0 and auroc("faithfulness@liar-c") == 0.0
    assert auroc("faithfulness") == 1.0  # the jury beats its worst member, side by side


def test_summarize_shows_the_judges_agreement(tmp_path: Path, capsys: Any) -> None:
    from ragframe.cli import main

    with FakeServer(handler=scripted) as server:
        result = ragframe.run(rows(6), ["faithfulness"], judges=jury(server, tmp_path))
    result.write_parquet(tmp_path / "jury.parquet")
    assert main(["summarize", str(tmp_path / "jury.parquet")]) == 0
    printed = capsys.readouterr().out
    assert "jury of 3: honest-a, honest-b, liar-c" in printed
    items = result.extra["jury"]["metrics"]["faithfulness"]["items"]
    assert f"alpha over claims {items['alpha']:.3f} (n={items['n']}; no interval" in printed


def test_a_calibration_maps_the_jurys_score(tmp_path: Path) -> None:
    """`calibration=` with `judges=`: `{metric}_p_human` is the map applied to the jury's own
    score (the column a user reads), not dropped."""
    import numpy as np

    rng = np.random.default_rng(0)
    scores = rng.random(80)
    labelled = pl.DataFrame({"faithfulness": scores, "faithful": rng.random(80) < scores})
    cal = ragframe.calibrate(labelled, score="faithfulness", label="faithful")
    with FakeServer(handler=scripted) as server:
        scored = ragframe.evaluate(
            rows(), ["faithfulness"], judges=jury(server, tmp_path), calibration=cal
        )
    expected = cal.predict(scored["faithfulness"].to_numpy())
    assert scored["faithfulness_p_human"].to_list() == pytest.approx(list(expected))
