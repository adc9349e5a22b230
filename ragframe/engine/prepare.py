"""What every path does before and around the requests: choose and prepare the metrics,
check everything a run can know before the first request, score one frame with a judge
session, and tell which metrics failed on every row. The paths (`run`, `stream`, `arrow`,
`repeats`, the Batch API job) are built on these."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.engine.reuse import Reuse, reuse_enabled
from ragframe.engine.spec import RunSpec, metric_names
from ragframe.errors import ConfigError
from ragframe.inputs.columns import (
    CUT_FLAG,
    ROW_ID,
    canonical_names,
    is_blank,
    load_frame,
    missing_input_reason,
    select_inputs,
)
from ragframe.judge.client import Judge, JudgeSession, RunStats
from ragframe.metrics import (
    Context,
    Metric,
    RagasScore,
    resolve,
    with_reasons,
    with_thresholds,
)
from ragframe.metrics.base import collect_chunk, null_by_design
from ragframe.metrics.thresholds import PASS_SUFFIX
from ragframe.stats import outside_unit


def check_output_names(frame: pl.DataFrame, metrics: list[Metric | RagasScore]) -> None:
    """Refuse to shadow an input column (inputs are never touched), and check that every
    aggregate has the columns it combines."""
    names = {m.name for m in metrics}
    for metric in metrics:
        passed = [metric.name + PASS_SUFFIX] if getattr(metric, "pass_rule", None) else []
        for name in (metric.name, f"{metric.name}_detail", *passed):
            if name in frame.columns:
                raise ConfigError(
                    f"the input already has a column {name!r}; drop or rename it before scoring "
                    f"{metric.name!r} again (e.g. df.drop({name!r}))"
                )
        if isinstance(metric, RagasScore):
            absent = [c for c in metric.of if c not in names and c not in frame.columns]
            if absent:
                raise ConfigError(
                    f"{metric.name!r} combines {list(metric.of)}, but {absent} is neither "
                    "requested nor a column of the input; add it to metrics=[...]"
                )


def check_judge(judge: Judge, metrics: Iterable[Metric | RagasScore]) -> None:
    """Refuse a run that needs what the judge cannot serve (an embedding model, logprobs),
    before it pays for every other request and then fails."""
    from ragframe.judge.capabilities import missing_capabilities

    problems = missing_capabilities(judge, [m for m in metrics if isinstance(m, Metric)])
    if problems:
        raise ConfigError("; ".join(problems) + ". Nothing was sent.")


def check_run(
    frame: pl.DataFrame,
    metrics: list[Metric | RagasScore],
    columns: Mapping[str, str] | None,
    judge: Judge | None = None,
) -> list[Metric]:
    """Every problem a run can know of before any request (or any row read): output names
    that would shadow an input, missing or mistyped inputs, and (given the judge) a metric
    that needs what the judge cannot serve. Returns the metrics that score (aggregates
    aside). `frame` may have no rows: only its columns and types are looked at."""
    check_output_names(frame, metrics)
    scorers = [m for m in metrics if isinstance(m, Metric)]
    optional = {m.name: m.optional for m in scorers if m.optional}
    select_inputs(frame.head(0), {m.name: m.requires for m in scorers}, columns, optional=optional)
    if judge is not None:
        check_judge(judge, scorers)
    return scorers


def needs_judge(metrics: Iterable[Metric | RagasScore]) -> bool:
    """Whether any metric asks an LLM or an embedder (else no endpoint is configured)."""
    return any(isinstance(m, Metric) and (m.uses_llm or m.uses_embeddings) for m in metrics)


#: Exit status of the command line when some metric failed on every row it could score
#: (1 is kept for quality gates, 2 is a configuration or input error, 130 an interruption).
EXIT_METRIC_FAILED = 4


def failed_metrics(
    scored: pl.DataFrame | pl.LazyFrame,
    metrics: Iterable[Metric | RagasScore],
    stats: RunStats,
) -> dict[str, str]:
    """Metrics that failed on every row they could score -> the first row's error.

    A metric failed on every row when at least one row is not null by design (`null_by_design`:
    a missing input, never sent, or an answer with nothing to score, "no factual claims
    found"), none of those rows got a score, and the run had failed requests (`stats.failures`,
    or failures remembered from an earlier run). `RowsFailedWarning` counts rows by the same
    rule. Aggregates are not judged and are left out. `scored` may be a scan of the written
    output (only these columns are read).
    """
    if not sum(stats.failures.values()) and not stats.remembered_failures:
        return {}
    names = [m.name for m in metrics if isinstance(m, Metric)]
    if not names:
        return {}
    exprs = []
    for name in names:
        error = pl.col(f"{name}_detail").struct.field("error")
        judged = ~null_by_design(error)
        exprs += [
            judged.sum().alias(f"{name}:judged"),
            pl.col(name).is_not_null().sum().alias(f"{name}:scored"),
            error.filter(judged & pl.col(name).is_null()).first().alias(f"{name}:error"),
        ]
    row = scored.lazy().select(exprs).collect().row(0, named=True)
    return {
        name: row[f"{name}:error"] or "no score and no reason"
        for name in names
        if row[f"{name}:judged"] and not row[f"{name}:scored"]
    }


def aggregate_exprs(aggregate: RagasScore) -> list[pl.Expr]:
    """The aggregate's score and detail (which inputs were null), computed without requests:
    expressions, added to the scored frame in the plan that finishes it."""
    missing = pl.concat_list(
        [pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in aggregate.of]
    ).list.drop_nulls()
    return [
        aggregate.expression(),
        pl.struct(
            pl.lit(list(aggregate.of), dtype=pl.List(pl.String)).alias("of"),
            pl.when(missing.list.len() > 0)
            .then(pl.lit("null input score: ") + missing.list.join(", "))
            .alias("error"),
        ).alias(f"{aggregate.name}_detail"),
    ]


async def score_frame(
    frame: pl.DataFrame,
    metrics: list[Metric | RagasScore],
    session: JudgeSession,
    columns: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Score one frame with a judge session: the input plus a score and a detail column per
    metric (and `{metric}_pass` for a metric with a threshold).

    A metric whose `reasons` is unset asks for reasons as the judge says (`Judge.reasons`)."""
    scorers = [m for m in with_reasons(metrics, session.judge.reasons) if isinstance(m, Metric)]
    selected = select_inputs(
        frame,
        {m.name: m.requires for m in scorers},
        columns,
        max_chars=session.judge.max_text_chars,
        optional={m.name: m.optional for m in scorers if m.optional},
        flag_cuts=True,
    )
    # Columns moved between frames without a query; what follows the metrics is one plan.
    flags = pl.DataFrame([c for c in selected.get_columns() if c.name.startswith(CUT_FLAG)])
    inputs = pl.DataFrame([c for c in selected.get_columns() if c.name not in flags.columns])
    ctx = Context(session, {})
    # (A frame of no rows, the output's template, has nothing worth keeping.)
    reuse = Reuse(session, inputs) if inputs.height and reuse_enabled(session) else None
    judged = [m for m in scorers if m.uses_llm or m.uses_embeddings]
    kept = await reuse.found(judged) if reuse else {}
    fresh = [m for m in scorers if m.name not in kept]
    ran = await asyncio.gather(*(m.run(inputs, ctx.view()) for m in fresh))
    if reuse is not None:
        await reuse.keep(list(zip(fresh, ran, strict=True)), failed=bool(ctx.failures))
    by_name = {**kept, **{m.name: frame for m, frame in zip(fresh, ran, strict=True)}}
    results = [by_name[m.name] for m in scorers]
    scored = frame.hstack(
        [col for result in results for col in result.get_columns() if col.name != ROW_ID]
    )
    plan = mark_cut(scored, scorers, flags)
    for aggregate in (m for m in metrics if isinstance(m, RagasScore)):
        plan = plan.with_columns(aggregate_exprs(aggregate))
    return collect_chunk(out_of_range(plan, metrics))


