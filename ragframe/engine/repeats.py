"""Repeatability: score the same rows k times with distinct sampling seeds, and say how much a
score moves between runs ("how many runs must I average?", with a number for this judge).

Repeat r (0..k-1) asks a copy of the judge whose `seed` is the judge's seed + r (0 + r when the
judge sends none). The seed is part of every request and of its cache key, so repeats are
distinct requests with their own answers, repeat 0 is exactly a normal run (and shares its
cached answers), and running the same repeats again is free. Repeats run one after another,
each with the judge's whole pool.

Temperature: the judge's own, unchanged (`temperature=` overrides it for the repeats). The
repeats measure the noise of the configuration that is scored, which is what averaging would
remove. At temperature 0 they differ only where the server's output depends on the seed or is
nondeterministic (batching on hosted APIs); a deterministic server gives identical repeats,
row_sd 0, and that is the true answer for that setting: one run is enough. The summary says
so (`warning`); pass `Judge(temperature=0.7)` to measure sampling noise instead.

Columns, per metric (aggregates such as ragas_score included, computed per repeat):

- `{metric}`: the mean of the row's k scores (repeats that failed left out; null if all did);
- `{metric}_repeats`: List(Float64), the k scores in repeat order (null where one failed);
- `{metric}_detail`: the verdicts of the first repeat that scored (repeat 0 on every row where
  it scored), so a score is never shown beside an error; its tokens are that repeat's;
- `{metric}_pass`, with a threshold: the pass rule applied to the mean.

Figures, per metric, on the rows scored by every repeat (`n`; `incomplete` counts the others):

- `row_sd`: the mean over rows of the per-row standard deviation of the k scores (ddof 1);
- `mean_sd`: how far the run's mean score moves between runs from this noise alone,
  sqrt(mean per-row variance / n);
- `retest`: test-retest reliability, ICC(1,1) (one-way random effects, single run; Shrout &
  Fleiss 1979): the share of a single run's score variance that is real difference between
  rows. One-way, because repeats are exchangeable draws (no repeat has an effect of its own to
  model, as ICC(2,1) or ICC(3,1) would for raters); any systematic shift between repeats counts
  as noise, where a mean pairwise Pearson correlation would ignore it. It rests on the spread
  of the rows too: rows that all deserve the same score give a low retest even with little
  noise (read row_sd beside it). `ci_low` / `ci_high`: the expanded percentile bootstrap over
  rows, the one every ragframe bootstrap uses (`ragframe.stats.expanded_tail`: percentiles at
  a level widened by sqrt(n / (n - 1)) * t(n - 1) / z; RESAMPLES resamples, seeded, of the rows
  in sorted order, so the row order cannot change it; n >= 3);
- `runs_needed`: how many runs to average for a reliability of RELIABILITY_TARGET (0.9), by
  Spearman-Brown, m * r / (1 + (m - 1) r): 1 when one run already reaches it, None when
  retest <= 0 (averaging cannot make such a metric tell rows apart).
"""

from __future__ import annotations

import copy
import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl

from ragframe.engine.spec import check_repeats
from ragframe.errors import BudgetExceeded, ConfigError
from ragframe.judge.client import Judge, RunStats
from ragframe.judge.config import SEED_MAX
from ragframe.metrics.thresholds import PASS_SUFFIX, Threshold
from ragframe.stats import RESAMPLES, expanded_tail

REPEATS_SUFFIX = "_repeats"
#: The reliability `runs_needed` aims at.
RELIABILITY_TARGET = 0.9
#: Index-matrix elements drawn at once in the bootstrap (bounds its memory).
_BLOCK_ELEMENTS = 1 << 22


def check_repeat_seeds(judge: Judge, k: int) -> int:
    """The first repeat's seed (the judge's, 0 when it sends none), or a ConfigError when the
    last, seed + k - 1, would pass SEED_MAX. Cheap: callers may check before reading rows."""
    base = judge.seed if judge.seed is not None else 0
    if base + k - 1 > SEED_MAX:
        raise ConfigError(
            f"the judge's seed {base} with {k} repeats would send seeds up to {base + k - 1}, "
            f"past the largest seed 2**63 - 1 (a signed 64-bit integer); use Judge(seed=...) "
            f"at most {SEED_MAX - k + 1}, or fewer repeats"
        )
    return base


