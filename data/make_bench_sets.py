"""Cut the judge benchmark's four sets from the shared human-labelled files; rerun to reproduce.

    python data/make_bench_sets.py [SOURCE_DIR] [DEST_DIR]

SOURCE_DIR defaults to ../shared/data from the project root, DEST_DIR to ragframe/data/bench
(inside the package, so `ragframe judge-bench` finds the sets once installed). Rows are chosen
by the SHA-256 of their id (stable across Polars versions, unlike a seeded sample) and written
in an order where any prefix is a fair sample (`--limit N` takes the first N rows): see
`data/README.md` for what each set holds and its licence, which this script copies next to it.

- expertqa.parquet: every ExpertQA retrieve-and-read row with passage text and a `faithful`
  label (146), with the experts' claims (text and support label; evidence dropped).
- begin.parquet: 150 BEGIN responses judged fully attributable and 150 not (Generic left
  out), alternating true / false.
- halueval.parquet: 150 HaluEval QA questions, each with its right and its hallucinated
  answer (300 rows; labels from how the data was built, not from people), the two answers of
  a question next to each other in an order set by the hash.
- ragchecker.parquet: all 280 RAGChecker answer pairs, one row per pair, both annotators'
  correctness preferences and their sum (`correctness_pref`, > 0: answer_2 preferred).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import polars as pl

SOURCE = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
DEST = Path(__file__).resolve().parent.parent / "ragframe" / "data" / "bench"
BEGIN_PER_LABEL = 150
HALUEVAL_QUESTIONS = 150
LICENSES = {
    "LICENSE-expertqa.txt": "expertqa-MIT.txt",
    "LICENSE-begin.txt": "begin-CC-BY-4.0.txt",
    "LICENSE-halueval.txt": "halueval-MIT.txt",
    "LICENSE-ragchecker.txt": "ragchecker-Apache-2.0.txt",
}


def _rank(key: pl.Expr) -> pl.Expr:
    """SHA-256 of the key, hex: the order rows are taken in."""
    return key.map_elements(
        lambda text: hashlib.sha256(text.encode("utf-8")).hexdigest(), return_dtype=pl.String
    )


def expertqa(source: Path) -> pl.DataFrame:
    claims = pl.col("claims").list.eval(
        pl.struct(
            pl.element().struct.field("claim").str.strip_chars(),
            pl.element().struct.field("support"),
        )
    )
    return (
        pl.read_parquet(source / "expertqa_rag.parquet")
        .filter(
            pl.col("system_type") == "retrieve_and_read",
            pl.col("has_context_text"),
            pl.col("faithful").is_not_null(),
        )
        .sort(_rank(pl.col("id")))
        .select(
            "id",
            "question",
            "answer",
            pl.col("contexts").list.eval(pl.element().str.strip_chars()),
            "faithful",
            "frac_cited_claims_supported",
            claims.alias("expert_claims"),
            "field",
        )
    )


def _alternate(frame: pl.DataFrame, label: str, per_label: int) -> pl.DataFrame:
    """The first `per_label` rows of each label by hash, interleaved true, false, true, ..."""
    parts = [
        frame.filter(pl.col(label) == value)
        .sort("\0rank")
        .head(per_label)
        .with_row_index("\0slot")
        .with_columns(pl.lit(0 if value else 1).alias("\0side"))
        for value in (True, False)
    ]
    return pl.concat(parts).sort("\0slot", "\0side").drop("\0slot", "\0side", "\0rank")


def begin(source: Path) -> pl.DataFrame:
    frame = (
        pl.read_parquet(source / "begin_attribution.parquet")
        .filter(pl.col("faithful").is_not_null())
        .with_columns(_rank(pl.col("id")).alias("\0rank"))
    )
    return _alternate(frame, "faithful", BEGIN_PER_LABEL).select(
        "id", "question", "answer", "contexts", "faithful", "human_label", "data_source"
    )


def halueval(source: Path) -> pl.DataFrame:
    question = pl.col("id").str.replace(r"-(right|halluc)$", "")
    frame = pl.read_parquet(source / "halueval_qa_sample.parquet").with_columns(
        question.alias("\0question")
    )
    chosen = (
        frame.select(pl.col("\0question").unique())
        .sort(_rank(pl.col("\0question")))
        .head(HALUEVAL_QUESTIONS)
        .with_row_index("\0slot")
    )
    # Which answer of a question comes first is also set by the hash (of the row's id).
    return (
        frame.join(chosen, on="\0question")
        .sort("\0slot", _rank(pl.col("id")))
        .select("id", "question", "answer", "contexts", "ground_truth", "faithful", "human_label")
    )


def ragchecker(source: Path) -> pl.DataFrame:
    frame = pl.read_parquet(source / "ragchecker_human_pairwise.parquet")
    prefs = frame.pivot(on="annotation_index", index="instance_id", values="correctness_pref")
    prefs = prefs.select(
        "instance_id",
        pl.col("0").alias("correctness_pref_1"),
        pl.col("1").alias("correctness_pref_2"),
    )
    pairs = frame.filter(pl.col("annotation_index") == 0).join(prefs, on="instance_id")
    return pairs.sort(_rank(pl.col("instance_id").cast(pl.String))).select(
        pl.format("ragchecker-{}", pl.col("instance_id").cast(pl.String).str.zfill(3)).alias("id"),
        "domain",
        "question",
        "ground_truth",
        "answer_1",
        "system_1",
        "answer_2",
        "system_2",
        (pl.col("correctness_pref_1") + pl.col("correctness_pref_2")).alias("correctness_pref"),
        "correctness_pref_1",
        "correctness_pref_2",
    )


SETS = {"expertqa": expertqa, "begin": begin, "halueval": halueval, "ragchecker": ragchecker}


def main(argv: list[str]) -> None:
    source = Path(argv[1]) if len(argv) > 1 else SOURCE
    dest = Path(argv[2]) if len(argv) > 2 else DEST
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, cut in SETS.items():
        frame = cut(source)
        path = dest / f"{name}.parquet"
        frame.write_parquet(path, compression="zstd", compression_level=19, statistics=False)
        size = path.stat().st_size
        total += size
        print(f"{path}: {frame.height} rows, {size / 1024:.0f} KiB")
    for ours, theirs in LICENSES.items():
        shutil.copyfile(source / "licenses" / theirs, dest / ours)
        total += (dest / ours).stat().st_size
    print(f"total with licences: {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main(sys.argv)
