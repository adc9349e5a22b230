"""A jury: every metric scored by several judges through the same engine, and one verdict.

Each judge runs the run's metrics as a run of its own (`execute`): its own pool, limits,
cache, cost and failures. What the judges share, and who runs it:

- faithfulness's claims are extracted once, by the first judge (the lead), and every other
  judge verifies those same claims (they reach it as a `claims` column, the metric's "bring
  your own claims" input): so the judges vote on the same items, and a jury of k judges sends
  one extraction and k verifications per row, not k of each. A row whose lead extraction
  failed is extracted again by each judge (its votes then cannot be lined up: mean of scores).
- every other stage is run by every judge (k times one judge's requests at most).

The jury's score, per metric:

- the metrics whose items every judge judges alike (`VOTED`): faithfulness (the shared claims)
  and context_precision (the row's contexts, in rank order). An item's verdict is the
  majority's: true when more than half of the judges that gave it a verdict say so (a tie is
  not: the claim is not shown to hold, the context not shown relevant); the score is then the
  metric's own formula on those verdicts (supported claims / claims with a verdict; the
  average precision of the relevant contexts), so the jury's detail (each item with every
  judge's vote) justifies its score.
- every other metric: the mean of the judges' scores (`aggregate="median"`: the median), null
  when no judge scored the row; the detail lists each judge's score. Their items are not
  shared (each judge extracts its own statements), so their votes cannot be lined up.

Columns: `{metric}` and `{metric}_detail` are the jury's (and `{metric}_pass` on its score);
each judge's own score and detail are kept as `{metric}@{judge}` and `{metric}@{judge}_detail`
(the judge's name: its model, with `#2`, `#3` for a model named twice).

How much the judges agree (`RunResult.extra["jury"]`, printed in the summary): per metric,
Krippendorff's alpha over rows (interval scale, on the judges' scores) and, for the voted
metrics, over items (nominal, on the votes), each with n and an interval over units (jackknife
t on scores, BCa on votes; none below 20 units or when a verdict is in under 8 items, with the
reason: `ragframe.stats.alpha`); and the rows where the judges split most (the widest spread of
scores).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.engine.prepare import CUT_FIELD
from ragframe.engine.repeats import merge_stats
from ragframe.engine.result import RunResult
from ragframe.engine.spec import RunSpec
from ragframe.errors import ConfigError
from ragframe.judge.backends import bar_name
from ragframe.metrics.calibration import add_p_human
from ragframe.metrics.thresholds import PASS_SUFFIX
from ragframe.stats.alpha import alpha_interval

Aggregate = Literal["mean", "median"]
#: Between a metric's name and a judge's in a judge's own columns: `faithfulness@gpt-4o-mini`.
JUDGE_SEP = "@"
#: The metric whose items the judges share (its claims column, `Faithfulness.optional`).
SHARED_CLAIMS = "faithfulness"
#: Rows listed where the judges split most.
SPLIT_ROWS = 5
#: The agreement's interval level and seed.
LEVEL, SEED = 0.95, 0


def judge_names(judges: Sequence[Any]) -> list[str]:
    """Each judge's name in column names: its model, `#2`, `#3`... for a repeated model."""
    names: list[str] = []
    for judge in judges:
        base, n = str(judge.model), 2
        name = base
        while name in names:
            name, n = f"{base}#{n}", n + 1
        names.append(name)
    return names


def refuse_lead_and_jury(judge: Any) -> None:
    """A jury's first judge leads it: a `judge=` beside `judges=` is refused, not guessed at."""
    if judge is not None:
        raise ConfigError("pass judge= or judges=, not both (a jury's first judge leads it)")


def check_jury(spec: RunSpec, judge: Any) -> list[Any]:
    """The jury's judges, or a ConfigError before any request for what a jury cannot do."""
    judges = list(spec.judges)
    refuse_lead_and_jury(judge)
    if len(judges) < 2:
        raise ConfigError(f"a jury needs at least 2 judges, got {len(judges)}")
    if spec.repeats != 1:
        raise ConfigError("judges= with repeats= is not supported: run the repeats per judge")
    seen: dict[tuple[Any, ...], int] = {}
    for i, one in enumerate(judges):
        first = seen.setdefault(_seat(one), i)
        if first != i:
            raise ConfigError(
                f"the jury seats the same judge twice ({one.model!r}, judges {first + 1} and "
                f"{i + 1}: same endpoint, seed and temperature), so one judge's verdicts would "
                "count twice; seat different models, endpoints or seeds"
            )
    _aggregate(spec)
    return judges


def _seat(judge: Any) -> tuple[Any, ...]:
    """What makes two judges the same judge: the same requests to the same endpoint."""
    return (
        str(judge.model),
        getattr(judge, "base_url", None),
        getattr(judge, "seed", None),
        getattr(judge, "temperature", None),
    )