#: The detail field (List(String)) naming the metric's inputs that were cut to
#: `Judge.max_text_chars` before judging, empty when none was: the verdicts read only the kept
#: part. (A detail's `truncated` says something else: the judge's list of statements reached
#: its cap.)
CUT_FIELD = "inputs_cut"


def mark_cut(scored: pl.DataFrame, scorers: Iterable[Metric], flags: pl.DataFrame) -> pl.LazyFrame:
    """Each metric's detail with CUT_FIELD: the names of its inputs that `flags`
    (`select_inputs(flag_cuts=True)`'s columns) say were cut in the row (every metric has the
    field, so every chunk has one schema). A plan, collected with what follows it."""
    marked = scored.hstack(flags.get_columns())
    exprs = []
    for metric in scorers:
        cut = [c for c in (*metric.requires, *metric.optional) if CUT_FLAG + c in flags.columns]
        names = (
            pl.concat_list([pl.when(pl.col(CUT_FLAG + c)).then(pl.lit(c)) for c in cut])
            .list.drop_nulls()
            .cast(pl.List(pl.String))
            if cut
            else pl.lit([], dtype=pl.List(pl.String))
        )
        detail = pl.col(f"{metric.name}_detail")
        exprs.append(detail.struct.with_fields(names.alias(CUT_FIELD)))
    return marked.lazy().with_columns(exprs).drop(flags.columns)


