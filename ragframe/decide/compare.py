"""Compare two scored runs: is b better than a, by how much, and how sure can one be?

`compare(a, b, on="id")` pairs the rows of two scored logs by key (the same questions under two
setups) and gives, per metric (and group, with `by=`), the mean difference b - a with its
interval and a p-value, wins / ties / losses, and every row it could not pair, counted and
listed. With `on=None` the two logs are compared as independent samples.

Methods (n: the pairs, or each side's scores; nulls and NaN left out):

- Paired interval: the mean of the differences d = b - a with `ragframe.stats.mean_interval`
  (bounds [-1, 1]): the expanded percentile bootstrap of d (RESAMPLES resamples, vectorised,
  seeded) up to BOOTSTRAP_MAX_N pairs, Student's t past it, the exact binomial bound when every
  d sits at -1 or 1.
- Paired p-value: the sign-flip permutation test (under "no effect" each d is as likely to be
  -d). Exact, over all 2**n sign vectors, up to EXACT_MAX_N pairs; past it PERMUTATIONS random
  sign vectors, p = (1 + #{|mean*| >= |mean|}) / (1 + PERMUTATIONS), so p is never 0 (the
  smallest p it can give is about 1e-4). When the |d| take few distinct values (verdict
  fractions), the flips are drawn as binomial counts per value, at any n; otherwise past
  BOOTSTRAP_MAX_N pairs, the paired t-test.
- Unpaired interval: each side resampled on its own (RESAMPLES bootstrap means each), the
  percentile interval of the differences expanded as `stats` does, with Welch's standard error
  and degrees of freedom; Welch's t interval once either side passes BOOTSTRAP_MAX_N scores.
- Unpaired p-value: the permutation test of the labels a / b (PERMUTATIONS shuffles; drawn as
  multivariate hypergeometric counts when the pooled scores take few distinct values); Welch's
  t-test once the pooled scores pass PERMUTATION_MAX_N (= BOOTSTRAP_MAX_N).
- `better` is "b" or "a" only when both agree that the difference is real: the interval
  excludes 0 and p < 1 - level; null otherwise. Wins, losses and `better` respect the metric's
  direction (hallucination: lower is better, so a lower b is a win). A metric whose direction
  is unknown (no metadata, not a known metric) is read as higher-is-better, and a warning says
  so.

Every cell is seeded by (seed, metric, group), so adding a group or a metric does not move the
others' figures. The intervals assume the rows are independent draws from the logs one means
to compare.
"""

from __future__ import annotations

import html
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import polars as pl

from ragframe.errors import ConfigError, InputError
from ragframe.stats import BOOTSTRAP_MAX_N, RESAMPLES, bootstrap_means, mean_interval, t_quantile

__all__ = [
    "EXACT_MAX_N",
    "PERMUTATIONS",
    "TABLE_COLUMNS",
    "UNPAIRED_WARNING",
    "Comparison",
    "compare",
]

#: Random sign flips or label shuffles per permutation test: the Monte Carlo error of a p
#: near 0.05 is about 0.002, and the smallest p is 1 / 10001.
PERMUTATIONS = 10_000
#: Up to this many pairs the sign-flip test enumerates all 2**n sign vectors (8,192 at most).
EXACT_MAX_N = 13
#: Past this many pooled scores the unpaired p-value is Welch's t-test, not a permutation test.
PERMUTATION_MAX_N = BOOTSTRAP_MAX_N
#: Elements of a sign or shuffle matrix drawn at once (32 MiB of float64).
_BLOCK_ELEMENTS = 1 << 22
#: Two scores closer than this are a tie.
_TIE = 1e-12

UNPAIRED_WARNING = (
    "unpaired (two-sample) comparison: a paired design (on= a key column, the same questions "
    "scored under both setups) is stronger, since it removes the question-to-question "
    "variation from the difference"
)

#: The columns of `Comparison.table`, after the group columns.
TABLE_COLUMNS = (
    "metric",
    "direction",
    "n",
    "n_a",
    "n_b",
    "mean_a",
    "mean_b",
    "diff",
    "ci_low",
    "ci_high",
    "level",
    "method",
    "p_value",
    "test",
    "wins",
    "ties",
    "losses",
    "better",
    "matched",
    "only_a",
    "only_b",
    "failed_a",
    "failed_b",
)
_SCHEMA: dict[str, Any] = {
    "metric": pl.String,
    "direction": pl.String,
    "n": pl.Int64,
    "n_a": pl.Int64,
    "n_b": pl.Int64,
    "mean_a": pl.Float64,
    "mean_b": pl.Float64,
    "diff": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "level": pl.Float64,
    "method": pl.String,
    "p_value": pl.Float64,
    "test": pl.String,
    "wins": pl.Int64,
    "ties": pl.Int64,
    "losses": pl.Int64,
    "better": pl.String,
    "matched": pl.Int64,
    "only_a": pl.Int64,
    "only_b": pl.Int64,
    "failed_a": pl.Int64,
    "failed_b": pl.Int64,
}