def repeat_judges(judge: Judge, k: int, *, temperature: float | None = None) -> list[Judge]:
    """k copies of `judge`, copy r with seed = the judge's seed + r (0 + r when it has none),
    at `temperature` when given (else the judge's). k == 1 (and no temperature): the judge
    itself, so a single repeat is exactly a normal run. Seeds past SEED_MAX are refused
    before any copy is made: a server would reject (or wrap) them request by request."""
    if check_repeats(k) == 1 and temperature is None:
        return [judge]
    base = check_repeat_seeds(judge, k)
    _ = judge.cache  # opened once, before copying: every copy shares it (one writer thread)
    judges = []
    for r in range(k):
        copied = copy.copy(judge)
        copied.seed = base + r
        if temperature is not None:
            copied.temperature = temperature
        judges.append(copied)
    return judges


def repeat_columns(names: Iterable[str]) -> list[str]:
    """The columns repeats add (besides each metric's usual ones), to refuse input columns
    they would shadow."""
    return [name + REPEATS_SUFFIX for name in names]


def combine_repeats(
    runs: Sequence[pl.DataFrame],
    names: Sequence[str],
    rules: Mapping[str, Threshold | None] | None = None,
) -> pl.DataFrame:
    """One frame from k scored frames of the same rows (module docstring: the columns).

    `runs[0]` gives the input columns and the column order; each metric's `_repeats` column
    follows its score. `rules`: metric name -> pass rule, for `{metric}_pass` on the mean.
    """
    if not runs:
        raise ConfigError("combine_repeats needs at least one scored frame")
    rules = rules or {}
    combined: dict[str, pl.Expr] = {}
    for name in names:
        scores = [run.get_column(name).cast(pl.Float64).fill_nan(None) for run in runs]
        repeats = pl.concat_list([pl.lit(s) for s in scores]).alias(name + REPEATS_SUFFIX)
        detail = f"{name}_detail"
        chosen = [
            pl.when(pl.lit(s).is_not_null()).then(pl.lit(run.get_column(detail)))
            for s, run in zip(scores, runs, strict=True)
        ]
        combined[name] = repeats.list.mean().alias(name)
        combined[name + REPEATS_SUFFIX] = repeats
        combined[detail] = pl.coalesce([*chosen, pl.lit(runs[0].get_column(detail))]).alias(detail)
        rule = rules.get(name)
        if rule is not None:
            combined[name + PASS_SUFFIX] = rule.passes(repeats.list.mean()).alias(
                name + PASS_SUFFIX
            )
    columns: list[pl.Expr] = []
    for column in runs[0].columns:
        columns.append(combined.pop(column, pl.col(column)))
        if column in names:
            columns.append(combined.pop(column + REPEATS_SUFFIX))
    return runs[0].select(*columns, *combined.values())


@dataclass(frozen=True)
class Retest:
    """One metric's repeatability figures (module docstring)."""

    n: int
    incomplete: int
    row_sd: float | None
    mean_sd: float | None
    retest: float | None
    ci_low: float | None
    ci_high: float | None
    runs_needed: int | None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def icc1(matrix: np.ndarray) -> float | None:
    """ICC(1,1) of an n x k matrix (rows x repeats, no missing values); None when undefined
    (fewer than 2 rows or 2 repeats, or no variance at all)."""
    n, k = matrix.shape
    if n < 2 or k < 2:
        return None
    value = _icc1(matrix.mean(axis=1)[None, :], _within_ss(matrix)[None, :], k)[0]
    return None if math.isnan(value) else float(value)