def out_of_range(scored: pl.LazyFrame, metrics: Iterable[Metric | RagasScore]) -> pl.LazyFrame:
    """A score outside [0, 1] is a metric's bug, surfaced, not clipped: the score becomes null
    (its pass too) and the detail's error says which value it was, so the run summary, the
    written file, `summarize` and the gates all read the same column on every path (the
    summary counts the row as failed). Rounding past a bound (SCORE_SLACK) is clipped."""
    schema = scored.collect_schema()
    exprs: list[pl.Expr] = []
    for metric in metrics:
        name, detail = metric.name, f"{metric.name}_detail"
        score = pl.col(name)
        bad = outside_unit(score)
        exprs.append(pl.when(bad).then(None).otherwise(score.clip(0.0, 1.0)).alias(name))
        dtype = schema.get(detail)
        if isinstance(dtype, pl.Struct) and "error" in {f.name for f in dtype.fields}:
            why = pl.format(
                "score {} outside [0, 1]: a bug in metric '{}' (its formula or how it reads "
                "the judge's answer); the score is left null",
                score,
                pl.lit(name),
            )
            error = pl.when(bad).then(why).otherwise(pl.col(detail).struct.field("error"))
            exprs.append(pl.col(detail).struct.with_fields(error.alias("error")))
        passed = name + PASS_SUFFIX
        if passed in schema:
            exprs.append(pl.when(bad).then(None).otherwise(pl.col(passed)).alias(passed))
    return scored.with_columns(exprs) if exprs else scored


