"""A jury of runs scored apart: each judge's own scored file (a Batch API job, a Ray run, a
run of another day, each with its own limits, cache and cost) combined as the judges of one
run are (`ragframe.engine.jury`).

    ragframe batch run in.parquet -o a.parquet --manifest a.json --model a
    ragframe jury claims a.parquet -o shared.parquet     # the lead's claims, for the others
    ragframe batch run shared.parquet -o b.parquet --manifest b.json --model b
    ragframe batch run shared.parquet -o c.parquet --manifest c.json --model c
    ragframe jury combine a.parquet b.parquet c.parquet -o jury.parquet

The runs must hold the same rows in the same order: their common input columns are compared
(a `claims` column aside) and the first row that differs is named. The jury is the same as
one run's: per metric with shared items (`VOTED`), each item's majority where every judge
judged the same items, named alike and in the same order (faithfulness's claims: give the
other judges the lead's claims, as above, or every row falls back to the mean of the
judges' scores, and says so); the mean (or median) of the scores for the rest. Requests,
tokens and cost are the runs' own, added up from what each file records.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl

from ragframe._version import __version__
from ragframe.decide.summarize import checked_scores, direction_of, pass_rules, score_columns
from ragframe.engine.jury import (
    JUDGE_SEP,
    SHARED_CLAIMS,
    Aggregate,
    agreement,
    combine,
    judge_names,
    lead_claims,
)
from ragframe.engine.summary import metric_summary
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import read_metadata
from ragframe.metrics.thresholds import PASS_SUFFIX, Threshold

#: Columns a run adds per metric besides its score.
_OUTPUT_SUFFIXES = ("_detail", PASS_SUFFIX, "_p_human")
#: A run's totals that add up across the jury's runs.
_TOTALS = (
    "requests",
    "answered",
    "cache_hits",
    "deduplicated",
    "embedding_requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
)


@dataclass(frozen=True)
class _Scored:
    """What `combine` needs of a metric: its name, direction and pass rule."""

    name: str
    direction: str
    pass_rule: Threshold | None


@dataclass
class _Run:
    """One judge's scored run: its frame, what its file records, and where it came from."""

    frame: pl.DataFrame
    meta: dict[str, Any]
    source: str

    @classmethod
    def read(cls, run: Any, index: int) -> _Run:
        """One run, its scores checked to lie in [0, 1] (a 7.5 is refused, never voted)."""
        if isinstance(run, pl.DataFrame):
            frame, meta, source = run, {}, f"frame {index + 1}"
        else:
            path = Path(run)
            if not path.exists():
                raise InputError(f"no scored file {str(path)!r}")
            frame, meta, source = pl.read_parquet(path), read_metadata(path), str(path)
        checked_scores(frame.lazy(), [], scored_metrics(frame), source)  # the flags alone
        return cls(frame, meta, source)


@dataclass
class JuryOfRuns:
    """The jury's frame (as one run's jury writes it), its summary and its file's metadata."""

    frame: pl.DataFrame
    summary: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)

    def write_parquet(self, path: str | Path, *, overwrite: bool = False) -> None:
        from ragframe.inputs.io import write_parquet

        write_parquet(self.frame, path, self.metadata, overwrite=overwrite)


def scored_metrics(frame: pl.DataFrame) -> list[str]:
    """The metrics a scored frame holds (`summarize`'s detection), each with its struct
    `{metric}_detail`, a jury's own per-judge columns left out."""
    schema = frame.schema
    return [
        c
        for c in score_columns(schema, {})
        if JUDGE_SEP not in c and isinstance(schema.get(f"{c}_detail"), pl.Struct)
    ]


def input_columns(frame: pl.DataFrame) -> list[str]:
    """The columns a run was given (everything that is not a metric's output)."""
    made = {f"{m}{suffix}" for m in scored_metrics(frame) for suffix in ("", *_OUTPUT_SUFFIXES)}
    return [c for c in frame.columns if c not in made]