def _within_ss(matrix: np.ndarray) -> np.ndarray:
    """Each row's sum of squared deviations from its own mean; exactly 0 for a row whose
    repeats agree (its float mean need not equal them: 0.4 three times averages 0.4 + 1e-16)."""
    squares = ((matrix - matrix.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return np.where(matrix.max(axis=1) == matrix.min(axis=1), 0.0, squares)


def _icc1(means: np.ndarray, within: np.ndarray, k: int) -> np.ndarray:
    """ICC(1,1) for each row of `means` / `within` (resamples x rows): row means and
    within-row sums of squares, from the one-way ANOVA mean squares."""
    n = means.shape[1]
    msb = k * means.var(axis=1, ddof=1)
    msw = within.sum(axis=1) / (n * (k - 1))
    denominator = msb + (k - 1) * msw
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (msb - msw) / denominator, np.nan)


def bootstrap_icc1(
    matrix: np.ndarray, rng: np.random.Generator, *, level: float = 0.95
) -> tuple[float, float] | None:
    """The expanded percentile bootstrap interval of ICC(1,1) (module docstring), resampling
    rows (RESAMPLES index rows drawn at once, in blocks); None below 3 rows. The rows are
    sorted first: the interval depends on the set of rows, not their order."""
    n, k = matrix.shape
    if n < 3 or k < 2:
        return None
    matrix = matrix[np.lexsort(matrix.T[::-1])]
    means, within = matrix.mean(axis=1), _within_ss(matrix)
    draws = np.empty(RESAMPLES)
    per_block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, RESAMPLES, per_block):
        stop = min(RESAMPLES, start + per_block)
        index = rng.integers(0, n, size=(stop - start, n))
        draws[start:stop] = _icc1(means[index], within[index], k)
    if np.isnan(draws).all():
        return None
    tail = expanded_tail(n, level)
    low, high = np.nanquantile(draws, [tail, 1 - tail])
    return float(low), float(high)


def runs_needed(retest: float | None, target: float = RELIABILITY_TARGET) -> int | None:
    """The fewest runs whose average reaches reliability `target` (Spearman-Brown)."""
    if retest is None or retest <= 0:
        return None
    if retest >= target:
        return 1
    return math.ceil(target * (1 - retest) / (retest * (1 - target)) - 1e-9)


def retest_figures(repeats: pl.Series, *, seed: int = 0, level: float = 0.95) -> Retest:
    """The figures of one metric from its `{metric}_repeats` column (List(Float64))."""
    k = repeats.list.len().max() or 0
    complete = repeats.filter(repeats.list.drop_nulls().list.len() == k)
    incomplete = repeats.len() - complete.len()
    n = complete.len()
    if n == 0 or k < 2:
        return Retest(n, incomplete, None, None, None, None, None, None)
    matrix = np.asarray(complete.to_list(), dtype=np.float64).reshape(n, k)
    variance = _within_ss(matrix) / (k - 1)
    retest = icc1(matrix)
    rng = np.random.default_rng([seed, zlib.crc32(repeats.name.encode())])
    interval = bootstrap_icc1(matrix, rng, level=level) if retest is not None else None
    return Retest(
        n=n,
        incomplete=incomplete,
        row_sd=float(np.sqrt(variance).mean()),
        mean_sd=float(math.sqrt(variance.mean() / n)),
        retest=retest,
        ci_low=interval[0] if interval else None,
        ci_high=interval[1] if interval else None,
        runs_needed=runs_needed(retest),
    )