async def execute_jury(
    frame: pl.DataFrame,
    extra: dict[str, Any],
    spec: RunSpec,
    judges: list[Any],
    calibrations: list[Any],
    path: str,
    execute: Callable[..., Any],
) -> RunResult:
    """Score `frame` (the rows to score, already sampled; `extra` says how) with every judge
    (module docstring) and combine them into the jury; `execute` runs one judge's run
    (`ragframe.engine.run.execute`, which calls this after checking every judge and loading
    `calibrations`, so that nothing is sent before a refusal)."""
    one = RunSpec.of(
        spec.metrics,
        columns=spec.columns,
        reasons=spec.reasons,
        thresholds=spec.thresholds,
        strict=spec.strict,
    )
    jury_names = judge_names(judges)

    async def seat(scored: pl.DataFrame, i: int) -> RunResult:
        """Judge `i`'s run, its progress bar named after it (the judges' bars show at once)."""
        with bar_name(jury_names[i]):
            return await execute(scored, one, judges[i], path=path)

    lead = await seat(frame, 0)
    names = [m.name for m in lead.metrics]
    shared = SHARED_CLAIMS in names and "claims" not in frame.columns
    others_frame = frame.with_columns(lead_claims(lead.frame)) if shared else frame
    others = await asyncio.gather(*(seat(others_frame, i) for i in range(1, len(judges))))
    results = [lead, *others]
    scored = combine(
        frame, [r.frame for r in results], jury_names, lead.metrics, shared, _aggregate(spec)
    )
    # A calibration maps the jury's score (the column a user reads) to people's probability.
    scored = add_p_human(scored, calibrations)
    extra["jury"] = agreement(scored, names, jury_names, shared)
    seconds = max(r.seconds for r in results)
    stats = merge_stats([r.stats for r in results])
    result = RunResult(scored, lead.metrics, judges[0], stats, seconds, lead.started, extra)
    result.run = {**spec.metadata(path, judges[0]), "jury": jury_names}
    return result


def _aggregate(spec: RunSpec) -> Aggregate:
    if spec.aggregate not in ("mean", "median"):
        raise ConfigError(f"a jury aggregates by mean or median, not {spec.aggregate!r}")
    return "median" if spec.aggregate == "median" else "mean"


def lead_claims(scored: pl.DataFrame) -> pl.Series:
    """The lead judge's extracted claims per row, as the `claims` input of the other judges
    (null where it has none, so those rows fall back to extraction)."""
    detail = pl.col(f"{SHARED_CLAIMS}_detail")
    claims = detail.struct.field("claims").list.eval(pl.element().struct.field("claim"))
    usable = detail.struct.field("error").is_null() & claims.list.len().gt(0)
    return scored.select(pl.when(usable).then(claims).alias("claims")).to_series()


def _own(frame: pl.DataFrame, metric: str, name: str) -> list[pl.Series]:
    """One judge's score and detail of `metric`, renamed `{metric}@{name}`."""
    own = f"{metric}{JUDGE_SEP}{name}"
    return [
        frame.get_column(metric).alias(own),
        frame.get_column(f"{metric}_detail").alias(f"{own}_detail"),
    ]


def combine(
    frame: pl.DataFrame,
    scored: list[pl.DataFrame],
    names: list[str],
    metrics: list[Any],
    shared: bool,
    aggregate: Aggregate,
) -> pl.DataFrame:
    """The input, then per metric the jury's score, detail (and pass), then each judge's.

    `scored` holds each judge's scored frame (same rows, same order); `metrics` need only a
    `name` and, for a pass column, a `pass_rule` (`ragframe.metrics.thresholds.Threshold`)."""
    jury_columns: list[pl.Series] = []
    own_columns: list[pl.Series] = []
    for metric in metrics:
        own = [
            s
            for judged, name in zip(scored, names, strict=True)
            for s in _own(judged, metric.name, name)
        ]
        own_columns += own
        scores = pl.DataFrame(own[0::2])
        voted = VOTED.get(metric.name)
        if voted is not None and (metric.name != SHARED_CLAIMS or shared):
            jury = voted_jury(pl.DataFrame(own[1::2]), scores, names, voted)
        else:
            jury = scores_jury(scores, names, aggregate)
        score = jury.get_column("score").alias(metric.name)
        detail = _with_lead_cut(jury.get_column("detail"), scored[0], metric.name)
        jury_columns += [score, detail.alias(f"{metric.name}_detail")]
        rule = getattr(metric, "pass_rule", None)
        if rule is not None:
            passed = pl.DataFrame([score]).select(rule.passes(pl.col(metric.name)))
            jury_columns.append(passed.to_series().alias(metric.name + PASS_SUFFIX))
    return frame.hstack([*jury_columns, *own_columns])