def claims_for_others(lead: Any) -> pl.DataFrame:
    """The lead run's inputs with its extracted claims as a `claims` column: the input of the
    other judges, so that they verify the lead's claims and the jury votes on each."""
    run = _Run.read(lead, 0)
    if SHARED_CLAIMS not in scored_metrics(run.frame):
        raise InputError(
            f"{run.source} holds no {SHARED_CLAIMS} scores: the lead's claims come from its "
            f"{SHARED_CLAIMS} detail (score the lead with --metrics {SHARED_CLAIMS},...)"
        )
    inputs = run.frame.select(input_columns(run.frame))
    if "claims" in inputs.columns:  # the lead itself verified given claims: pass them on
        return inputs
    return inputs.with_columns(lead_claims(run.frame))


def combine_runs(
    runs: Sequence[Any],
    *,
    names: Sequence[str] | None = None,
    aggregate: Aggregate = "mean",
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] | None = None,
) -> JuryOfRuns:
    """The jury of `runs` (scored frames or files, one per judge, the lead first): per metric
    scored by every run, the jury's score and detail and each judge's (`{metric}@{judge}`),
    the judges' agreement, and the runs' requests and cost added up.

    Judges are named by `names`, else by the model each file records (`#2` for a model
    named twice), else `judge1`, `judge2`... A pass rule comes from `thresholds` / `strict`,
    else from what the lead's file records; a metric with neither has no pass column."""
    read = [_Run.read(run, i) for i, run in enumerate(runs)]
    if len(read) < 2:
        raise ConfigError(f"a jury needs at least 2 runs, got {len(read)}")
    jury_names = _names(read, names)
    metrics, skipped = _shared_metrics(read, jury_names)
    inputs = _check_rows(read)
    lead = read[0]
    rules = pass_rules(metrics, lead.frame.schema, lead.meta, thresholds=thresholds, strict=strict)
    scorers = [
        _Scored(m, direction_of(m, lead.meta), getattr(rules.get(m), "threshold", None))
        for m in metrics
    ]
    frames = [run.frame for run in read]
    scored = combine(lead.frame.select(inputs), frames, jury_names, scorers, True, aggregate)
    summary = _summary(scored, scorers, read, skipped)
    summary["jury"] = agreement(scored, metrics, jury_names, True)
    metadata = {
        "ragframe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "judge": lead.meta.get("judge") or {"model": jury_names[0]},
        "metrics": {m: (lead.meta.get("metrics") or {}).get(m) or {} for m in metrics},
        "summary": summary,
        "run": {
            "jury": jury_names,
            "aggregate": aggregate,
            "sources": [run.source for run in read],
            "judges": [(run.meta.get("judge") or {}).get("model") for run in read],
        },
    }
    return JuryOfRuns(scored, summary, metadata)


def _names(read: list[_Run], names: Sequence[str] | None) -> list[str]:
    if names is not None:
        chosen = [str(n) for n in names]
        if len(chosen) != len(read) or len(set(chosen)) != len(chosen) or not all(chosen):
            raise ConfigError(
                f"names must be {len(read)} distinct non-empty names, one per run; got {chosen}"
            )
        return chosen
    models = [
        (run.meta.get("judge") or {}).get("model") or f"judge{i + 1}" for i, run in enumerate(read)
    ]
    return judge_names([SimpleNamespace(model=m) for m in models])


