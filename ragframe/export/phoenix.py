"""Phoenix span annotations: a Parquet frame of `span_id`, `annotation_name`,
`annotator_kind`, `score`, `label`, `explanation`, and `trace_id` for joins, which Phoenix's
current client (`arize-phoenix-client`) logs with

    from phoenix.client import Client
    from ragframe.export.phoenix import annotations_frame

    Client().spans.log_span_annotations_dataframe(dataframe=annotations_frame("evals.parquet"))

`annotations_frame` is needed under pandas 3: `pd.read_parquet` gives text columns the `str`
dtype, whose missing value is NaN; the client keeps a label or explanation when it is truthy
(`bool(nan)` is True) and sends `str(nan)`, so every empty label would be stored as the string
"nan". The frame it returns holds None for every null, which the client sends as null
(`bool(None)` is false under any pandas; tested with pandas 3.1). Phoenix 20 has no
`px.Client().log_evaluations`: this is the route.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.io import AtomicParquetWriter

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["annotations_frame", "frame", "write"]


def frame(evaluations: pl.DataFrame) -> pl.DataFrame:
    """The evaluations in Phoenix's column names."""
    return evaluations.select(
        "span_id",
        pl.col("name").alias("annotation_name"),
        pl.lit("LLM").alias("annotator_kind"),
        "score",
        "label",
        "explanation",
        "trace_id",
    )


def write(evaluations: pl.DataFrame, path: Path) -> None:
    table = frame(evaluations).to_arrow()
    writer = AtomicParquetWriter(path, table.schema, {"export": "phoenix"}, overwrite=True)
    writer.write(frame(evaluations))
    writer.close()


def annotations_frame(evaluations: str | Path | pl.DataFrame) -> pd.DataFrame:
    """The evaluations (a file `ragframe export --to phoenix` wrote, or its frame) as the
    pandas frame Phoenix's `Client().spans.log_span_annotations_dataframe(dataframe=...)`
    logs as written: every column of dtype object, None where a value is null (see the module
    docstring for why a frame read by pandas 3 would log "nan")."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas comes with Phoenix's client
        raise InputError(
            "annotations_frame needs pandas (Phoenix's client needs it too): pip install pandas"
        ) from exc
    table = pl.read_parquet(evaluations) if isinstance(evaluations, (str, Path)) else evaluations
    return pd.DataFrame(
        {name: pd.Series(table[name].to_list(), dtype=object) for name in table.columns}
    )
