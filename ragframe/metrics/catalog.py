"""The metric catalogue as data (`ragframe.catalog()`, `ragframe metrics`), and `metrics="all"`:
every metric whose inputs a frame has, with the ones left out named and why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from ragframe.inputs.columns import canonical_names
from ragframe.metrics import REGISTRY, GEval, Metric, RagasScore

ALL = "all"


def _summary_line(cls: type) -> str:
    """The first paragraph of a class's docstring: what the metric measures."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def _entry(name: str, cls: type[Metric], built: str | None = None) -> dict[str, Any]:
    info = cls.info
    return {
        "name": name,
        "class": cls.__name__,
        "description": _summary_line(cls),
        "direction": cls.direction,
        "required_inputs": list(cls.requires),
        "requests_per_row": info.requests_per_row,
        "uses_llm": cls.uses_llm,
        "uses_embeddings": cls.uses_embeddings,
        "formula": info.formula,
        "empty_input": info.empty_input,
        "source": info.source,
        "by_name": built is None,
        "how": built or f'"{name}"',
    }


def catalog() -> pl.DataFrame:
    """One row per metric: name, description, direction, required inputs, requests per row,
    whether it uses an LLM or embeddings, its formula, what empty input gives, its source in
    the seeds, and how to ask for it (by name, or built like G-Eval)."""
    entries = [_entry(name, cls) for name, cls in REGISTRY.items()]
    entries.append(_entry("g_eval", GEval, built='GEval(name=..., criteria="...")'))
    aggregate = {
        "name": RagasScore.name,
        "class": RagasScore.__name__,
        "description": _summary_line(RagasScore),
        "direction": RagasScore.direction,
        "required_inputs": [],
        "requests_per_row": "0 (combines other metrics' scores)",
        "uses_llm": False,
        "uses_embeddings": False,
        "formula": "harmonic mean of the metrics it combines",
        "empty_input": "null when a combined score is null",
        "source": "ragas",
        "by_name": True,
        "how": f'"{RagasScore.name}"',
    }
    return pl.DataFrame([*entries, aggregate], schema_overrides={"required_inputs": pl.List(str)})


def all_metrics(
    present: Iterable[str], columns: Mapping[str, str] | None = None
) -> tuple[list[Metric], dict[str, str]]:
    """Every metric asked for by name whose inputs the frame has (with the ragas and deepeval
    aliases and `columns=`), and {skipped metric: why}."""
    have = set(canonical_names(list(present), columns))
    chosen: list[Metric] = []
    skipped: dict[str, str] = {}
    for name, cls in REGISTRY.items():
        absent = [c for c in cls.requires if c not in have]
        if absent:
            skipped[name] = f"needs {', '.join(absent)}"
        else:
            chosen.append(cls())
    skipped["g_eval"] = "built, not named: GEval(criteria=...) with your criteria"
    return chosen, skipped


def is_all(metrics: Any) -> bool:
    """`metrics="all"` (or `--metrics all`)."""
    return isinstance(metrics, str) and metrics.strip().lower() == ALL