def _shared_metrics(read: list[_Run], names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The metrics every run scored, in the lead's order; the others, with who lacks them."""
    for run in read:
        if any(JUDGE_SEP in c and c.endswith("_detail") for c in run.frame.columns):
            raise InputError(
                f"{run.source} is a jury's output already (it has {JUDGE_SEP}judge columns): "
                "combine the judges' own runs"
            )
    held = [scored_metrics(run.frame) for run in read]
    every = [m for m in held[0] if all(m in h for h in held[1:])]
    skipped = {
        m: "not scored by " + ", ".join(n for n, h in zip(names, held, strict=True) if m not in h)
        for m in dict.fromkeys(m for h in held for m in h)
        if m not in every
    }
    if not every:
        raise InputError(
            "the runs share no scored metric: "
            + "; ".join(f"{run.source}: {h or 'none'}" for run, h in zip(read, held, strict=True))
        )
    return every, skipped


def _check_rows(read: list[_Run]) -> list[str]:
    """The lead's input columns, once every run is known to hold the same rows in order."""
    lead = read[0]
    inputs = input_columns(lead.frame)
    for run in read[1:]:
        if run.frame.height != lead.frame.height:
            raise InputError(
                f"{run.source} has {run.frame.height} rows, {lead.source} {lead.frame.height}: "
                "a jury combines the same rows, in the same order"
            )
        common = [c for c in inputs if c in run.frame.columns and c != "claims"]
        for column in common:
            differs = (
                pl.DataFrame(
                    [lead.frame.get_column(column), run.frame.get_column(column).alias("\0other")]
                )
                .with_row_index("row")
                .filter(pl.col(column).ne_missing(pl.col("\0other")))
            )
            if differs.height:
                raise InputError(
                    f"{run.source} and {lead.source} differ in column {column!r} at row "
                    f"{differs.item(0, 'row')} ({differs.height} rows differ): a jury combines "
                    "the same rows, in the same order"
                )
    return inputs


def _summary(
    scored: pl.DataFrame, scorers: list[_Scored], read: list[_Run], skipped: dict[str, str]
) -> dict[str, Any]:
    """The jury's summary, with the runs' totals added up, Batch API lines counted as
    requests (a run whose file records no summary counts nothing, and the summary says how
    many did not)."""
    recorded = [run.meta.get("summary") for run in read]
    known = [s for s in recorded if isinstance(s, Mapping)]
    totals: dict[str, Any] = {k: sum(int(s.get(k) or 0) for s in known) for k in _TOTALS}
    # A Batch API run records its lines apart from its live requests: both were paid for.
    for s in known:
        batch = s.get("batch") or {}
        totals["requests"] += int(batch.get("requests_submitted") or 0)
        for k in ("prompt_tokens", "completion_tokens", "cached_prompt_tokens"):
            totals[k] += int(batch.get(k) or 0)
    costs = [_paid(s, "cost_usd") for s in known]
    savings = [_paid(s, "cached_saving_usd") for s in known]
    unrecorded = len(read) - len(known)
    return {
        "rows": scored.height,
        "seconds": round(sum(float(s.get("seconds") or 0.0) for s in known), 3),
        "metrics": {
            m.name: metric_summary(scored.get_column(m.name), m.direction, rule=m.pass_rule)
            for m in scorers
        },
        **totals,
        "cost_usd": _added(costs, unrecorded),
        "cached_saving_usd": _added(savings, unrecorded),
        **({"skipped_metrics": skipped} if skipped else {}),
        **({"runs_without_totals": unrecorded} if unrecorded else {}),
    }


def _paid(summary: Mapping[str, Any], key: str) -> float | None:
    """A run's dollars under `key` (`cost_usd`, `cached_saving_usd`): its live requests' and
    its Batch API lines' (the `batch` section's own figure), None when a part that sent
    tokens has none recorded (no price known, or written before batch costs were)."""
    parts = [summary]
    batch = summary.get("batch")
    if isinstance(batch, Mapping) and int(batch.get("prompt_tokens") or 0) > 0:
        parts.append(batch)
    dollars = 0.0
    for part in parts:
        value = part.get(key)
        if value is None:
            if key == "cached_saving_usd" and not int(part.get("cached_prompt_tokens") or 0):
                continue  # nothing cached: nothing saved, whatever the price
            return None
        dollars += float(value)
    return dollars


def _added(dollars: list[float | None], unrecorded: int) -> float | None:
    """The runs' dollars added up; None when any is unknown or a run recorded no summary."""
    if not dollars or None in dollars or unrecorded:
        return None
    return round(sum(d for d in dollars if d is not None), 6)
