"""What a log of pairwise verdicts says: how often B wins, and how far the judge can be trusted.

Reads the output of `ragframe.metrics.pairwise` (the score column `{name}`: 1.0 B preferred,
0.0 A preferred, 0.5 tie; and `{name}_detail`) and reports, each figure with its n:

- `win_rate_b`: the mean of the per-pair scores, i.e. B's win rate with ties counted half,
  with its interval (`ragframe.stats.mean_interval`); n = pairs judged in both orders. The
  counts beside it: `b_wins`, `a_wins`, `ties` (of which `inconsistent_ties` are pairs whose
  verdict moved with the order, counted as ties by the swap-and-tie rule).
- `position_consistency`: the share of judged pairs whose verdict was the same in both
  orders, with its interval. A judge with no position bias is near 1 on clear pairs; one that
  always picks the answer it reads first scores 0.
- `first_position`: of the single-order verdicts that preferred an answer (ties left out, so
  that a judge that ties often is not read as favouring the second answer), the share that
  chose the answer read first, with its interval; n = those verdicts (up to twice the pairs).
  0.5 is no position preference; MT-Bench reports GPT-4 at about 0.6 to 0.7 on close pairs.
  Verdicts of one pair are not independent, so this interval is somewhat narrow.
- `failed`: pairs left out because an input was missing or a request failed (the detail's
  `error` says which).

Every interval assumes the pairs are independent draws from the questions of interest.
Pure Polars and numpy: no request is ever sent here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ragframe.decide.agreement import agreement
from ragframe.errors import InputError
from ragframe.judge.results import RunStats
from ragframe.metrics.pairwise import Pairwise, aestimate_pairs, run_pairs
from ragframe.stats import Interval, mean_interval

__all__ = [
    "format_pairs",
    "pair_figures",
    "pairwise_bench",
    "pairwise_columns",
    "summarize_pairs",
]

#: The bundled RAGChecker pairs with two annotators' preferences
#: (see `ragframe.decide.judge_bench`).
RAGCHECKER = Path(__file__).resolve().parent.parent / "data" / "bench" / "ragchecker.parquet"

#: The interval figures, in the order the summary prints them.
FIGURES = ("win_rate_b", "position_consistency", "first_position")
_NOTES = {
    "win_rate_b": "mean of per-pair scores: B preferred 1, A preferred 0, tie 0.5",
    "position_consistency": "share of pairs with the same verdict in both orders",
    "first_position": "share of single-order preferences for the answer read first (ties out)",
    "b_wins": "pairs where both orders preferred B",
    "a_wins": "pairs where both orders preferred A",
    "ties": "pairs counted as ties (both orders tie, or the verdict moved with the order)",
    "inconsistent_ties": "ties because the verdict moved with the order",
    "failed": "pairs not judged (missing input or a failed request; see the detail's error)",
}


def pairwise_columns(frame: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The pairwise score columns of a frame: those whose `{name}_detail` holds the
    pairwise fields (`ab`, `ba`, `position_consistent`)."""
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    found = []
    for name in schema:
        detail = schema.get(f"{name}_detail")
        if isinstance(detail, pl.Struct):
            fields = {f.name for f in detail.fields}
            if {"ab", "ba", "position_consistent", "preference"} <= fields:
                found.append(name)
    return found


def _column(frame: pl.DataFrame, name: str | None) -> str:
    names = pairwise_columns(frame)
    if name is None:
        if len(names) != 1:
            raise InputError(
                f"say which pairwise column to summarise: the frame has {names or 'none'} "
                f"(its columns: {frame.columns})"
            )
        return names[0]
    if name not in names:
        raise InputError(
            f"{name!r} is not a pairwise score column with its {name}_detail; the frame's "
            f"pairwise columns: {names or 'none'}"
        )
    return name


def pair_figures(
    frame: pl.DataFrame, name: str | None = None, *, level: float = 0.95, seed: int = 0
) -> dict[str, Interval]:
    """The three interval figures (`FIGURES`) of one pairwise column, each an `Interval`
    (mean, low, high, n)."""
    name = _column(frame, name)
    detail = pl.col(f"{name}_detail")
    judged = frame.filter(detail.struct.field("error").is_null() & pl.col(name).is_not_null())
    consistent = judged.select(detail.struct.field("position_consistent").cast(pl.Float64))
    verdicts = judged.select(
        pl.concat_list(
            detail.struct.field("ab").struct.field("verdict"),
            detail.struct.field("ba").struct.field("verdict"),
        ).alias("v")
    ).explode("v")
    chosen = verdicts.filter(pl.col("v").is_in(["first", "second"]))
    first = chosen.select((pl.col("v") == "first").cast(pl.Float64))
    return {
        "win_rate_b": mean_interval(judged.get_column(name), level, seed=seed),
        "position_consistency": mean_interval(consistent.to_series(), level, seed=seed),
        "first_position": mean_interval(first.to_series(), level, seed=seed),
    }