@dataclass(frozen=True)
class Comparison:
    """What `compare` found.

    table : one row per group and metric: n (pairs; unpaired: both sides' scores), n_a / n_b
        (scores on each side), mean_a, mean_b, diff (b - a), ci_low / ci_high (its `level`
        interval, `method`), p_value (`test`), wins / ties / losses (b better / equal / worse,
        by the metric's direction; paired only), better ("b", "a", or null when the interval
        covers 0 or p >= 1 - level), and the rows left out: matched (keys on both sides),
        only_a / only_b (keys on one side; paired only), failed_a / failed_b (null scores).
    unmatched : the keys found on one side only, with `side` ("a" or "b") and the group
        columns; empty when unpaired.
    changed : per metric, the pairs whose score moved most (|b - a|, largest first), with the
        keys, both scores (`{metric}_a`, `{metric}_b`), `diff`, and both verdict structs
        (`{metric}_detail_a`, `{metric}_detail_b`) where the inputs have them.
    warnings : what may mislead: an unpaired design, differing judges or prompts, rows left
        out, unknown directions.
    """

    table: pl.DataFrame
    unmatched: pl.DataFrame
    changed: dict[str, pl.DataFrame]
    warnings: list[str]
    paired: bool
    on: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    level: float = 0.95

    def __str__(self) -> str:
        lines = [self._headline(), ""]
        lines += _text_table(self._display_rows(), left=len(self.by) + 1)
        if self.warnings:
            lines += ["", *(f"warning: {w}" for w in self.warnings)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = self._display_rows()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in rows[1:]
        )
        warned = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        return (
            f"<div><p>{html.escape(self._headline())}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<p>Warnings:</p><ul>{warned}</ul>" if warned else "")
            + "</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain Python values (for `--json`)."""
        return {
            "paired": self.paired,
            "on": self.on,
            "by": self.by,
            "level": self.level,
            "table": self.table.to_dicts(),
            "warnings": self.warnings,
            "unmatched": self.unmatched.to_dicts(),
            "changed": {m: frame.to_dicts() for m, frame in self.changed.items()},
        }

    def _headline(self) -> str:
        level = f"{self.level:.0%} intervals"
        if not self.paired:
            return f"unpaired (two-sample) comparison of b against a, {level}"
        sides = self.unmatched.get_column("side")
        only_a, only_b = int((sides == "a").sum()), int((sides == "b").sum())
        matched = self._matched_total()
        return (
            f"paired on {', '.join(self.on)}: {matched} keys matched, {only_a} only in a, "
            f"{only_b} only in b; differences are b - a, {level}"
        )

    def _matched_total(self) -> int:
        if not self.table.height:
            return 0
        firsts = self.table.filter(pl.col("metric") == self.table["metric"][0])
        return int(firsts["matched"].sum())

    def _display_rows(self) -> list[list[str]]:
        """The table as text cells, header first (shared by `__str__` and `_repr_html_`)."""
        header = [*self.by, "metric", "n", "mean a", "mean b", "diff", "interval", "p"]
        header += ["W/T/L", "verdict"] if self.paired else ["verdict"]
        rows = [header]
        for row in self.table.iter_rows(named=True):
            n = str(row["n"]) if self.paired else f"{row['n_a']}/{row['n_b']}"
            cells = [*(str(row[g]) for g in self.by), row["metric"], n]
            cells += [_num(row["mean_a"]), _num(row["mean_b"]), _num(row["diff"], sign=True)]
            cells += [_interval(row["ci_low"], row["ci_high"]), _p(row["p_value"])]
            if self.paired:
                cells.append(f"{row['wins']}/{row['ties']}/{row['losses']}")
            cells.append(_verdict(row["better"], row["direction"]))
            rows.append(cells)
        return rows


def compare(
    a: Any,
    b: Any,
    *,
    on: str | Sequence[str] | None = None,
    by: str | Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    level: float = 0.95,
    seed: int = 0,
    changed: int = 10,
) -> Comparison:
    """Compare run b against run a, metric by metric (methods: module docstring).

    a, b : scored frames (Polars or pandas) or the paths of scored Parquet files (their
        metadata gives the metrics' directions, judges and prompt hashes).
    on : key column(s) pairing a row of a with a row of b (unique on each side): a paired
        comparison, the stronger design. None: two independent samples.
    by : group column(s): one comparison per group (paired: read from a, or b for keys only b
        has).
    metrics : the score columns; by default those both sides have (from the metadata, else
        every Float64 column with a `{name}_detail` sibling).
    level : the intervals' confidence level; seed : makes bootstraps and permutations
        reproducible; changed : how many most-changed pairs to keep per metric.
    """
    _check_options(level, seed, changed)
    side_a, side_b = _load(a, "a"), _load(b, "b")
    keys, groups = _names(on), _names(by)
    warnings: list[str] = []
    names = _metric_names(side_a, side_b, metrics, [*keys, *groups], warnings)
    directions = _directions(names, side_a, side_b, warnings)
    warnings += _provenance_warnings(side_a, side_b, names)
    try:
        if keys:
            found = _compare_paired(side_a, side_b, keys, groups, names, directions, level, seed)
            table, unmatched, joined = found
            warnings += _left_out_warnings(table, unmatched, keys)
            most = _most_changed(joined, side_a, side_b, keys, groups, names, changed)
        else:
            _require(groups, (side_a, side_b), "by=")
            warnings.insert(0, UNPAIRED_WARNING)
            table = _compare_unpaired(side_a, side_b, groups, names, directions, level, seed)
            unmatched, most = pl.DataFrame({"side": []}, schema={"side": pl.String}), {}
            warnings += _failed_warnings(table, paired=False)
    except (pl.exceptions.PolarsError, OSError) as exc:  # e.g. a group column typed differently
        raise InputError(f"cannot compare {side_a.where} with {side_b.where}: {exc}") from exc
    return Comparison(table, unmatched, most, warnings, bool(keys), keys, groups, float(level))


