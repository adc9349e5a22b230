"""ragframe.agreement: every figure against its textbook definition, the cross-validated
threshold never fitted on the rows it reports, and agreement with a scripted judge whose
answers follow the label with a known noise rate (through the real client and server)."""

from __future__ import annotations

import importlib
import itertools
import math
import re
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import fenced, reply, router, user_text

import ragframe
from ragframe.decide.agreement import (
    agreement,
    cross_validated_predictions,
    fit_threshold,
    kendall_tau_b,
    spearman,
)
from ragframe.errors import ConfigError, InputError

# The module, not the function `ragframe.agreement` that the package exports under its name.
agreement_module = importlib.import_module("ragframe.decide.agreement")

# ------------------------------------------------------------------------------ references


def auroc_by_pairs(s: np.ndarray, y: np.ndarray) -> float:
    pos, neg = s[y], s[~y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def ap_by_thresholds(s: np.ndarray, y: np.ndarray) -> float:
    """scikit-learn's step definition: sum over distinct thresholds of (R_k - R_k-1) P_k."""
    total, previous_recall = 0.0, 0.0
    for t in sorted(set(s.tolist()), reverse=True):
        tp = int(np.sum((s >= t) & y))
        fp = int(np.sum((s >= t) & ~y))
        recall = tp / int(y.sum())
        total += (recall - previous_recall) * tp / (tp + fp)
        previous_recall = recall
    return total


def tau_b_by_pairs(x: list[float], y: list[float]) -> float:
    conc = disc = tied_x = tied_y = 0
    for (x1, y1), (x2, y2) in itertools.combinations(zip(x, y, strict=True), 2):
        sign = np.sign(x1 - x2) * np.sign(y1 - y2)
        conc += sign > 0
        disc += sign < 0
        tied_x += x1 == x2
        tied_y += y1 == y2
    pairs = len(x) * (len(x) - 1) / 2
    return (conc - disc) / math.sqrt((pairs - tied_x) * (pairs - tied_y))


def midranks(v: list[float]) -> list[float]:
    order = sorted(v)
    return [(order.index(a) + 1 + len(order) - order[::-1].index(a)) / 2 for a in v]


def spearman_by_ranks(x: list[float], y: list[float]) -> float:
    return float(np.corrcoef(midranks(x), midranks(y))[0, 1])


def table_of(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ux, cx = np.unique(x, return_inverse=True)
    uy, cy = np.unique(y, return_inverse=True)
    table = np.zeros((ux.size, uy.size))
    np.add.at(table, (cx, cy), 1)
    return table


def figure(table: pl.DataFrame, name: str) -> dict[str, Any]:
    return table.filter(pl.col("figure") == name).row(0, named=True)


# ------------------------------------------------------------------------------ definitions


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_and_average_precision_match_their_definitions_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.random(60) < 0.4
    s = np.round(np.clip(0.3 * y + rng.random(60) * 0.7, 0, 1), 1)  # ties on purpose
    table = agreement(pl.DataFrame({"s": s, "y": y}), "s", "y", resamples=50)
    assert figure(table, "auroc")["value"] == pytest.approx(auroc_by_pairs(s, y))
    assert figure(table, "average_precision")["value"] == pytest.approx(ap_by_thresholds(s, y))
    assert figure(table, "positive_rate")["value"] == pytest.approx(y.mean())


@pytest.mark.parametrize("seed", [0, 1])
def test_kendall_and_spearman_match_their_definitions_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.round(rng.random(40), 1)
    y = np.round(x * 3 + rng.normal(0, 1, 40))
    t = table_of(x, y)
    assert float(kendall_tau_b(t)) == pytest.approx(tau_b_by_pairs(x.tolist(), y.tolist()))
    assert float(spearman(t)) == pytest.approx(spearman_by_ranks(x.tolist(), y.tolist()))
    # The pair-by-pair fallback for tables too large to hold gives the same figures.
    assert agreement_module._pairs_tau_b(x, y) == pytest.approx(float(kendall_tau_b(t)))
    assert agreement_module._pairs_spearman(x, y) == pytest.approx(float(spearman(t)))
    frame = pl.DataFrame({"s": x, "label": y})
    table = agreement(frame, "s", "label", "ordinal", resamples=200)
    assert figure(table, "kendall_tau_b")["value"] == pytest.approx(float(kendall_tau_b(t)))
    low, high = figure(table, "spearman")["ci_low"], figure(table, "spearman")["ci_high"]
    assert low < float(spearman(t)) < high


def test_past_the_bootstrap_limit_correlations_get_fisher_z_intervals(monkeypatch: Any) -> None:
    monkeypatch.setattr(agreement_module, "BOOTSTRAP_MAX_CELLS", 10)
    rng = np.random.default_rng(3)
    x = rng.random(80)
    frame = pl.DataFrame({"s": x, "label": x + rng.normal(0, 0.3, 80)})
    table = agreement(frame, "s", "label", "ordinal")
    assert set(table["method"]) == {"fisher-z"}
    for row in table.iter_rows(named=True):
        assert row["ci_low"] < row["value"] < row["ci_high"]


def test_fit_threshold_maximises_balanced_accuracy() -> None:
    rng = np.random.default_rng(4)
    y = rng.random(50) < 0.5
    s = np.round(0.2 * y + rng.random(50), 2)

    def balanced(cut: float) -> float:
        pred = s >= cut
        return (np.mean(pred[y]) + np.mean(~pred[~y])) / 2

    cuts = [-np.inf, *sorted(set(s.tolist())), np.inf]
    best = max(balanced(c) for c in cuts)
    assert balanced(fit_threshold(s, y)) == pytest.approx(best)


# ------------------------------------------------------------------------------ cross-validation


def test_each_fold_threshold_is_fitted_on_the_other_folds_only(monkeypatch: Any) -> None:
    """Every score is distinct, so the rows a fit sees are known by their scores: each fit
    sees exactly the rows outside one fold, and the folds it leaves out cover every row once."""
    rng = np.random.default_rng(5)
    n = 60
    y = rng.random(n) < 0.5
    s = rng.permutation(n) / 1000 + 0.3 * y  # distinct: [0, 0.06) and [0.3, 0.36)
    seen: list[set[float]] = []
    real = agreement_module.fit_threshold

    def recording(scores: np.ndarray, labels: np.ndarray) -> float:
        seen.append(set(scores.tolist()))
        return real(scores, labels)

    monkeypatch.setattr(agreement_module, "fit_threshold", recording)
    pred, fold, cuts = cross_validated_predictions(s, y, 5, np.random.default_rng(0))
    everything = set(s.tolist())
    held_out = [everything - fitted for fitted in seen]
    assert len(seen) == 5
    assert sum(len(h) for h in held_out) == n and set().union(*held_out) == everything
    for k, held in enumerate(held_out):
        in_fold = set(s[fold == k].tolist())
        assert held == in_fold  # fitted on all rows but this fold's
        assert cuts[k] == real(s[fold != k], y[fold != k])
        np.testing.assert_array_equal(pred[fold == k], s[fold == k] >= cuts[k])


def test_cross_validation_removes_the_optimism_of_fitting_on_the_reported_rows() -> None:
    """Scores with no signal: a threshold fitted on the rows it is scored on finds a lucky cut
    (balanced accuracy above 0.5 on those rows, on average over 20 draws); fitted on the other
    folds, as agreement does, it stays at chance."""
    in_sample, held_out = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = rng.random(40) < 0.5
        s = rng.random(40)
        pred = s >= fit_threshold(s, y)
        in_sample.append((np.mean(pred[y]) + np.mean(~pred[~y])) / 2)
        table = agreement(pl.DataFrame({"s": s, "y": y}), "s", "y", resamples=200)
        held_out.append(figure(table, "balanced_accuracy")["value"])
    # Measured: 0.575 in sample, 0.482 held out (sd of one draw's held-out figure 0.07).
    assert np.mean(in_sample) > np.mean(held_out) + 0.05
    assert 0.45 < np.mean(held_out) < 0.53 < np.mean(in_sample)
    row = figure(table, "balanced_accuracy")
    assert row["ci_low"] < 0.5 < row["ci_high"]
    assert "fitted on the other folds" in row["note"]


def test_threshold_of_a_lower_is_better_score_is_in_its_own_units() -> None:
    rng = np.random.default_rng(7)
    y = rng.random(100) < 0.5
    good = np.clip(0.5 * y + rng.random(100) * 0.5, 0, 1)
    frame = pl.DataFrame({"faithfulness": good, "hallucination": 1 - good, "faithful": y})
    up = agreement(frame, "faithfulness", seed=3)
    down = agreement(frame, "hallucination", seed=3)  # direction from the catalogue
    for name in ("auroc", "balanced_accuracy", "kappa"):
        assert figure(down, name)["value"] == pytest.approx(figure(up, name)["value"])
    assert figure(down, "auroc")["value"] > 0.8
    assert figure(down, "threshold")["value"] == pytest.approx(1 - figure(up, "threshold")["value"])
    assert "score <= threshold" in figure(down, "threshold")["note"]
    forced = agreement(frame, "hallucination", direction="higher")
    assert figure(forced, "auroc")["value"] < 0.2


def test_a_score_that_never_beats_predicting_one_label_says_so() -> None:
    y = np.arange(20) < 10
    s = np.where(y, 0.2, 0.8) + np.arange(20) / 1000  # every true row scores lower
    table = agreement(pl.DataFrame({"s": s, "y": y}), "s", "y")
    balanced = figure(table, "balanced_accuracy")
    assert balanced["value"] == 0.5 and figure(table, "kappa")["value"] == 0.0
    assert "every row was predicted true" in balanced["note"]
    assert figure(table, "auroc")["value"] == 0.0


def test_a_constant_score_gets_no_interval() -> None:
    frame = pl.DataFrame({"hallucination": [0.0] * 12, "faithful": [True, False] * 6})
    table = agreement(frame, "hallucination")
    auroc = figure(table, "auroc")
    assert auroc["value"] == 0.5 and auroc["ci_low"] is None and auroc["method"] == "none"
    assert "every row scored 0" in auroc["note"]
    assert figure(table, "average_precision")["value"] == 0.5


# ------------------------------------------------------------------------------ table, groups


def test_groups_nulls_and_seeds() -> None:
    rng = np.random.default_rng(8)
    n = 120
    y = rng.random(n) < 0.5
    s = np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1)
    frame = pl.DataFrame({"s": s, "y": y, "g": np.where(np.arange(n) % 3 == 0, "x", "z")})
    frame = frame.with_columns(
        pl.when(pl.int_range(n) % 10 == 0).then(None).otherwise("s").alias("s")
    )
    table = agreement(frame, "s", "y", by="g")
    assert table.columns[:2] == ["g", "metric"]
    assert sorted(set(table["g"])) == ["x", "z"]
    x_rows = frame.filter(pl.col("g") == "x")
    alone = agreement(x_rows.drop("g"), "s", "y")
    grouped = table.filter(pl.col("g") == "x")
    assert grouped["n_dropped"][0] == x_rows["s"].null_count() > 0
    assert grouped["n"][0] == x_rows.height - x_rows["s"].null_count()
    assert figure(grouped, "auroc")["value"] == pytest.approx(figure(alone, "auroc")["value"])
    assert agreement(frame, "s", "y", by="g").equals(table)  # seeded
    other = agreement(frame, "s", "y", by="g", seed=1)
    assert not other.equals(table)


def test_perfect_separation_has_an_interval_not_a_point() -> None:
    frame = pl.DataFrame(
        {"s": [0.1, 0.2, 0.3, 0.7, 0.8, 0.9, 0.95, 0.05], "y": [0, 0, 0, 1, 1, 1, 1, 0]}
    )
    auroc = figure(agreement(frame, "s", "y", folds=2), "auroc")
    assert auroc["value"] == 1.0 and auroc["method"] == "exact-bound"
    assert auroc["ci_low"] < 0.7 and auroc["ci_high"] == 1.0


def test_pairwise_counts_judge_ties_apart_and_leaves_label_ties_out() -> None:
    frame = pl.DataFrame(
        {
            "a": [0.2, 0.9, 0.5, 0.5, 0.1, 0.3, 0.4, 0.8],
            "b": [0.8, 0.1, 0.5, 0.7, 0.9, 0.3, 0.6, 0.2],
            "pref": [2, -1, 1, -2, 1, -1, 0, 0],
        }
    )
    table = agreement(frame, "a", "pref", "pairwise", score_b="b")
    # non-tied labels: rows 0-5; judge right on 0, 1, 4; wrong on 3; ties on 2, 5
    assert figure(table, "label_ties")["value"] == pytest.approx(2 / 8)
    assert figure(table, "accuracy")["value"] == pytest.approx(3 / 4)
    assert figure(table, "accuracy")["n"] == 4
    assert figure(table, "judge_ties")["value"] == pytest.approx(2 / 6)
    assert figure(table, "accuracy_ties_half")["value"] == pytest.approx(4 / 6)
    assert table["metric"][0] == "a vs b"


def test_a_repeats_column_beside_the_mean_changes_nothing() -> None:
    frame = pl.DataFrame(
        {
            "faithfulness": [0.2, 0.8, 0.6, 0.3, 0.9, 0.1],
            "faithfulness_repeats": [
                [0.2, 0.2],
                [0.7, 0.9],
                [0.6, 0.6],
                [0.4, 0.2],
                [1.0, 0.8],
                [0.0, 0.2],
            ],
            "faithful": [False, True, True, False, True, False],
        }
    )
    with_repeats = agreement(frame, folds=3)
    assert with_repeats.equals(agreement(frame.drop("faithfulness_repeats"), folds=3))


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"score": "nope"}, InputError, "no column 'nope'"),
        ({"label": "grade"}, InputError, "kind='ordinal'"),
        ({"label": "text"}, InputError, "needs numbers or Booleans"),
        ({"kind": "pairwise"}, ConfigError, "score_b"),
        ({"kind": "other"}, ConfigError, "kind must be"),
        ({"folds": 1}, ConfigError, "folds"),
    ],
)
def test_errors_say_what_to_fix(kwargs: dict[str, Any], error: type, says: str) -> None:
    frame = pl.DataFrame(
        {"faithfulness": [0.1, 0.9], "faithful": [0, 1], "grade": [1, 3], "text": ["a", "b"]}
    )
    with pytest.raises(error, match=re.escape(says)):
        agreement(frame, **kwargs)