def _with_lead_cut(detail: pl.Series, lead: pl.DataFrame, metric: str) -> pl.Series:
    """The jury's detail with the lead's `inputs_cut` (every judge read the same inputs, cut
    alike), when the lead's detail has it."""
    dtype = lead.schema.get(f"{metric}_detail")
    if not isinstance(dtype, pl.Struct) or CUT_FIELD not in {f.name for f in dtype.fields}:
        return detail
    cut = lead.get_column(f"{metric}_detail").struct.field(CUT_FIELD)
    return pl.DataFrame([detail.alias("detail"), cut.alias("_cut")]).select(
        pl.col("detail").struct.with_fields(pl.col("_cut").alias(CUT_FIELD))
    )["detail"]


def scores_jury(scores: pl.DataFrame, names: list[str], aggregate: Aggregate) -> pl.DataFrame:
    """The mean (or median) of the judges' scores per row, with each judge's in the detail."""
    row = pl.concat_list(pl.all()).alias("scores")
    valid = row.list.drop_nulls()
    combined = valid.list.median() if aggregate == "median" else valid.list.mean()
    return scores.select(
        pl.when(valid.list.len() > 0).then(combined).cast(pl.Float64).alias("score"),
        pl.struct(
            row.cast(pl.List(pl.Float64)),
            pl.lit(names, dtype=pl.List(pl.String)).alias("judges"),
            pl.lit(aggregate).alias("aggregate"),
            pl.when(valid.list.len() == 0).then(pl.lit("no judge scored the row")).alias("error"),
        ).alias("detail"),
    )


@dataclass(frozen=True)
class Voted:
    """A metric whose per-item verdicts the judges share: the detail's list of items, the
    verdict field voted on, the field that names an item, and the metric's formula over the
    jury's verdicts in item order."""

    items: str
    verdict: str
    name: str
    formula: Literal["share", "average_precision"]


#: The metrics whose items every judge judges alike: faithfulness's claims (extracted once,
#: by the lead), context_precision's contexts (the row's own, in rank order).
VOTED: dict[str, Voted] = {
    "faithfulness": Voted("claims", "supported", "claim", "share"),
    "context_precision": Voted("verdicts", "relevant", "context_index", "average_precision"),
}


def voted_jury(
    details: pl.DataFrame, scores: pl.DataFrame, names: list[str], voted: Voted
) -> pl.DataFrame:
    """A metric by majority over the items its judges share: each item's votes, the jury's
    verdict (true when more than half of the judges with a verdict say so), the metric's own
    formula on those verdicts. A row whose judges did not judge the same items, named alike in
    the same order (a failed lead extraction; runs scored apart), falls back to the mean of
    their scores, and says so in its error."""
    items = [pl.col(c).struct.field(voted.items) for c in details.columns]
    named = [c.list.eval(pl.element().struct.field(voted.name)) for c in items]
    # The same items, named alike and in the same order (a count alone could pair two
    # different claims); an empty list has nothing to vote on.
    aligned = pl.all_horizontal(n.eq(named[0]).fill_null(False) for n in named[1:])
    rows = details.with_row_index("_row").with_columns(
        (aligned & (items[0].list.len() > 0).fill_null(False)).alias("_aligned")
    )
    majority = _majority(rows.filter("_aligned"), items, voted)
    judged = rows.select(
        "_row",
        "_aligned",
        pl.coalesce([pl.col(c).struct.field("error") for c in details.columns]).alias("_error"),
    ).hstack([scores.select(pl.mean_horizontal(pl.all()).alias("_mean")).to_series()])
    out = judged.join(majority, on="_row", how="left").sort("_row")
    score = pl.when(pl.col("_aligned")).then(pl.col("_majority")).otherwise(pl.col("_mean"))
    error = (
        pl.when(pl.col("_aligned").not_() & pl.col("_mean").is_not_null())
        .then(pl.lit(f"the judges judged different {voted.items}: the mean of their scores"))
        .when(score.is_null())
        .then(pl.col("_error").fill_null(f"no verdict on every one of the {voted.items}"))
    )
    return out.select(
        score.alias("score"),
        pl.struct(
            pl.col(voted.items),
            pl.lit(names, dtype=pl.List(pl.String)).alias("judges"),
            error.alias("error"),
        ).alias("detail"),
    )


