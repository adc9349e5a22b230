"""The metric catalogue as data (`ragframe.catalog()`, `ragframe metrics`), and `metrics="all"`:
every metric whose inputs a frame has, with the ones left out named and why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from ragframe.inputs.columns import canonical_names
from ragframe.metrics import BUILT, REGISTRY, GEval, Metric, RagasScore

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
    whether it uses an LLM or embeddings, its formula, what empty input gives, its public
    source (the documentation or paper it follows), and how to ask for it (by name, or built
    like G-Eval)."""
    entries = [_entry(name, cls) for name, cls in REGISTRY.items()]
    entries.append(_entry("g_eval", GEval, built=BUILT["g_eval"]))
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
        "source": "ragas's aggregate score, the harmonic mean of its metrics "
        "(https://github.com/explodinggradients/ragas)",
        "by_name": True,
        "how": f'"{RagasScore.name}"',
    }
    return pl.DataFrame([*entries, aggregate], schema_overrides={"required_inputs": pl.List(str)})


class MeasuredAll(str):
    """`metrics="all"` with the inputs its rows were found to have (`have`: canonical names),
    for a path that sees only the schema when it chooses (the streamed one): the command line
    measures the log once, and every path it hands the run to chooses the same metrics. It is
    "all" wherever a run's options are read or recorded."""

    have: frozenset[str]

    def __new__(cls, have: Iterable[str]) -> MeasuredAll:
        made = super().__new__(cls, ALL)
        made.have = frozenset(have)
        return made

    def __reduce__(self) -> tuple[type[MeasuredAll], tuple[list[str]]]:
        """Pickled (a spec sent to another process) with what it measured, not its text."""
        return (MeasuredAll, (sorted(self.have),))


def all_metrics(
    present: Iterable[str],
    columns: Mapping[str, str] | None = None,
    have: Iterable[str] | None = None,
) -> tuple[list[Metric], dict[str, str]]:
    """Every metric asked for by name whose inputs the frame has (with the ragas and deepeval
    aliases and `columns=`), and {skipped metric: why}. `present`: the frame's columns;
    `have`: the inputs some row has a value for (`ragframe.engine.prepare.inputs_with_values`;
    None: not measured, a column is enough). A column no row fills is no input: a trace
    export's all-null ground_truth would fail every row of five metrics."""
    mapping = canonical_names(list(present), columns)
    filled = set(mapping) if have is None else set(have) & set(mapping)
    chosen: list[Metric] = []
    skipped: dict[str, str] = {}
    for name, cls in REGISTRY.items():
        absent = [c for c in cls.requires if c not in mapping]
        empty = [c for c in cls.requires if c in mapping and c not in filled]
        if absent:
            skipped[name] = f"needs {', '.join(absent)}" + (
                f"; no row has a value for {', '.join(empty)}" if empty else ""
            )
        elif empty:
            skipped[name] = f"needs {', '.join(empty)}, which no row has a value for"
        else:
            chosen.append(cls())
    skipped["g_eval"] = "built, not named: GEval(criteria=...) with your criteria"
    return chosen, skipped


def left_out_line(skipped: Mapping[str, str], lead: str = "--metrics all left out") -> str:
    """`metrics="all"`'s metrics left out (`all_metrics`' second half), grouped by why, on
    one line (`ragframe score --metrics all` prints it before anything is sent; a run's
    summary ends with it, led by "skipped")."""
    by_reason: dict[str, list[str]] = {}
    for name, why in skipped.items():
        by_reason.setdefault(why, []).append(name)
    parts = [f"{', '.join(names)} ({why})" for why, names in by_reason.items()]
    return f"{lead}: {'; '.join(parts)}"


def alternatives(name: str, have: Iterable[str]) -> list[str]:
    """Metrics of the same family (`context_precision` ->
    `context_precision_without_reference`) whose every input is in `have`: what to score
    instead of a metric whose inputs the rows lack."""
    have = set(have)
    return [
        other
        for other, cls in REGISTRY.items()
        if other != name and other.startswith(name) and set(cls.requires) <= have
    ]


def is_all(metrics: Any) -> bool:
    """`metrics="all"` (or `--metrics all`)."""
    return isinstance(metrics, str) and metrics.strip().lower() == ALL