# ------------------------------------------------------------------------------ scripted judge


def noisy_rows(n: int, noise: float, seed: int) -> tuple[pl.DataFrame, dict[int, bool]]:
    """n rows, half faithful; the judge's verdict on row i is the label, flipped with
    probability `noise` (drawn once per row, so the run is deterministic)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2 == 0
    flips = rng.random(n) < noise
    frame = pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(n)],
            "answer": [f"Row {i} states a fact." for i in range(n)],
            "contexts": [[f"Context of row {i}."] for i in range(n)],
            "faithful": labels,
        }
    )
    return frame, {i: bool(labels[i] ^ flips[i]) for i in range(n)}


def scripted_faithfulness(verdicts: dict[int, bool]) -> Any:
    def claims(body: dict[str, Any]) -> str:
        row = re.search(r"Row (\d+)", user_text(body)).group(1)  # type: ignore[union-attr]
        return reply({"claims": [f"Row {row} states a fact."]})

    def verify(body: dict[str, Any]) -> str:
        row = int(re.search(r"Row (\d+)", fenced(body, "claim")[0]).group(1))  # type: ignore[union-attr]
        return reply({"verdicts": [{"index": 1, "reason": "r", "supported": verdicts[row]}]})

    return router(answer_claims=claims, faithfulness_verify=verify)


@pytest.mark.parametrize("noise", [0.2, 0.35])
def test_agreement_with_a_judge_that_follows_the_label_with_known_noise(
    server: Any, judge: Any, noise: float
) -> None:
    frame, verdicts = noisy_rows(240, noise, seed=11)
    server.handler = scripted_faithfulness(verdicts)
    scored = ragframe.run(frame, ["faithfulness"], judge=judge)
    table = agreement(scored, "faithfulness", "faithful")
    # Balanced labels, symmetric noise e: AUROC = balanced accuracy = 1 - e, kappa = 1 - 2e.
    expected = {"auroc": 1 - noise, "balanced_accuracy": 1 - noise, "kappa": 1 - 2 * noise}
    for name, value in expected.items():
        row = figure(table, name)
        assert row["ci_low"] <= value <= row["ci_high"], (name, row)
        assert row["n"] == 240 and row["n_dropped"] == 0
    assert figure(table, "threshold")["value"] == pytest.approx(0.5)


def test_kappa_is_near_zero_for_a_judge_that_answers_at_random(server: Any, judge: Any) -> None:
    frame, verdicts = noisy_rows(240, 0.5, seed=12)
    server.handler = scripted_faithfulness(verdicts)
    table = agreement(
        ragframe.run(frame, ["faithfulness"], judge=judge), "faithfulness", "faithful"
    )
    kappa = figure(table, "kappa")
    assert kappa["ci_low"] < 0 < kappa["ci_high"]
    assert abs(kappa["value"]) < 0.15
    auroc = figure(table, "auroc")
    assert auroc["ci_low"] < 0.5 < auroc["ci_high"]


def test_pairwise_accuracy_is_one_for_a_judge_that_always_prefers_the_labelled_side(
    server: Any, judge: Any
) -> None:
    n = 40
    rng = np.random.default_rng(13)
    prefs = rng.choice([-2, -1, 0, 1, 2], n)
    frame = pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(n)],
            "ground_truth": [f"Truth {i}." for i in range(n)],
            "answer_a": [f"Pair {i} answer a." for i in range(n)],
            "answer_b": [f"Pair {i} answer b." for i in range(n)],
            "pref": prefs,
        }
    )
    better = {f"Pair {i} answer {'b' if p > 0 else 'a'}." for i, p in enumerate(prefs)}

    def rate(body: dict[str, Any]) -> str:
        return reply({"rating": 4 if set(fenced(body, "response")) & better else 0})

    server.handler = router(
        answer_accuracy_answer_vs_reference=rate, answer_accuracy_reference_vs_answer=rate
    )
    scores = {
        side: ragframe.run(
            frame, ["answer_accuracy"], judge=judge, columns={"answer": f"answer_{side}"}
        ).frame.get_column("answer_accuracy")
        for side in ("a", "b")
    }
    pairs = frame.with_columns(scores["a"].alias("score_a"), scores["b"].alias("score_b"))
    table = agreement(pairs, "score_a", "pref", "pairwise", score_b="score_b")
    accuracy = figure(table, "accuracy")
    assert accuracy["value"] == 1.0 and accuracy["n"] == int(np.sum(prefs != 0))
    assert 0.8 < accuracy["ci_low"] < 1.0 and accuracy["method"] == "exact-bound"
    assert figure(table, "judge_ties")["value"] == 0.0
