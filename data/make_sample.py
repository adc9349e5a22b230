"""Cut data/sample.parquet and data/first_run.parquet from the ExpertQA RAG file; rerun to
reproduce both exactly.

    python data/make_sample.py [SOURCE] [DEST]

SOURCE defaults to ../shared/data/expertqa_rag.parquet from the project root (one row per
(question, system) of ExpertQA, Malaviya et al. 2024, MIT), DEST to sample.parquet next to this
script (first_run.parquet is written beside DEST). Only retrieve-and-read rows with real passage
text and at most 4 passages are kept, 10 judged faithful and 10 not, chosen by a SHA-256 of their
id (stable across Polars versions, unlike a seeded sample). Passages are cut to at most about
1200 characters, at a word boundary, so that the tiny embedded judge scores a row in seconds
(ExpertQA's passages are at most 1000 characters, so today no passage is actually cut and the
expert labels hold as they are).

first_run.parquet is the README's first command: the same cut, but 5 rows per label, each with
2 to 4 passages and at most 3,000 characters of passages and answer together. The embedded
135M judge on a CPU spends its time on prompt tokens, about 3,200 a row here, so its first run
costs what its row count costs: 10 rows still show every core metric working, and two passages
or more give context precision something to rank.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import polars as pl

SOURCE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "expertqa_rag.parquet"
DEST = Path(__file__).with_name("sample.parquet")
FIRST_RUN = "first_run.parquet"
PER_LABEL = 10
MAX_CONTEXTS = 4
#: first_run.parquet: rows per label, fewest passages, most characters of passages and answer.
FIRST_RUN_PER_LABEL = 5
FIRST_RUN_MIN_CONTEXTS = 2
FIRST_RUN_MAX_CHARS = 3000
MAX_CONTEXT_CHARS = 1200
COLUMNS = ["id", "question", "answer", "contexts", "ground_truth", "faithful", "human_label"]


def trim(text: str, limit: int = MAX_CONTEXT_CHARS) -> str:
    """Cut `text` to at most `limit` characters, at the last whitespace before the limit."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip()


def rank(row_id: str) -> str:
    return hashlib.sha256(row_id.encode("utf-8")).hexdigest()


def make_sample(
    source: Path = SOURCE,
    per_label: int = PER_LABEL,
    min_contexts: int = 1,
    max_chars: int | None = None,
) -> pl.DataFrame:
    """`per_label` rows judged faithful and as many not, with `min_contexts` to MAX_CONTEXTS
    passages and, when `max_chars` is given, at most that many characters of passages and
    answer together."""
    chars = (
        pl.col("contexts").list.eval(pl.element().str.len_chars()).list.sum()
        + pl.col("answer").str.len_chars()
    )
    frame = (
        pl.read_parquet(source)
        .filter(
            pl.col("system_type") == "retrieve_and_read",
            pl.col("has_context_text"),
            pl.col("faithful").is_not_null(),
            # Rows with more passages are left out rather than cut, so that every passage the
            # source records for a row (the evidence the experts judged against) is still there.
            pl.col("contexts").list.len().is_between(min_contexts, MAX_CONTEXTS),
            pl.col("ground_truth").is_not_null(),
            pl.lit(True) if max_chars is None else chars <= max_chars,
        )
        .with_columns(pl.col("id").map_elements(rank, return_dtype=pl.String).alias("_rank"))
        .sort("_rank")
    )
    picked = pl.concat(
        [frame.filter(pl.col("faithful") == label).head(per_label) for label in (True, False)]
    ).sort("_rank")
    contexts = [
        [trim(c) for c in row if c and c.strip()][:MAX_CONTEXTS]
        for row in picked["contexts"].to_list()
    ]
    return picked.with_columns(pl.Series("contexts", contexts, dtype=pl.List(pl.String))).select(
        COLUMNS
    )


def main(argv: list[str]) -> None:
    source = Path(argv[1]) if len(argv) > 1 else SOURCE
    dest = Path(argv[2]) if len(argv) > 2 else DEST
    first_run = make_sample(
        source, FIRST_RUN_PER_LABEL, FIRST_RUN_MIN_CONTEXTS, FIRST_RUN_MAX_CHARS
    )
    for frame, path in ((make_sample(source), dest), (first_run, dest.with_name(FIRST_RUN))):
        frame.write_parquet(path, compression="zstd", statistics=False)
        print(f"wrote {frame.height} rows to {path}")


if __name__ == "__main__":
    main(sys.argv)