def work_plan(
    metrics: Iterable[Metric | RagasScore],
    rows: int | pl.DataFrame,
    columns: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """The prompts each task is expected to be asked, for the progress bar's total
    (`JudgeSession.plan`): one per row per task of each metric that asks a judge.

    Given the frame itself (`columns` naming its inputs as for the run), only the rows that
    have the metric's inputs count: a row missing one is never sent, and a total that
    counted it would leave the bar short until the run's end. Given a number of rows (a file
    streamed chunk by chunk), every row counts. Either way an estimate for a stage whose
    count depends on an earlier answer (claims verified in several requests, or none for an
    answer without claims): the bar raises its total when a stage asks more, and a run that
    ends normally closes it at what it asked (`ragframe.judge.backends.Progress`)."""
    scorers = [m for m in metrics if isinstance(m, Metric) and m.uses_llm]
    if isinstance(rows, pl.DataFrame):
        counts = _rows_with_inputs(rows, scorers, columns)
    else:
        counts = [rows] * len(scorers)
    plan: dict[str, int] = {}
    for metric, count in zip(scorers, counts, strict=True):
        for task in metric.tasks():
            plan[task.name] = plan.get(task.name, 0) + count
    return plan


def _rows_with_inputs(
    frame: pl.DataFrame, metrics: list[Metric], columns: Mapping[str, str] | None
) -> list[int]:
    """For each metric, the rows of `frame` it sends to the judge: those with every input
    it requires (`missing_input_reason`, as `Metric.run` decides)."""
    if not metrics:
        return []
    inputs = select_inputs(frame, {m.name: m.requires for m in metrics}, columns)
    present = (missing_input_reason(m.requires).is_null().sum() for m in metrics)
    return [int(n) for n in inputs.select(n.alias(str(i)) for i, n in enumerate(present)).row(0)]


def _has_value(name: str, dtype: pl.DataType) -> pl.Expr:
    """Whether some row has a value in column `name`, as the rows are judged
    (`missing_input_reason`): a text that is not blank, a list with a non-blank item."""
    col = pl.col(name)
    if isinstance(dtype, pl.Array):
        dtype, col = pl.List(dtype.inner), col.cast(pl.List(dtype.inner))
    if isinstance(dtype, pl.List):
        inner = dtype.inner
        if inner == pl.Null:
            return pl.lit(False)
        item = pl.element().cast(pl.String) if inner == pl.String else pl.element()
        filled = ~is_blank(item) if inner == pl.String else item.is_not_null()
        value = col.list.eval(filled).list.any()
    elif dtype == pl.Null:
        return pl.lit(False)
    elif dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        value = ~is_blank(col.cast(pl.String))
    else:
        value = col.is_not_null()
    return value.fill_null(False).any()


def _all_null_in_statistics(path: Path, names: Iterable[str]) -> set[str]:
    """The flat columns whose Parquet statistics say every value is null (as older ragframe
    imports wrote ground_truth): known without reading a page."""
    from ragframe.inputs.io import open_parquet

    meta = open_parquet(path).metadata
    nulls: set[str] = set()
    for name in names:
        found = True
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            chunk = next(
                (group.column(i) for i in range(group.num_columns)
                 if group.column(i).path_in_schema == name),
                None,
            )  # fmt: skip
            stats = None if chunk is None else chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count != group.num_rows:
                found = False
                break
        if found:
            nulls.add(name)
    return nulls


#: Rows of the needed columns read at a time to find which inputs a log has values for.
PRESENCE_BATCH_ROWS = 10_000
#: Rows read first: a log that has values has them there, and reading no more is cheap.
PRESENCE_FIRST_ROWS = 256


def inputs_with_values(
    rows: Any, needed: Iterable[str], columns: Mapping[str, str] | None = None
) -> set[str]:
    """The inputs of `needed` (canonical names) that at least one row of `rows` has a value
    for: a column in the schema is not enough (a trace export's all-null ground_truth).

    `rows`: a Polars frame or LazyFrame, a log's path or its opened `InputFile`. A log is
    read in batches of the needed columns alone (never whole), stopping as soon as every
    input has been seen with a value, which for a log that has them is its first batch;
    Parquet statistics answer first, without a page read, for a column of nulls only. A log
    without rows has every input it has a column for: there is nothing to refuse, since
    scoring it sends nothing."""
    from ragframe.inputs.columns import list_columns
    from ragframe.inputs.io import InputFile, ParquetInput, open_input

    source = rows if isinstance(rows, InputFile) else None
    if isinstance(rows, str | Path):
        source = open_input(rows, list_columns=list_columns(columns))
    schema = rows.lazy().collect_schema() if source is None else source.schema_frame().schema
    mapping = canonical_names(list(schema), columns, needed=needed)
    wanted = {c: mapping[c] for c in needed if c in mapping}
    # A log without rows: nothing to measure and nothing to send; its columns say it all.
    height = rows.height if isinstance(rows, pl.DataFrame) else getattr(source, "rows", None)
    if height == 0:
        return set(wanted)
    columned = set(wanted)
    # A column typed Null (JSON's all-null field) has no value; nor, in a Parquet file, one
    # whose statistics count only nulls: known without reading a row.
    nulls = {name for name in wanted.values() if schema[name] == pl.Null}
    if isinstance(source, ParquetInput):
        nulls |= _all_null_in_statistics(source.path, wanted.values())
    wanted = {c: name for c, name in wanted.items() if name not in nulls}
    if not wanted:
        return set()
    exprs = [_has_value(name, schema[name]).alias(c) for c, name in wanted.items()]
    if isinstance(rows, pl.DataFrame):
        batches: Iterable[pl.DataFrame] = [rows]
    elif source is None:
        batches = [rows.lazy().select(wanted.values()).collect(engine="streaming")]
    else:
        batches = _batches(source, sorted(set(wanted.values())))
    found: set[str] = set()
    seen = 0
    for batch in batches:
        seen += batch.height
        found |= {c for c, value in batch.select(exprs).row(0, named=True).items() if value}
        if len(found) == len(wanted):
            break
    return found if seen else columned


def _batches(source: Any, names: list[str]) -> Iterator[pl.DataFrame]:
    """A log's `names` columns, PRESENCE_BATCH_ROWS rows at a time, in bounded memory (each
    reader reads only those columns where its format allows; CSV's lists decoded). A Parquet
    log's first PRESENCE_FIRST_ROWS rows come first on their own: they settle it for a log
    that has its inputs (a warm rerun of 5,000 rows read them all here: 30 ms of 0.6 s)."""
    from ragframe.inputs.io import ParquetInput

    first = min(PRESENCE_FIRST_ROWS, PRESENCE_BATCH_ROWS)
    if not isinstance(source, ParquetInput) or first == PRESENCE_BATCH_ROWS:
        yield from source.column_chunks(names, PRESENCE_BATCH_ROWS)
        return
    head = next(iter(source.column_chunks(names, first)), None)
    if head is None:
        return
    yield head
    rest = iter(source.column_chunks(names, PRESENCE_BATCH_ROWS))
    again = next(rest, None)  # starts with the rows just read
    if again is not None and again.height > first:
        yield again.slice(first)
    yield from rest


def refuse_empty_inputs(
    metrics: Iterable[Metric | RagasScore],
    have: Iterable[str],
    where: str,
    columns: Mapping[str, str] | None = None,
    present: Iterable[str] | None = None,
) -> None:
    """A ConfigError naming each metric asked for by name whose required input no row of
    `where` has a value for, the input (and its column), and what to do: every row would
    fail with "missing input", so nothing is sent. With `present` (the log's columns), an
    input with no column at all is left to `select_inputs`, whose refusal says how to map
    one; without (rows converted from an export, whose columns the user never named), an
    absent input is refused here too."""
    from ragframe.metrics.catalog import alternatives

    have = set(have)
    mapping = {} if present is None else canonical_names(list(present), columns, needed=())
    # Metrics lacking the same inputs are named together: one clause per set of inputs.
    lacking: dict[tuple[str, ...], list[str]] = {}
    for metric in metrics:
        if isinstance(metric, Metric):
            empty = tuple(
                c for c in metric.requires if c not in have and (present is None or c in mapping)
            )
            if empty:
                lacking.setdefault(empty, []).append(metric.name)
    problems = []
    for empty, names in lacking.items():
        inputs = ", ".join(
            c if mapping.get(c, c) == c else f"{c} (column {mapping[c]!r})" for c in empty
        )
        one = len(names) == 1
        swaps = {n: alternatives(n, have) for n in names}
        use = [
            " or ".join(alts) + ("" if one else f" for {n}") for n, alts in swaps.items() if alts
        ]
        fix = f"drop {'it' if one else 'them'}" + (f" or use {', '.join(use)}" if use else "")
        if not all(swaps.values()):
            fix += f"{',' if use else ''} or add {', '.join(empty)} to the rows"
        problems.append(
            f"{', '.join(names)} need{'s' if one else ''} {inputs}, which no row of {where} "
            f"has; {fix}"
        )
    if problems:
        raise ConfigError("; ".join(problems) + ". Nothing was sent.")


def choose_metrics(
    metrics: Iterable[str | Metric | RagasScore] | str,
    present: Iterable[str],
    columns: Mapping[str, str] | None,
    extra: dict[str, Any] | None = None,
    have: Iterable[str] | None = None,
) -> list[Metric | RagasScore]:
    """The metrics asked for; `"all"`: every metric whose inputs the frame has (`present`, its
    columns; `have`, when measured, the inputs some row has a value for, else those the
    `MeasuredAll` carries), the others recorded in `extra["skipped_metrics"]` with why."""
    from ragframe.metrics.catalog import all_metrics, is_all

    if not is_all(metrics):
        return resolve(metric_names(metrics))  # type: ignore[arg-type]
    measured = getattr(metrics, "have", None)
    filled = measured if measured is not None else have
    chosen, skipped = all_metrics(present, columns, filled)
    if extra is not None:
        extra["skipped_metrics"] = skipped
    if not chosen:
        values = "" if filled is None else f"; inputs with a value in some row: {sorted(filled)}"
        raise ConfigError(
            f"metrics='all', but no metric has every input it needs (columns: {list(present)}"
            f"{values}); `ragframe metrics` lists what each metric needs"
        )
    return list(chosen)


def prepare_metrics(
    metrics: Iterable[str | Metric | RagasScore],
    judge: Judge,
    reasons: bool | None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
) -> list[Metric | RagasScore]:
    """The run's metric instances, each asking for reasons or not (the metric's own setting,
    else the run's `reasons=`, else the judge's `Judge.reasons`), with the run's thresholds
    and strict modes (by metric name) set."""
    chosen = with_reasons(resolve(metrics), judge.reasons if reasons is None else reasons)
    return with_thresholds(chosen, thresholds, strict)


@dataclass
class Prepared:
    """A run checked and ready to send: its metrics, its judge, and what it records."""

    metrics: list[Metric | RagasScore]
    judge: Judge
    #: Whether any metric asks an LLM or an embedder (else no endpoint is opened).
    uses_judge: bool
    extra: dict[str, Any]
    started: str

    def session(self, backend: str = "live") -> tuple[JudgeSession, Any]:
        """A judge session and the context that opens it (nothing opened when no metric
        needs the judge: string- and ID-based metrics only start no endpoint or model)."""
        session = self.judge.session(backend)  # type: ignore[arg-type]
        return session, (session if self.uses_judge else contextlib.nullcontext())


def prepare_run(
    head: pl.DataFrame,
    spec: RunSpec,
    judge: Judge | None,
    extra: dict[str, Any] | None = None,
    *,
    rows: Any = None,
) -> Prepared:
    """Every path's preparation, the same for all: the metrics chosen (for "all": those
    whose inputs some row has a value for, the skipped ones in `extra`), the judge (default:
    `Judge()` with a cache only when a metric needs one), thresholds and reasons set, and every
    check a run can make before a row is read or a request sent.

    For "all", which inputs the rows have is measured on `rows` (a frame, a log's path or
    `InputFile`) when given, else on `head` when it has rows; a `head` without rows and no
    `rows` (a file's schema) is judged by its columns alone, unless `spec.metrics` is a
    `MeasuredAll` (the command line measured the log). Named metrics are not measured here: a
    row without an input is null with "missing input", as row by row it would be (the command
    line refuses a metric no row of its log can score: `refuse_empty_inputs`)."""
    extra = {} if extra is None else extra
    have = _measured(head, spec, rows)
    resolved = choose_metrics(spec.metrics, head.columns, spec.columns, extra, have)
    uses_judge = needs_judge(resolved)
    judge = judge if judge is not None else Judge(cache=uses_judge)
    metric_list = prepare_metrics(resolved, judge, spec.reasons, spec.thresholds, spec.strict)
    check_run(head.head(0), metric_list, spec.columns, judge)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Prepared(metric_list, judge, uses_judge, extra, started)


def needed_inputs(metrics: Any) -> set[str]:
    """The inputs the metrics require ("all": those of every metric in the catalogue), and
    those of the metrics of their family (`alternatives`)."""
    from ragframe.metrics import REGISTRY
    from ragframe.metrics.catalog import is_all

    if is_all(metrics):
        return {c for cls in REGISTRY.values() for c in cls.requires}
    named = resolve(metric_names(metrics))  # type: ignore[arg-type]
    chosen = [m for m in named if isinstance(m, Metric)]
    # The family's too (context_precision_without_reference), to offer it in a refusal.
    family = [cls for n, cls in REGISTRY.items() if any(n.startswith(m.name) for m in chosen)]
    return {c for m in (*chosen, *family) for c in m.requires}


def _measured(head: pl.DataFrame, spec: RunSpec, rows: Any) -> set[str] | None:
    """For "all", the inputs some row has a value for (see `prepare_run`); else None."""
    from ragframe.metrics.catalog import is_all

    carried = getattr(spec.metrics, "have", None)
    if carried is not None:
        return set(carried)
    if not is_all(spec.metrics) or (rows is None and head.height == 0):
        return None
    return inputs_with_values(
        head if rows is None else rows, needed_inputs(spec.metrics), spec.columns
    )


def sampled_frame(
    data: Any, sample: int | None, seed: int, columns: Mapping[str, str] | None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The frame to score: all of `data`, or a uniform random sample of `sample` rows of it
    (with `row_index`, each row's position in the log) and what the sample was."""
    if sample is None:
        return load_frame(data, columns), {}
    from ragframe.inputs.sample import draw_sample

    drawn = draw_sample(data, sample, seed=seed, columns=columns)
    return load_frame(drawn.frame, columns), {"sample": drawn.describe()}
