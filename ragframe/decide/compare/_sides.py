"""The two runs as `Side`s: loaded lazily, their score columns and directions found, their
provenance (judge, prompts, configuration) compared, their key types reconciled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.decide.summarize import load_scored, score_columns
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import StorageOptions


@dataclass(frozen=True)
class Side:
    lazy: pl.LazyFrame
    schema: pl.Schema
    meta: dict[str, Any]
    where: str  # what to call it in a message: "a ('runs/a.parquet')"
    is_file: bool


def check_options(level: float, seed: int, changed: int) -> None:
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, not {seed!r}")
    if isinstance(changed, bool) or not isinstance(changed, int) or changed < 0:
        raise ConfigError(f"changed must be a non-negative integer, not {changed!r}")


def name_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def load_side(data: Any, label: str, storage_options: StorageOptions | None = None) -> Side:
    """One side as a LazyFrame (a Parquet file is scanned: only the columns used are read),
    with the file's ragframe metadata ({} for a frame or an old file), read as every decision
    reads a scored log (`ragframe.decide.summarize.load_scored`: a pandas frame's named index
    kept as columns, a URL with `storage_options`)."""
    is_file = isinstance(data, str | Path)
    lazy, meta, source = load_scored(data, storage_options=storage_options)
    where = f"{label} ({source})"
    try:
        schema = lazy.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    return Side(lazy, schema, meta, where, is_file)


def require(columns: Sequence[str], sides: Sequence[Side], option: str) -> None:
    """Every column on every side, or a ConfigError naming the column and the file."""
    for side in sides:
        for name in columns:
            if name not in side.schema:
                raise ConfigError(
                    f"{option} names {name!r}, which {side.where} lacks; its columns are "
                    f"{side.schema.names()}"
                )


def metric_names(
    a: Side, b: Side, metrics: Sequence[str] | None, taken: list[str], warnings: list[str]
) -> list[str]:
    """The score columns to compare: as given (checked on both sides), else those both
    sides have (their metadata's, else detected), with a warning for those only one has."""
    if isinstance(metrics, str):
        metrics = [metrics]
    if metrics is not None:
        names = name_list(metrics)
        require(names, (a, b), "metrics=")
    else:
        found_a = score_columns(a.schema, a.meta)
        found_b = score_columns(b.schema, b.meta)
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


def metric_directions(
    names: list[str], a: Side, b: Side, warnings: list[str]
) -> dict[str, str | None]:
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


def provenance_warnings(a: Side, b: Side, names: list[str]) -> list[str]:
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


def key_casts(a: Side, b: Side, keys: list[str]) -> dict[str, pl.DataType]:
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