def repeat_summary(
    frame: pl.DataFrame,
    names: Sequence[str],
    judges: Sequence[Judge],
    *,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """The run summary's `repeats` entry: k, the seeds and temperature asked, a warning at
    temperature 0, and per metric the figures of `retest_figures`."""
    temperature = judges[0].temperature
    summary: dict[str, Any] = {
        "k": len(judges),
        "seeds": [j.seed for j in judges],
        "temperature": temperature,
        "level": level,
        "target": RELIABILITY_TARGET,
        "metrics": {
            name: retest_figures(
                frame.get_column(name + REPEATS_SUFFIX), seed=seed, level=level
            ).as_dict()
            for name in names
        },
    }
    if temperature == 0:
        summary["warning"] = (
            "temperature 0: repeats differ only where the server's output depends on the seed "
            "or is nondeterministic; a deterministic server repeats itself (row_sd 0). Use "
            "Judge(temperature=...) to measure sampling noise"
        )
    return summary


def merge_stats(stats: Sequence[RunStats]) -> RunStats:
    """One RunStats for k runs: counts and tokens added, the lowest concurrency seen, every
    downgrade, the last run's structured-output mode."""
    merged = RunStats(price=stats[0].price)
    for one in stats:
        for f in fields(RunStats):
            value = getattr(one, f.name)
            if f.name in ("price", "structured_mode", "lowest_concurrency"):
                continue
            if isinstance(value, Counter | list):
                getattr(merged, f.name).__iadd__(value)
            else:
                setattr(merged, f.name, getattr(merged, f.name) + value)
    lowest = [s.lowest_concurrency for s in stats if s.lowest_concurrency]
    merged.lowest_concurrency = min(lowest) if lowest else 0
    merged.structured_mode = stats[-1].structured_mode
    return merged


def format_repeats(summary: Mapping[str, Any]) -> list[str]:
    """Lines for a printed summary: per metric, row SD, retest with its interval, runs."""
    lines = [
        f"repeats: {summary['k']} runs (seeds {summary['seeds'][0]}..{summary['seeds'][-1]}, "
        f"temperature {summary['temperature']})"
    ]
    for name, figures in summary["metrics"].items():
        retest = figures["retest"]
        ci = (
            f" [{figures['ci_low']:.2f}, {figures['ci_high']:.2f}]"
            if figures["ci_low"] is not None
            else ""
        )
        shown = "n/a" if retest is None else f"{retest:.2f}{ci}"
        sd = "n/a" if figures["row_sd"] is None else f"{figures['row_sd']:.3f}"
        runs = figures["runs_needed"]
        needed = "n/a" if runs is None else str(runs)
        lines.append(
            f"  {name}: row SD {sd}, retest ICC {shown}, runs to average for "
            f"{summary['target']:.1f}: {needed} (n={figures['n']})"
        )
    if "warning" in summary:
        lines.append(f"  note: {summary['warning']}")
    return lines


@dataclass
class Repeated:
    """k runs of the same rows, combined: the frame, what they cost together, and the
    summary's `repeats` entry (None for a single run, which is a normal run)."""

    frame: pl.DataFrame
    stats: RunStats
    summary: dict[str, Any] | None


async def score_repeats(
    frame: pl.DataFrame,
    metrics: Sequence[Any],
    judge: Judge,
    k: int,
    *,
    columns: Mapping[str, str] | None = None,
    seed: int = 0,
    temperature: float | None = None,
    level: float = 0.95,
) -> Repeated:
    """Score `frame` with `metrics` (prepared and checked, as `ragframe.engine.run.arun` has
    them) k times, repeat r with `repeat_judges`' copy r, one repeat after another; combine
    them (`combine_repeats`) and measure them (`repeat_summary`, bootstrap seeded by `seed`).
    k == 1 is a normal run: the frame as scored, no `_repeats` column, no summary."""
    from ragframe.engine.prepare import needs_judge, score_frame, work_plan

    names = [m.name for m in metrics]
    judges = repeat_judges(judge, k, temperature=temperature)
    if k > 1:
        clash = [c for c in repeat_columns(names) if c in frame.columns]
        if clash:
            raise ConfigError(
                f"the input already has a column {clash[0]!r}, which repeats would write; "
                f"drop or rename it before scoring with repeats (e.g. df.drop({clash[0]!r}))"
            )
    runs, stats = [], []
    for r, one in enumerate(judges):
        spent = sum(s.cost or 0.0 for s in stats)
        if judge.max_cost is not None and stats:  # one budget for the whole run, as k = 1
            one.max_cost = max(judge.max_cost - spent, 0.0)
        session = one.session()
        session.plan(work_plan(metrics, frame, columns))
        try:
            if needs_judge(metrics):
                async with session:
                    runs.append(await score_frame(frame, list(metrics), session, columns))
            else:
                runs.append(await score_frame(frame, list(metrics), session, columns))
        except BudgetExceeded as stop:
            if k == 1 or judge.max_cost is None:
                raise
            total = spent + (session.stats.cost or 0.0)
            raise BudgetExceeded(
                f"stopped in repeat {r + 1} of {k}: the repeats have spent ${total:.4f}, "
                f"reaching max_cost ${judge.max_cost:.4f}; answers so far are cached, so "
                "rerunning with a higher max_cost resumes without paying for them again"
            ) from stop
        stats.append(session.stats)
    if k == 1:
        return Repeated(runs[0], stats[0], None)
    rules = {m.name: getattr(m, "pass_rule", None) for m in metrics}
    combined = combine_repeats(runs, names, rules)
    summary = repeat_summary(combined, names, judges, seed=seed, level=level)
    return Repeated(combined, merge_stats(stats), summary)
