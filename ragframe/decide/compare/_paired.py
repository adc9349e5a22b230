"""The paired design: both sides joined on the key, a table of differences per cell, the keys
found on one side only, and the pairs that changed most."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from ragframe.decide.compare._cells import TIE, cells_table, paired_cell
from ragframe.decide.compare._sides import Side, key_casts, require
from ragframe.decide.summarize import checked_scores, score_values
from ragframe.errors import ConfigError, InputError


def compare_paired(
    a: Side,
    b: Side,
    keys: list[str],
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
    worst_b: Mapping[str, float] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The paired table, the unmatched keys, and the joined scores (for `most_changed`).
    `worst_b`: per metric, the score a matched row of b that failed to score counts as (the
    regression check's worst score, as gates count one); without it such a pair is left out."""
    require(keys, (a, b), "on=")
    _require_groups(a, b, groups)
    joined = _joined(a, b, keys, groups, names)
    unmatched = _unmatched(joined, keys, groups)
    cell_groups = groups or ["\0all"]
    cells = (
        joined.with_columns(pl.lit(True).alias("\0all"))
        .group_by(cell_groups)
        .agg(_cell_aggregates(names, worst_b or {}))
        .sort(cell_groups, nulls_last=True)
    )
    table = cells_table(cells, groups, names, directions, level, seed, paired_cell, _counts)
    return table, unmatched, joined


def _counts(cell: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """A paired cell's keys matched and on one side only, and the metric's failed rows."""
    return {
        "matched": cell["\0matched"],
        "only_a": cell["\0only_a"],
        "only_b": cell["\0only_b"],
        "failed_a": cell[f"{metric}\0failed_a"],
        "failed_b": cell[f"{metric}\0failed_b"],
    }


def _require_groups(a: Side, b: Side, groups: list[str]) -> None:
    """Every group column on one side at least (keys only b has take b's groups)."""
    for g in groups:
        if g not in a.schema and g not in b.schema:
            raise ConfigError(
                f"by= names {g!r}, which neither {a.where} nor {b.where} has; a's columns "
                f"are {a.schema.names()}"
            )


def _joined(a: Side, b: Side, keys: list[str], groups: list[str], names: list[str]) -> pl.DataFrame:
    """Both sides' keyed scores in one frame (a full join on the keys), flagged by side."""
    casts = key_casts(a, b, keys)
    frames = [_keyed_scores(s, tag, keys, groups, names, casts) for s, tag in ((a, "a"), (b, "b"))]
    joined = frames[0].join(frames[1], on=keys, how="full", coalesce=True)
    return joined.with_columns(
        pl.col("\0in_a").fill_null(False),
        pl.col("\0in_b").fill_null(False),
        *(_coalesced(g, joined.columns) for g in groups),
    )


def _cell_aggregates(names: list[str], worst_b: Mapping[str, float]) -> list[pl.Expr]:
    """Per cell: the keys matched or on one side only, and per metric the paired scores and
    the matched rows that failed to score on each side (b's counted as `worst_b[metric]` in
    the pairs, when given; still counted as failed)."""
    in_a, in_b = pl.col("\0in_a"), pl.col("\0in_b")
    matched = in_a & in_b
    aggs: list[pl.Expr] = [
        matched.sum().alias("\0matched"),
        (in_a & ~in_b).sum().alias("\0only_a"),
        (in_b & ~in_a).sum().alias("\0only_b"),
    ]
    for m in names:
        sa, raw_b = pl.col(f"{m}\0a"), pl.col(f"{m}\0b")
        sb = raw_b.fill_null(worst_b[m]) if m in worst_b else raw_b
        pair = matched & sa.is_not_null() & sb.is_not_null()
        aggs += [
            sa.filter(pair).alias(f"{m}\0xa"),
            sb.filter(pair).alias(f"{m}\0xb"),
            (matched & sa.is_null()).sum().alias(f"{m}\0failed_a"),
            (matched & raw_b.is_null()).sum().alias(f"{m}\0failed_b"),
        ]
    return aggs


def _keyed_scores(
    side: Side,
    tag: str,
    keys: list[str],
    groups: list[str],
    names: list[str],
    casts: Mapping[str, pl.DataType],
) -> pl.DataFrame:
    """One side's keys, groups and scores, checked: no null key, no duplicate key, no score
    outside [0, 1] (`checked_scores`, in the same read)."""
    exprs = [
        *(pl.col(k).cast(casts[k]) if k in casts else pl.col(k) for k in keys),
        *(pl.col(g).alias(f"{g}\0{tag}") for g in groups if g in side.schema),
        *(score_values(m).alias(f"{m}\0{tag}") for m in names),
        pl.lit(True).alias(f"\0in_{tag}"),
    ]
    frame = checked_scores(side.lazy, exprs, names, side.where).with_row_index(f"\0row_{tag}")
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


def most_changed(
    joined: pl.DataFrame,
    a: Side,
    b: Side,
    keys: list[str],
    groups: list[str],
    names: list[str],
    limit: int,
) -> dict[str, pl.DataFrame]:
    """Per metric, the `limit` pairs with the largest |b - a| (ties: a's row order), with
    both verdict structs, read for those rows only."""
    out: dict[str, pl.DataFrame] = {}
    casts = key_casts(a, b, keys)
    for m in names:
        diff = pl.col(f"{m}\0b") - pl.col(f"{m}\0a")
        top = (
            joined.filter(diff.abs() > TIE)
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