def summarize_pairs(
    frame: pl.DataFrame, name: str | None = None, *, level: float = 0.95, seed: int = 0
) -> pl.DataFrame:
    """The summary table of one pairwise column: one row per figure with `value`, `ci_low`,
    `ci_high` (interval figures only), `n` (what the figure rests on), `level`, `method`
    and a `note` saying what it counts."""
    name = _column(frame, name)
    detail = pl.col(f"{name}_detail")
    judged = detail.struct.field("error").is_null() & pl.col(name).is_not_null()
    preference = detail.struct.field("preference")
    counts = frame.select(
        (judged & (preference == "b")).sum().alias("b_wins"),
        (judged & (preference == "a")).sum().alias("a_wins"),
        (judged & (preference == "tie")).sum().alias("ties"),
        (judged & ~detail.struct.field("position_consistent")).sum().alias("inconsistent_ties"),
        (~judged).sum().alias("failed"),
    ).row(0, named=True)
    pairs = frame.height
    rows: list[dict[str, Any]] = []
    for figure, interval in pair_figures(frame, name, level=level, seed=seed).items():
        rows.append(
            {
                "figure": figure,
                "value": interval.mean,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "n": interval.n,
                "method": interval.method,
            }
        )
    for figure, count in counts.items():
        n = pairs if figure == "failed" else pairs - counts["failed"]
        rows.append(
            {"figure": figure, "value": float(count), "ci_low": None, "ci_high": None, "n": n}
        )
    return pl.DataFrame(
        [{**row, "metric": name, "level": level, "note": _NOTES[row["figure"]]} for row in rows],
        schema={
            "metric": pl.String,
            "figure": pl.String,
            "value": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
            "n": pl.Int64,
            "level": pl.Float64,
            "method": pl.String,
            "note": pl.String,
        },
    )


def format_pairs(table: pl.DataFrame) -> str:
    """`summarize_pairs`'s table for a terminal: the three rates with their intervals and n,
    then the counts."""
    if table.height == 0:
        return "no pairs"
    by = {row["figure"]: row for row in table.iter_rows(named=True)}
    level = table["level"][0]

    def rate(figure: str, label: str) -> str:
        row = by[figure]
        if row["value"] is None:
            return f"{label}: - (n = 0)"
        interval = "" if row["ci_low"] is None else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        return f"{label}: {row['value']:.3f}{interval} (n = {row['n']})"

    count = {k: int(by[k]["value"]) for k in ("b_wins", "a_wins", "ties", "inconsistent_ties")}
    return "\n".join(
        [
            f"{table['metric'][0]}: {by['win_rate_b']['n'] + int(by['failed']['value'])} pairs, "
            f"{int(by['failed']['value'])} not judged; intervals at {level:.0%}",
            "  " + rate("win_rate_b", "B win rate (ties half)"),
            f"    B wins {count['b_wins']}, A wins {count['a_wins']}, ties {count['ties']} "
            f"({count['inconsistent_ties']} of them because the verdict moved with the order)",
            "  " + rate("position_consistency", "position consistency"),
            "  " + rate("first_position", "first-position preference (0.5 = none)"),
        ]
    )


def bench_pairs(limit: int | None = None) -> pl.DataFrame:
    """The bundled RAGChecker pairs as a pairwise frame (answer_1 as a, answer_2 as b), with
    people's preferences."""
    labels = pl.read_parquet(RAGCHECKER)
    if limit is not None:
        labels = labels.head(limit)
    return labels.select(
        "id",
        "question",
        "ground_truth",
        pl.col("answer_1").alias("answer_a"),
        pl.col("answer_2").alias("answer_b"),
        pl.col("^correctness_pref.*$"),
    )


def estimate_pairwise_bench(
    judge: Any, limit: int | None = None, *, criteria: str = "answer_correctness"
) -> dict[str, int]:
    """What `pairwise_bench` would send (a dry run; nothing is sent)."""
    from ragframe._sync import run_sync

    return run_sync(aestimate_pairs(bench_pairs(limit), Pairwise(criteria), judge=judge))  # type: ignore[no-any-return]


def pairwise_bench(
    judge: Any,
    limit: int | None = None,
    *,
    criteria: str = "answer_correctness",
    level: float = 0.95,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame, RunStats]:
    """The pairwise judge on the bundled RAGChecker pairs (`ragframe/data/bench/`, two
    annotators per pair): (the agreement table, the judged pairs, the run's stats).

    answer_1 is answer_a and answer_2 answer_b, so a preference label > 0 (people preferred
    answer_2) agrees with "b". The table is `ragframe.agreement`'s pairwise table (accuracy
    over pairs neither people nor the judge tied, judge ties apart, ties counted half, label
    ties) with the per-pair score as side b against a constant 0.5 as side a, so a judge's tie
    (both orders tie, or the order changed the verdict) is a tie there too; it sits beside
    the score-difference rows judge-bench reports for the same pairs (`metric` says which).
    """
    metric = Pairwise(criteria)
    judged, stats = run_pairs(bench_pairs(limit), metric, judge=judge)
    sides = judged.with_columns(pl.lit(0.5).alias("__side_a"))
    table = agreement(
        sides,
        "__side_a",
        "correctness_pref",
        "pairwise",
        score_b=metric.name,
        direction="higher",
        level=level,
        seed=seed,
    ).with_columns(pl.lit(f"{metric.name} (both orders)").alias("metric"))
    return table, judged, stats