# ------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class _Side:
    lazy: pl.LazyFrame
    schema: pl.Schema
    meta: dict[str, Any]
    where: str  # what to call it in a message: "a ('runs/a.parquet')"
    is_file: bool


def _check_options(level: float, seed: int, changed: int) -> None:
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, not {seed!r}")
    if isinstance(changed, bool) or not isinstance(changed, int) or changed < 0:
        raise ConfigError(f"changed must be a non-negative integer, not {changed!r}")


def _names(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def _load(data: Any, label: str) -> _Side:
    """One side as a LazyFrame (a Parquet file is scanned: only the columns used are read),
    with the file's ragframe metadata ({} for a frame or an old file)."""
    from ragframe.inputs.io import INPUT_FORMATS, input_path, open_input, read_metadata

    if type(data).__module__.startswith("pandas"):
        data = pl.from_pandas(data)
    if isinstance(data, pl.DataFrame | pl.LazyFrame):
        lazy, meta, where, is_file = data.lazy(), {}, f"{label} (the frame)", False
    elif isinstance(data, str | Path):
        path = input_path(data)
        where, is_file = f"{label} ({str(path)!r})", True
        try:
            if INPUT_FORMATS.get(path.suffix.lower()) == "Parquet":
                lazy, meta = pl.scan_parquet(path), read_metadata(path)
            else:
                lazy, meta = open_input(path).read().lazy(), {}
        except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
            raise InputError(f"cannot read {where}: {exc}") from exc
    else:
        raise InputError(
            f"cannot compare a {type(data).__name__} ({label}): pass a polars or pandas "
            "DataFrame, or the path of a scored Parquet file"
        )
    try:
        schema = lazy.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    return _Side(lazy, schema, meta, where, is_file)


def _require(columns: Sequence[str], sides: Sequence[_Side], option: str) -> None:
    """Every column on every side, or a ConfigError naming the column and the file."""
    for side in sides:
        for name in columns:
            if name not in side.schema:
                raise ConfigError(
                    f"{option} names {name!r}, which {side.where} lacks; its columns are "
                    f"{side.schema.names()}"
                )


def _metric_names(
    a: _Side, b: _Side, metrics: Sequence[str] | None, taken: list[str], warnings: list[str]
) -> list[str]:
    """The score columns to compare: as given (checked on both sides), else those both
    sides have (their metadata's, else detected), with a warning for those only one has."""
    if isinstance(metrics, str):
        metrics = [metrics]
    if metrics is not None:
        names = _names(metrics)
        _require(names, (a, b), "metrics=")
    else:
        found_a, found_b = _detected(a), _detected(b)
        names = [m for m in found_a if m in found_b]
        alone = [f"{m} (only in a)" for m in found_a if m not in found_b]
        alone += [f"{m} (only in b)" for m in found_b if m not in found_a]
        if alone:
            warnings.append(f"not compared, scored on one side only: {', '.join(alone)}")
        if not names:
            raise InputError(
                f"no score column is on both sides (a has {found_a}, b has {found_b}); "
                "pass metrics=['column'] naming columns both have"
            )
    for name in names:
        for side in (a, b):
            dtype = side.schema[name]
            if not (dtype.is_numeric() or dtype == pl.Boolean) or name in taken:
                raise ConfigError(
                    f"column {name!r} of {side.where} is {dtype}, not scores (or is a key or "
                    "group column); compare Float64 scores, or cast it first"
                )
    return names


def _detected(side: _Side) -> list[str]:
    schema = side.schema
    recorded = [m for m in side.meta.get("metrics") or {} if m in schema]
    return recorded or [
        name
        for name, dtype in schema.items()
        if dtype == pl.Float64
        and (isinstance(schema.get(f"{name}_detail"), pl.Struct) or _known(name))
    ]


def _known(name: str) -> bool:
    from ragframe.metrics import REGISTRY

    return name in REGISTRY or name == "ragas_score"


def _directions(names: list[str], a: _Side, b: _Side, warnings: list[str]) -> dict[str, str | None]:
    """Each metric's direction: from a's metadata, else b's, else the catalogue; None when
    unknown (read as higher-is-better, with a warning)."""
    from ragframe.metrics import REGISTRY

    found: dict[str, str | None] = {}
    for name in names:
        said = [
            str(((s.meta.get("metrics") or {}).get(name) or {}).get("direction") or "")
            for s in (a, b)
        ]
        if said[0] and said[1] and said[0] != said[1]:
            warnings.append(
                f"{name}: a's metadata says {said[0]} is better, b's says {said[1]}; a's is used"
            )
        cls = REGISTRY.get(name)
        catalogue = "higher" if name == "ragas_score" else (cls.direction if cls else None)
        found[name] = said[0] or said[1] or catalogue
    unknown = [n for n, d in found.items() if d is None]
    if unknown:
        warnings.append(
            f"direction unknown for {unknown} (no ragframe metadata, not a known metric): "
            "wins, losses and the verdict read higher as better"
        )
    return found


def _provenance_warnings(a: _Side, b: _Side, names: list[str]) -> list[str]:
    """Differing judges, prompts or configurations (from the files' metadata): any of them
    moves scores on its own."""
    out = [
        f"{s.where} has no ragframe metadata (an older or foreign file): its judge and "
        "prompts are unknown, so a judge or prompt change cannot be ruled out"
        for s in (a, b)
        if s.is_file and not s.meta
    ]
    judge_a, judge_b = a.meta.get("judge") or {}, b.meta.get("judge") or {}
    if judge_a and judge_b:
        keys = ("model", "endpoint_host", "temperature", "embedding_model")
        differ = [
            f"{k} {judge_a.get(k)!r} in a, {judge_b.get(k)!r} in b"
            for k in keys
            if judge_a.get(k) != judge_b.get(k)
        ]
        if differ:
            out.append(
                f"the judges differ ({'; '.join(differ)}): a judge change alone moves scores, "
                "so part of any difference may be the judge's, not the system's"
            )
    for name in names:
        ma = (a.meta.get("metrics") or {}).get(name) or {}
        mb = (b.meta.get("metrics") or {}).get(name) or {}
        if not (ma and mb):
            continue
        ha, hb = ma.get("prompt_hashes") or {}, mb.get("prompt_hashes") or {}
        tasks = sorted(t for t in {*ha, *hb} if ha.get(t) != hb.get(t))
        if tasks:
            out.append(
                f"{name}: the prompts differ (tasks {tasks}): a prompt change alone moves "
                "scores, so part of any difference may be the prompt's"
            )
        if (ma.get("class"), ma.get("config")) != (mb.get("class"), mb.get("config")):
            out.append(
                f"{name}: configured differently ({ma.get('class')} {ma.get('config')} in a, "
                f"{mb.get('class')} {mb.get('config')} in b)"
            )
    return out


# ------------------------------------------------------------------------------ paired


def _compare_paired(
    a: _Side,
    b: _Side,
    keys: list[str],
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The paired table, the unmatched keys, and the joined scores (for `_most_changed`)."""
    _require(keys, (a, b), "on=")
    for g in groups:
        if g not in a.schema and g not in b.schema:
            raise ConfigError(
                f"by= names {g!r}, which neither {a.where} nor {b.where} has; a's columns "
                f"are {a.schema.names()}"
            )
    casts = _key_casts(a, b, keys)
    frames = [_keyed_scores(s, tag, keys, groups, names, casts) for s, tag in ((a, "a"), (b, "b"))]
    joined = frames[0].join(frames[1], on=keys, how="full", coalesce=True)
    joined = joined.with_columns(
        pl.col("\0in_a").fill_null(False),
        pl.col("\0in_b").fill_null(False),
        *(_coalesced(g, joined.columns) for g in groups),
    )
    unmatched = _unmatched(joined, keys, groups)
    work = joined.with_columns(pl.lit(True).alias("\0all"))
    cell_groups = groups or ["\0all"]
    in_a, in_b = pl.col("\0in_a"), pl.col("\0in_b")
    matched = in_a & in_b
    aggs: list[pl.Expr] = [
        matched.sum().alias("\0matched"),
        (in_a & ~in_b).sum().alias("\0only_a"),
        (in_b & ~in_a).sum().alias("\0only_b"),
    ]
    for m in names:
        sa, sb = pl.col(f"{m}\0a"), pl.col(f"{m}\0b")
        pair = matched & sa.is_not_null() & sb.is_not_null()
        aggs += [
            sa.filter(pair).alias(f"{m}\0xa"),
            sb.filter(pair).alias(f"{m}\0xb"),
            (matched & sa.is_null()).sum().alias(f"{m}\0failed_a"),
            (matched & sb.is_null()).sum().alias(f"{m}\0failed_b"),
        ]
    cells = work.group_by(cell_groups).agg(aggs).sort(cell_groups, nulls_last=True)
    rows = []
    for i, cell in enumerate(_scalars(cells)):
        key = [cell[g] for g in groups]
        for m in names:
            xa, xb = _values(cells, f"{m}\0xa", i), _values(cells, f"{m}\0xb", i)
            rng_seed = _cell_seed(seed, m, key)
            figures = _paired_cell(xa, xb, directions[m], level, rng_seed)
            counts = {
                "matched": cell["\0matched"],
                "only_a": cell["\0only_a"],
                "only_b": cell["\0only_b"],
                "failed_a": cell[f"{m}\0failed_a"],
                "failed_b": cell[f"{m}\0failed_b"],
            }
            rows.append({**dict(zip(groups, key, strict=True)), "metric": m, **figures, **counts})
    table = _table(rows, cells, groups, names, directions, level)
    return table, unmatched, joined


def _key_casts(a: _Side, b: _Side, keys: list[str]) -> dict[str, pl.DataType]:
    """Key columns whose types differ between the sides: integers of different widths are
    joined as Int64; other mismatches are refused with the fix."""
    casts: dict[str, pl.DataType] = {}
    for k in keys:
        ta, tb = a.schema[k], b.schema[k]
        if ta == tb:
            continue
        if ta.is_integer() and tb.is_integer():
            casts[k] = pl.Int64()
            continue
        raise InputError(
            f"on= column {k!r} is {ta} in {a.where} but {tb} in {b.where}; keys must have "
            f"one type: cast one side first (e.g. pl.col({k!r}).cast(pl.{ta}))"
        )
    return casts


def _keyed_scores(
    side: _Side,
    tag: str,
    keys: list[str],
    groups: list[str],
    names: list[str],
    casts: Mapping[str, pl.DataType],
) -> pl.DataFrame:
    """One side's keys, groups and scores, checked: no null key, no duplicate key."""
    frame = side.lazy.select(
        *(pl.col(k).cast(casts[k]) if k in casts else pl.col(k) for k in keys),
        *(pl.col(g).alias(f"{g}\0{tag}") for g in groups if g in side.schema),
        *(pl.col(m).cast(pl.Float64).fill_nan(None).alias(f"{m}\0{tag}") for m in names),
        pl.lit(True).alias(f"\0in_{tag}"),
    )
    try:
        frame = frame.with_row_index(f"\0row_{tag}").collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {side.where}: {exc}") from exc
    nulls = frame.filter(pl.any_horizontal(pl.col(k).is_null() for k in keys)).height
    if nulls:
        raise InputError(
            f"{side.where} has {nulls} rows with a null in the key column(s) {keys}; a paired "
            "comparison needs every row keyed: fill or drop them first, or pass on= columns "
            "that identify every row"
        )
    if frame.select(pl.struct(keys).n_unique()).item() < frame.height:
        dupes = frame.group_by(keys).len().filter(pl.col("len") > 1).sort(keys)
        first = dupes.row(0, named=True)
        key = {k: first[k] for k in keys}
        raise InputError(
            f"{side.where} has {first['len']} rows with key {key} ({dupes.height} keys "
            f"repeated in all); a paired comparison needs one row per key: pass on= columns "
            "that together identify a row (e.g. on=['id', 'run']), or deduplicate first "
            f"(frame.unique(subset={keys}))"
        )
    return frame


def _coalesced(group: str, columns: list[str]) -> pl.Expr:
    """A group's value: a's, else b's (for keys only b has)."""
    present = [f"{group}\0{t}" for t in ("a", "b") if f"{group}\0{t}" in columns]
    return pl.coalesce(present).alias(group)


def _unmatched(joined: pl.DataFrame, keys: list[str], groups: list[str]) -> pl.DataFrame:
    """The keys on one side only, each side in its own row order."""
    only_a = joined.filter(~pl.col("\0in_b")).sort("\0row_a")
    only_b = joined.filter(~pl.col("\0in_a")).sort("\0row_b")
    return pl.concat(
        [
            only_a.select(*keys, *groups, pl.lit("a").alias("side")),
            only_b.select(*keys, *groups, pl.lit("b").alias("side")),
        ]
    )


def _paired_cell(
    xa: np.ndarray, xb: np.ndarray, direction: str | None, level: float, seed: int
) -> dict[str, Any]:
    """The figures of one metric in one group, from the paired scores."""
    n = int(xa.size)
    d = xb - xa
    bounded = n > 0 and min(xa.min(), xb.min()) >= 0 and max(xa.max(), xb.max()) <= 1
    interval = mean_interval(d, level, seed=seed, bounds=(-1.0, 1.0) if bounded else None)
    gain = d if direction != "lower" else -d
    p, test = _sign_flip_p(d, np.random.default_rng([seed, 1]))
    return {
        "n": n,
        "n_a": n,
        "n_b": n,
        "mean_a": float(xa.mean()) if n else None,
        "mean_b": float(xb.mean()) if n else None,
        "diff": interval.mean,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "method": interval.method,
        "p_value": p,
        "test": test,
        "wins": int((gain > _TIE).sum()),
        "ties": int((np.abs(gain) <= _TIE).sum()),
        "losses": int((gain < -_TIE).sum()),
        "better": _better(interval.mean, interval.low, interval.high, p, level, direction),
    }


def _sign_flip_p(d: np.ndarray, rng: np.random.Generator) -> tuple[float | None, str]:
    """Two-sided p of the paired sign-flip permutation test (module docstring)."""
    n = int(d.size)
    if n == 0:
        return None, "none"
    observed = abs(float(d.sum()))
    slack = 1e-9 * (1.0 + observed)  # rounding must not turn an equal sum into a smaller one
    if n <= EXACT_MAX_N:
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        sums = np.abs(signs @ d)
        return float(np.count_nonzero(sums >= observed - slack) / sums.size), "sign-flip exact"
    values, counts = np.unique(np.abs(d[d != 0]), return_counts=True)
    if values.size * 4 <= n:
        # Per distinct |d|: how many of its c copies keep their sign is Binomial(c, 1/2).
        kept = rng.binomial(counts, 0.5, size=(PERMUTATIONS, values.size))
        sums = np.abs((2 * kept - counts) @ values)
    elif n > BOOTSTRAP_MAX_N:
        t = float(d.mean()) / (float(d.std(ddof=1)) / math.sqrt(n))
        return _t_p(t, n - 1), "paired t"
    else:
        sums = np.empty(PERMUTATIONS)
        per_block = max(1, _BLOCK_ELEMENTS // n)
        for start in range(0, PERMUTATIONS, per_block):
            stop = min(PERMUTATIONS, start + per_block)
            # One random bit per pair: a byte of randomness gives 8 flips.
            octets = rng.integers(0, 256, size=(stop - start, (n + 7) // 8), dtype=np.uint8)
            flips = np.unpackbits(octets, axis=1, count=n).astype(np.float64)
            sums[start:stop] = np.abs(d.sum() - 2 * (flips @ d))
    hits = int(np.count_nonzero(sums >= observed - slack))
    return (1 + hits) / (1 + PERMUTATIONS), "sign-flip"


# ------------------------------------------------------------------------------ unpaired


def _compare_unpaired(
    a: _Side,
    b: _Side,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
) -> pl.DataFrame:
    """The two-sample table: each side's scores per group, compared."""
    per_side = []
    for side, tag in ((a, "a"), (b, "b")):
        cell_groups = groups or ["\0all"]
        lazy = side.lazy.with_columns(pl.lit(True).alias("\0all")).select(
            *cell_groups, *(pl.col(m).cast(pl.Float64).fill_nan(None) for m in names)
        )
        aggs = [
            expr
            for m in names
            for expr in (
                pl.col(m).drop_nulls().alias(f"{m}\0x{tag}"),
                pl.col(m).null_count().alias(f"{m}\0failed_{tag}"),
            )
        ]
        try:
            per_side.append(lazy.group_by(cell_groups).agg(aggs).collect())
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"cannot read {side.where}: {exc}") from exc
    cell_groups = groups or ["\0all"]
    cells = (
        per_side[0]
        .join(per_side[1], on=cell_groups, how="full", coalesce=True, nulls_equal=True)
        .sort(cell_groups, nulls_last=True)
    )
    rows = []
    for i, cell in enumerate(_scalars(cells)):
        key = [cell[g] for g in groups]
        for m in names:
            xa, xb = _values(cells, f"{m}\0xa", i), _values(cells, f"{m}\0xb", i)
            figures = _unpaired_cell(xa, xb, directions[m], level, _cell_seed(seed, m, key))
            counts = {
                "failed_a": cell[f"{m}\0failed_a"] or 0,
                "failed_b": cell[f"{m}\0failed_b"] or 0,
            }
            rows.append({**dict(zip(groups, key, strict=True)), "metric": m, **figures, **counts})
    return _table(rows, cells, groups, names, directions, level)


def _unpaired_cell(
    xa: np.ndarray, xb: np.ndarray, direction: str | None, level: float, seed: int
) -> dict[str, Any]:
    """The figures of one metric in one group, from two independent samples."""
    na, nb = int(xa.size), int(xb.size)
    mean_a = float(xa.mean()) if na else None
    mean_b = float(xb.mean()) if nb else None
    diff = mean_b - mean_a if mean_a is not None and mean_b is not None else None
    low = high = p = None
    method = test = "none"
    if na >= 2 and nb >= 2 and diff is not None:
        rng = np.random.default_rng([seed, 2])
        bounded = min(xa.min(), xb.min()) >= 0 and max(xa.max(), xb.max()) <= 1
        low, high, method = _two_sample_interval(xa, xb, level, rng)
        if bounded:
            low, high = max(low, -1.0), min(high, 1.0)
        p, test = _label_permutation_p(xa, xb, rng)
    return {
        "n": na + nb,
        "n_a": na,
        "n_b": nb,
        "mean_a": mean_a,
        "mean_b": mean_b,
        "diff": diff,
        "ci_low": low,
        "ci_high": high,
        "method": method,
        "p_value": p,
        "test": test,
        "better": _better(diff, low, high, p, level, direction),
    }


def _welch(xa: np.ndarray, xb: np.ndarray) -> tuple[float, float]:
    """Welch's standard error of the difference of means, and its degrees of freedom."""
    va, vb = float(xa.var(ddof=1)) / xa.size, float(xb.var(ddof=1)) / xb.size
    se = math.sqrt(va + vb)
    if se == 0:
        return 0.0, float(xa.size + xb.size - 2)
    return se, (va + vb) ** 2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1))


def _two_sample_interval(
    xa: np.ndarray, xb: np.ndarray, level: float, rng: np.random.Generator
) -> tuple[float, float, str]:
    """The bootstrap interval of mean(b) - mean(a), each side resampled on its own, its
    percentiles widened as `stats` widens them (to Welch's t with Welch's standard error);
    Welch's t interval when a side passes BOOTSTRAP_MAX_N."""
    diff = float(xb.mean() - xa.mean())
    se, df = _welch(xa, xb)
    quantile = t_quantile(1 - (1 - level) / 2, max(1, int(df)))
    if max(xa.size, xb.size) > BOOTSTRAP_MAX_N:
        return diff - quantile * se, diff + quantile * se, "welch-t"
    plugin = math.sqrt(float(xa.var()) / xa.size + float(xb.var()) / xb.size)
    if plugin == 0:
        return diff, diff, "bootstrap"
    diffs = bootstrap_means(xb, rng, RESAMPLES) - bootstrap_means(xa, rng, RESAMPLES)
    tail = NormalDist().cdf(-quantile * se / plugin)
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return min(float(low), diff), max(float(high), diff), "bootstrap"


def _label_permutation_p(
    xa: np.ndarray, xb: np.ndarray, rng: np.random.Generator
) -> tuple[float, str]:
    """Two-sided p of the permutation test of the labels a / b (module docstring)."""
    na, nb = xa.size, xb.size
    pooled = np.concatenate([xa, xb])
    total = float(pooled.sum())
    observed = abs(float(xb.mean() - xa.mean()))
    values, counts = np.unique(pooled, return_counts=True)
    if values.size * 4 <= pooled.size:
        # Which scores land in b under a random relabelling: multivariate hypergeometric.
        sums_b = rng.multivariate_hypergeometric(counts, nb, size=PERMUTATIONS) @ values
    elif pooled.size > PERMUTATION_MAX_N:
        se, df = _welch(xa, xb)
        return (_t_p(observed / se if se else math.inf, df) if observed else 1.0), "Welch t"
    else:
        sums_b = np.empty(PERMUTATIONS)
        per_block = max(1, _BLOCK_ELEMENTS // pooled.size)
        for start in range(0, PERMUTATIONS, per_block):
            stop = min(PERMUTATIONS, start + per_block)
            # b's relabelled scores: the nb smallest of uniform random keys, a uniform subset
            # (a partial sort, cheaper than shuffling every row).
            keys = rng.random((stop - start, pooled.size))
            chosen = np.argpartition(keys, nb - 1, axis=1)[:, :nb]
            sums_b[start:stop] = pooled[chosen].sum(axis=1)
    stats = np.abs(sums_b / nb - (total - sums_b) / na)
    hits = int(np.count_nonzero(stats >= observed - 1e-9 * (1.0 + observed)))
    return (1 + hits) / (1 + PERMUTATIONS), "label permutation"


# ------------------------------------------------------------------------------ shared


def _t_p(t: float, df: float) -> float:
    """Two-sided p of Student's t with `df` degrees of freedom, from `stats.t_quantile`
    (bisection on the tail, in logs; p is floored at 2e-15, the quantiles' own precision)."""
    t, df = abs(t), max(1, int(df))
    if not math.isfinite(t) or t_quantile(1 - 1e-15, df) <= t:
        return 2e-15
    low, high = math.log(1e-15), math.log(0.5)
    for _ in range(60):
        mid = (low + high) / 2
        if t_quantile(1 - math.exp(mid), df) > t:
            low = mid
        else:
            high = mid
    return min(1.0, 2 * math.exp((low + high) / 2))


def _better(
    diff: float | None,
    low: float | None,
    high: float | None,
    p: float | None,
    level: float,
    direction: str | None,
) -> str | None:
    """ "b" or "a" when the interval excludes 0 and p < 1 - level; None otherwise."""
    if diff is None or low is None or high is None or p is None or p >= 1 - level:
        return None
    if low <= 0 <= high:
        return None
    gain = diff if direction != "lower" else -diff
    return "b" if gain > 0 else "a"


def _scalars(cells: pl.DataFrame) -> Any:
    """The cells' rows as dicts, without their (long) lists of scores."""
    lists = [c for c, dtype in cells.schema.items() if isinstance(dtype, pl.List)]
    return cells.drop(lists).iter_rows(named=True)


def _values(cells: pl.DataFrame, column: str, row: int) -> np.ndarray:
    """One cell's scores as a float64 array (empty where a side has no such group)."""
    found = cells.get_column(column)[row]
    if found is None:
        return np.empty(0)
    return np.asarray(found.to_numpy(), dtype=np.float64)


def _cell_seed(seed: int, metric: str, key: Sequence[Any]) -> int:
    """A seed for one cell, from the seed and the cell's identity (not its position)."""
    sequence = np.random.SeedSequence([seed, zlib.crc32(repr((metric, *key)).encode())])
    return int(sequence.generate_state(1)[0])


def _table(
    rows: list[dict[str, Any]],
    cells: pl.DataFrame,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
) -> pl.DataFrame:
    schema = {**{g: cells.schema[g] for g in groups}, **_SCHEMA}
    filled = [
        {**{c: None for c in schema}, **row, "direction": directions[row["metric"]], "level": level}
        for row in rows
    ]
    return pl.DataFrame(filled, schema=schema).select(*groups, *TABLE_COLUMNS)


def _left_out_warnings(table: pl.DataFrame, unmatched: pl.DataFrame, keys: list[str]) -> list[str]:
    """Rows the paired figures leave out, said once (the table counts them per cell)."""
    out = []
    if unmatched.height:
        sides = unmatched.get_column("side")
        out.append(
            f"{int((sides == 'a').sum())} keys only in a and {int((sides == 'b').sum())} only "
            f"in b ({', '.join(keys)}) are left out of the paired figures; "
            "Comparison.unmatched lists them"
        )
    return out + _failed_warnings(table, paired=True)


def _failed_warnings(table: pl.DataFrame, *, paired: bool) -> list[str]:
    totals = (
        table.group_by("metric", maintain_order=True)
        .agg(pl.col("failed_a").sum(), pl.col("failed_b").sum())
        .filter((pl.col("failed_a") > 0) | (pl.col("failed_b") > 0))
    )
    rows = "matched rows" if paired else "rows"
    return [
        f"{m}: {fa} {rows} have no score in a and {fb} in b (failed to score; see "
        f"{m}_detail.error); left out of the figures"
        for m, fa, fb in totals.iter_rows()
    ]


def _most_changed(
    joined: pl.DataFrame,
    a: _Side,
    b: _Side,
    keys: list[str],
    groups: list[str],
    names: list[str],
    limit: int,
) -> dict[str, pl.DataFrame]:
    """Per metric, the `limit` pairs with the largest |b - a| (ties: a's row order), with
    both verdict structs, read for those rows only."""
    out: dict[str, pl.DataFrame] = {}
    casts = _key_casts(a, b, keys)
    for m in names:
        diff = pl.col(f"{m}\0b") - pl.col(f"{m}\0a")
        top = (
            joined.filter(diff.abs() > _TIE)
            .top_k(limit, by=[diff.abs(), pl.col("\0row_a")], reverse=[False, True])
            .sort([diff.abs(), pl.col("\0row_a")], descending=[True, False])
            .select(
                *keys,
                *groups,
                pl.col(f"{m}\0a").alias(f"{m}_a"),
                pl.col(f"{m}\0b").alias(f"{m}_b"),
                diff.alias("diff"),
            )
        )
        for side, tag in ((a, "a"), (b, "b")):
            wanted = [f"{m}_detail"] + (["question"] if tag == "a" else [])
            extra = [c for c in wanted if c in side.schema and c not in (*keys, *groups)]
            if not extra or not top.height:
                continue
            key_cols = [pl.col(k).cast(casts[k]) if k in casts else pl.col(k) for k in keys]
            details = (
                side.lazy.select(*key_cols, *extra)
                .join(top.lazy().select(keys), on=keys, how="semi")
                .collect()
                .rename({f"{m}_detail": f"{m}_detail_{tag}"}, strict=False)
            )
            top = top.join(details, on=keys, how="left", maintain_order="left")
        out[m] = top
    return out


# ------------------------------------------------------------------------------ display


def _num(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _verdict(better: str | None, direction: str | None) -> str:
    if better == "b":
        return "✅ b better" if direction else "✅ b higher"
    if better == "a":
        return "❌ b worse" if direction else "❌ b lower"
    return "~ no clear difference"


def _text_table(rows: list[list[str]], *, left: int) -> list[str]:
    """Columns aligned: the first `left` (groups, metric) and the verdict (last) to the
    left, the figures to the right."""
    last = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(last + 1)]
    return [
        "  ".join(
            c.ljust(widths[i]) if i < left or i == last else c.rjust(widths[i])
            for i, c in enumerate(row)
        ).rstrip()
        for row in rows
    ]