def _majority(aligned: pl.DataFrame, items: list[pl.Expr], voted: Voted) -> pl.DataFrame:
    """Per row whose judges judged the same items: each item with every judge's vote and the
    jury's verdict, and the metric's formula over the jury's verdicts."""
    votes = [f"_v{i}" for i in range(len(items))]
    verdicts = [
        c.list.eval(pl.element().struct.field(voted.verdict)).alias(v)
        for c, v in zip(items, votes, strict=True)
    ]
    long = (
        aligned.select("_row", items[0].alias("_item"), *verdicts)
        .explode(["_item", *votes])
        .with_columns(pl.concat_list(votes).alias("votes"))
        .with_columns(
            pl.col("votes").list.eval(pl.element().cast(pl.Int32)).list.sum().alias("_yes"),
            pl.col("votes").list.drop_nulls().list.len().alias("_voted"),
        )
        .with_columns(
            pl.when(pl.col("_voted") > 0).then(pl.col("_yes") * 2 > pl.col("_voted")).alias("_jury")
        )
    )
    return long.group_by("_row", maintain_order=True).agg(
        pl.struct(
            pl.col("_item").struct.field(voted.name),
            pl.col("_jury").alias(voted.verdict),
            pl.col("votes"),
            pl.col("_item").struct.field("reason"),
        ).alias(voted.items),
        _formula(voted.formula).alias("_majority"),
    )


def _formula(formula: str) -> pl.Expr:
    """The metric's score over the jury's verdicts (`_jury`, in item order): the share that
    hold, or the average precision of the relevant ones (0.0 with none; null when an item got
    no verdict, as the metric itself gives)."""
    jury = pl.col("_jury")
    if formula == "share":
        return jury.cast(pl.Float64).mean()
    hits = jury.cast(pl.Float64).cum_sum()
    precision = hits / pl.int_range(1, pl.len() + 1).cast(pl.Float64)
    relevant = jury.cast(pl.Float64).sum()
    ap = pl.when(relevant > 0).then((precision * jury.cast(pl.Float64)).sum() / relevant)
    return pl.when(jury.null_count() > 0).then(None).otherwise(ap.otherwise(0.0))


def agreement(
    scored: pl.DataFrame, metrics: list[str], names: list[str], shared: bool
) -> dict[str, Any]:
    """Per metric: Krippendorff's alpha over rows (interval, the judges' scores) and, where
    the judges voted on shared items, over items (nominal, the votes), with n and interval;
    the rows where the judges' scores spread most."""
    figures: dict[str, Any] = {"judges": names, "metrics": {}}
    for metric in metrics:
        own = [f"{metric}{JUDGE_SEP}{name}" for name in names]
        matrix = scored.select(own).to_numpy().astype(np.float64)
        line: dict[str, Any] = {"rows": _alpha(matrix, "interval")}
        voted = VOTED.get(metric)
        if voted is not None and (metric != SHARED_CLAIMS or shared):
            line["items"] = _alpha(_item_votes(scored, metric, voted, len(names)), "nominal")
            line["unit"] = voted.items
        spread = (
            scored.select(
                (pl.max_horizontal(own) - pl.min_horizontal(own)).alias("spread")
            )  # a row no judge scored has a null spread, and is left out
            .with_row_index("row")
            .drop_nulls("spread")
            .sort("spread", "row", descending=[True, False])
            .head(SPLIT_ROWS)
        )
        line["split_rows"] = [
            {"row": int(row), "spread": float(value)} for row, value in spread.iter_rows()
        ]
        figures["metrics"][metric] = line
    return figures


def _item_votes(scored: pl.DataFrame, metric: str, voted: Voted, k: int) -> np.ndarray:
    """Items x judges: every shared item's votes (1, 0, NaN for no verdict)."""
    votes = (
        scored.select(
            pl.col(f"{metric}_detail")
            .struct.field(voted.items)
            .list.eval(pl.element().struct.field("votes"))
        )
        .to_series()
        .explode()
        .drop_nulls()
    )
    if not votes.len():
        return np.empty((0, k))
    return np.array([[np.nan if v is None else float(v) for v in row] for row in votes.to_list()])


def _alpha(matrix: np.ndarray, scale: Literal["interval", "nominal"]) -> dict[str, Any]:
    """Alpha with its interval and n (units with at least two verdicts), or why not."""
    pairable = int((np.sum(~np.isnan(matrix), axis=1) >= 2).sum()) if matrix.size else 0
    if pairable < 2:
        return {
            "alpha": None,
            "ci_low": None,
            "ci_high": None,
            "n": pairable,
            "note": "fewer than 2 units with 2 verdicts",
        }
    try:
        found = alpha_interval(matrix, scale, level=LEVEL, seed=SEED)
    except (ConfigError, ValueError) as err:  # every verdict alike: no disagreement to measure
        return {"alpha": None, "ci_low": None, "ci_high": None, "n": pairable, "note": str(err)}
    return {
        "alpha": None if math.isnan(found.alpha) else found.alpha,
        "ci_low": found.low,
        "ci_high": found.high,
        "n": pairable,
        "note": found.note,  # why the interval is withheld (too few units, a rare verdict)
    }
