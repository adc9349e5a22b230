"""The corpus reader and the splitter (issue 30's first step): every source gives the same
documents, every mistake is one ConfigError naming the thing, and every chunk is an exact,
bounded span of its document that never crosses a heading."""

from __future__ import annotations

import doctest
import math
from pathlib import Path

import polars as pl
import pytest

from ragframe.errors import ConfigError
from ragframe.inputs import corpus
from ragframe.inputs.corpus import estimate_tokens, read_corpus, split_documents

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample.parquet"

MARKDOWN = """# Intro

Ragframe scores answers. It reads logs in bulk and writes typed scores back.

## Setup

Install the package with pip. Then point it at an OpenAI-compatible endpoint.
The judge runs every metric over one pool of requests.

```bash
# not a heading: a shell comment in a fence
ragframe score logs.parquet
```

# Usage

Call evaluate with a frame. The scores come back as columns beside the inputs.
"""


@pytest.fixture(scope="module")
def expertqa() -> pl.DataFrame:
    """ExpertQA's retrieved contexts, each row's joined by blank lines: a real corpus."""
    rows = pl.read_parquet(SAMPLE).select(
        "id", text=pl.col("contexts").list.join("\n\n"), human_label="human_label"
    )
    return read_corpus(rows, id_column="id")


def check_spans(chunks: pl.DataFrame, docs: pl.DataFrame) -> None:
    """Every chunk is exactly doc[start:end], untrimmed, with its token estimate."""
    texts = dict(docs.select("doc_id", "text").iter_rows())
    for doc_id, start, end, text, tokens in chunks.select(
        "doc_id", "start", "end", "text", "tokens"
    ).iter_rows():
        assert texts[doc_id][start:end] == text
        assert text and text == text.strip()
        assert tokens == math.ceil(len(text) / 4) == estimate_tokens(text)


# ------------------------------------------------------------------------------ sources


def test_every_source_gives_the_same_chunks(tmp_path: Path) -> None:
    texts = [MARKDOWN, "Plain text. Two sentences.\n\nAnd a paragraph.", "Café ünïcode 文字。"]
    names = ["a.md", "sub/b.txt", "sub/deeper/c.md"]
    frame = pl.DataFrame({"name": names, "text": texts})
    frame.write_parquet(tmp_path / "c.parquet")
    frame.write_ndjson(tmp_path / "c.jsonl")
    frame.write_ndjson(tmp_path / "c.ndjson")
    frame.write_csv(tmp_path / "c.csv")
    folder = tmp_path / "docs"
    for name, text in zip(names, texts, strict=True):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        # a byte-order mark (Windows editors write one) is not part of the text
        (folder / name).write_text(text, encoding="utf-8-sig" if name == "a.md" else "utf-8")
    (folder / ".hidden.md").write_text("skipped")
    (folder / "notes.pdf").write_bytes(b"%PDF")

    options = {"chunk_tokens": 24, "overlap_tokens": 6}
    expected = split_documents(read_corpus(frame, id_column="name"), **options)
    assert expected.height > 5
    sources = [frame.lazy(), *(tmp_path / f"c.{s}" for s in ("parquet", "jsonl", "ndjson", "csv"))]
    for source in sources:
        got = split_documents(read_corpus(source, id_column="name"), **options)
        assert got.equals(expected), source
    from_folder = read_corpus(folder)
    assert from_folder["doc_id"].to_list() == names  # relative POSIX paths, sorted
    assert split_documents(from_folder, **options).equals(expected)
    one_file = read_corpus(folder / "a.md")
    assert one_file.rows() == [("a.md", MARKDOWN)]


def test_table_without_id_numbers_rows_and_carries_metadata(expertqa: pl.DataFrame) -> None:
    docs = read_corpus(
        pl.DataFrame({"body": ["one two.", "three."], "lang": ["en", "fr"]}), text_column="body"
    )
    assert docs.columns == ["doc_id", "text", "lang"]
    assert docs["doc_id"].to_list() == ["0", "1"]

    chunks = split_documents(expertqa, chunk_tokens=64, overlap_tokens=8)
    assert chunks.columns == [*corpus.CHUNK_COLUMNS, "human_label"]
    labels = dict(expertqa.select("doc_id", "human_label").iter_rows())
    assert chunks["doc_id"].n_unique() == expertqa.height
    for doc_id, label in chunks.select("doc_id", "human_label").iter_rows():
        assert label == labels[doc_id]


def test_blank_and_null_texts_are_documents_without_chunks() -> None:
    docs = read_corpus(pl.DataFrame({"text": [None, "  \n\n\t ", "Real text here.", ""]}))
    assert docs.height == 4
    chunks = split_documents(docs)
    assert chunks["doc_id"].to_list() == ["2"]
    assert chunks["text"].to_list() == ["Real text here."]  # shorter than min: one chunk
    empty = split_documents(docs.filter(pl.col("doc_id") != "2"))
    assert empty.height == 0 and empty.columns == list(corpus.CHUNK_COLUMNS)


# ------------------------------------------------------------------------------ errors


def test_missing_text_column_names_the_columns_and_suggests_one(tmp_path: Path) -> None:
    pl.DataFrame({"content": ["a"]}).write_csv(tmp_path / "docs.csv")
    with pytest.raises(ConfigError, match=r"'.*docs\.csv' has no text column.*'content'"):
        read_corpus(tmp_path / "docs.csv")
    with pytest.raises(ConfigError) as caught:
        read_corpus(pl.DataFrame({"Txt": ["a"], "source": ["x"]}))
    message = str(caught.value)
    assert "'text'" in message and "'Txt'" in message and "'source'" in message
    assert "did you mean 'Txt'" in message and "text_column=" in message
    assert "--text-column" in message
    with pytest.raises(ConfigError, match="did you mean 'page_content'"):
        read_corpus(pl.DataFrame({"page_content": ["a"]}))
    with pytest.raises(ConfigError, match=r"lists of strings.*list\.join"):
        read_corpus(pl.read_parquet(SAMPLE), text_column="contexts")


def test_id_column_errors_name_the_problem() -> None:
    frame = pl.DataFrame({"text": ["a", "b", "c"], "key": ["x", "y", "y"], "n": [1, None, 2]})
    with pytest.raises(ConfigError, match=r"no id column 'kee'.*did you mean 'key'"):
        read_corpus(frame, id_column="kee")
    with pytest.raises(ConfigError, match="repeats the id 'y'"):
        read_corpus(frame, id_column="key")
    with pytest.raises(ConfigError, match=r"'n' is null in 1 rows.*row 1"):
        read_corpus(frame, id_column="n")
    with pytest.raises(ConfigError, match="id_column='doc_id'"):
        read_corpus(pl.DataFrame({"text": ["a"], "doc_id": ["d"]}))
    with pytest.raises(ConfigError, match="'start' would clash"):
        read_corpus(pl.DataFrame({"text": ["a"], "start": [0]}))
    numbered = read_corpus(frame.filter(pl.col("n").is_not_null()), id_column="n")
    assert numbered.columns == ["doc_id", "text", "key"]  # the id column becomes doc_id
    assert numbered["doc_id"].to_list() == ["1", "2"]


def test_folder_and_file_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'.*nowhere' does not exist"):
        read_corpus(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"'.*empty' holds no files"):
        read_corpus(empty)
    (empty / "a.pdf").write_bytes(b"%PDF")
    with pytest.raises(ConfigError, match=r"holds only other files \(1 \.pdf\).*\.txt or \.md"):
        read_corpus(empty)
    latin = tmp_path / "latin"
    (latin / "sub").mkdir(parents=True)
    (latin / "sub" / "old.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"'.*sub/old\.txt' is not UTF-8"):
        read_corpus(latin)
    (tmp_path / "c.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"not a '\.json' file"):
        read_corpus(tmp_path / "c.json")
    with pytest.raises(ConfigError, match="no rows"):
        read_corpus(pl.DataFrame(schema={"text": pl.String}))


def test_size_options_are_checked() -> None:
    docs = read_corpus(pl.DataFrame({"text": ["a b c"]}))
    with pytest.raises(ConfigError, match="overlap_tokens"):
        split_documents(docs, chunk_tokens=10, overlap_tokens=10)
    with pytest.raises(ConfigError, match="chunk_tokens must be at least 1"):
        split_documents(docs, chunk_tokens=0)
    with pytest.raises(ConfigError, match="min_chunk_tokens"):
        split_documents(docs, chunk_tokens=10, overlap_tokens=0, min_chunk_tokens=11)
    with pytest.raises(ConfigError, match="whole number"):
        split_documents(docs, chunk_tokens=True)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ chunks


@pytest.mark.parametrize(("size", "overlap"), [(384, 48), (64, 16), (32, 0)])
def test_expertqa_chunks_are_exact_bounded_spans(
    expertqa: pl.DataFrame, size: int, overlap: int
) -> None:
    minimum = 8
    chunks = split_documents(
        expertqa, chunk_tokens=size, overlap_tokens=overlap, min_chunk_tokens=minimum
    )
    check_spans(chunks, expertqa)
    assert chunks.height > expertqa.height
    for text, tokens in chunks.select("text", "tokens").iter_rows():
        # over the target only by a merged short tail, or as one word that cannot be cut
        assert tokens < size + minimum or len(text.split()) == 1, (tokens, text[:80])
    strict = split_documents(
        expertqa, chunk_tokens=size, overlap_tokens=overlap, min_chunk_tokens=0
    )
    for text, tokens in strict.select("text", "tokens").iter_rows():
        assert tokens <= size or len(text.split()) == 1  # no tail merged: the target holds
    # the chunks of a document cover all its text, in order
    texts = dict(expertqa.select("doc_id", "text").iter_rows())
    for (doc_id,), group in chunks.group_by("doc_id", maintain_order=True):
        starts, ends = group["start"].to_list(), group["end"].to_list()
        assert group["chunk_index"].to_list() == list(range(group.height))
        assert starts == sorted(starts) and ends == sorted(ends)
        doc = texts[doc_id]
        for start, end in zip(starts[1:], ends[:-1], strict=True):
            assert not doc[end:start].strip()  # no text falls between two chunks
        assert starts[0] == len(doc) - len(doc.lstrip())
        assert ends[-1] == len(doc.rstrip())


def test_expertqa_chunks_fill_up_when_not_cut_at_a_heading(expertqa: pl.DataFrame) -> None:
    """Packing is greedy, and a chunk is cut at a paragraph only once half full: with
    sentences shorter than half a chunk, all but each document's last chunk are half full."""
    chunks = split_documents(expertqa, chunk_tokens=384, overlap_tokens=0, min_chunk_tokens=0)
    last = pl.col("chunk_index") == pl.col("chunk_index").max().over("doc_id")
    inner = chunks.filter(~last)
    assert inner.height > 10
    assert inner["tokens"].min() >= 192


def test_overlap_is_present_and_bounded(expertqa: pl.DataFrame) -> None:
    overlap = 48
    chunks = split_documents(expertqa, chunk_tokens=384, overlap_tokens=overlap)
    check_spans(chunks, expertqa)
    pairs = chunks.with_columns(
        prev_end=pl.col("end").shift().over("doc_id"),
        prev_start=pl.col("start").shift().over("doc_id"),
    ).filter(pl.col("prev_end").is_not_null())
    shared = (pairs["prev_end"].cast(pl.Int64) - pairs["start"].cast(pl.Int64)).to_list()
    assert all(math.ceil(s / 4) <= overlap for s in shared if s > 0)
    assert sum(s > 0 for s in shared) > 0.7 * len(shared)  # overlap is whole sentences
    assert all(s > pairs["prev_start"][i] for i, s in enumerate(pairs["start"]))  # progress
    plain = split_documents(expertqa, chunk_tokens=64, overlap_tokens=0)
    ends = plain.with_columns(prev_end=pl.col("end").shift().over("doc_id"))
    assert (ends["start"] >= ends["prev_end"]).fill_null(True).all()


def test_headings_are_never_crossed_and_give_the_path() -> None:
    docs = read_corpus(pl.DataFrame({"text": [MARKDOWN]}))
    chunks = split_documents(docs, chunk_tokens=16, overlap_tokens=4, min_chunk_tokens=4)
    check_spans(chunks, docs)
    setup, usage = MARKDOWN.index("## Setup"), MARKDOWN.index("# Usage")
    sections = [(0, setup, "Intro"), (setup, usage, "Intro > Setup"), (usage, 10**6, "Usage")]
    seen = set()
    for start, end, heading in chunks.select("start", "end", "heading").iter_rows():
        owner = [name for lo, hi, name in sections if lo <= start < hi]
        assert owner == [heading]
        assert end <= next(hi for lo, hi, _ in sections if lo <= start < hi)
        seen.add(heading)
    assert seen == {"Intro", "Intro > Setup", "Usage"}
    assert chunks.filter(pl.col("text").str.contains("# not a heading"))["heading"].to_list()
    assert set(chunks["heading"]) == seen  # the fenced '# not a heading' opened no section
    big = split_documents(docs, chunk_tokens=500)
    assert big.height == 3  # one chunk per section when each fits


def test_text_before_the_first_heading_has_no_heading() -> None:
    docs = read_corpus(pl.DataFrame({"text": ["Preface words.\n\n# Title\n\nBody text."]}))
    chunks = split_documents(docs, min_chunk_tokens=0)
    assert chunks.select("text", "heading").rows() == [
        ("Preface words.", None),
        ("# Title\n\nBody text.", "Title"),
    ]


def test_heading_only_sections_give_no_chunk_of_their_own() -> None:
    docs = read_corpus(pl.DataFrame({"text": ["# Guide\n\n## Install\n\nRun pip.", "# Alone"]}))
    chunks = split_documents(docs, min_chunk_tokens=0)
    assert chunks.select("doc_id", "text", "heading").rows() == [
        ("0", "## Install\n\nRun pip.", "Guide > Install"),
        ("1", "# Alone", "Alone"),
    ]


def test_a_word_longer_than_a_chunk_is_a_chunk_of_its_own() -> None:
    blob = "x" * 200
    text = f"See this. {blob} and then more words follow here."
    docs = read_corpus(pl.DataFrame({"text": [text]}))
    chunks = split_documents(docs, chunk_tokens=10, overlap_tokens=2, min_chunk_tokens=0)
    check_spans(chunks, docs)
    assert blob in chunks["text"].to_list()
    assert chunks.filter(pl.col("tokens") > 10)["text"].to_list() == [blob]


def test_a_short_tail_merges_into_the_previous_chunk() -> None:
    text = "Alpha beta gamma delta. Epsilon zeta eta theta. Iota."
    docs = read_corpus(pl.DataFrame({"text": [text]}))
    kept = split_documents(docs, chunk_tokens=12, overlap_tokens=0, min_chunk_tokens=0)
    assert kept["text"].to_list()[-1] == "Iota."
    merged = split_documents(docs, chunk_tokens=12, overlap_tokens=0, min_chunk_tokens=3)
    assert merged["text"].to_list()[-1].endswith("theta. Iota.")
    assert merged.height == kept.height - 1
    check_spans(merged, docs)


def test_paragraph_breaks_are_preferred_to_sentence_breaks() -> None:
    first = "One two three four five six seven. Eight nine ten eleven twelve."
    text = f"{first}\n\nThirteen fourteen. Fifteen sixteen seventeen eighteen nineteen twenty."
    docs = read_corpus(pl.DataFrame({"text": [text]}))
    chunks = split_documents(docs, chunk_tokens=30, overlap_tokens=0, min_chunk_tokens=0)
    assert chunks["text"][0] == first  # the paragraph, though the next sentence would fit


def test_ids_are_stable_and_local_to_their_document() -> None:
    texts = {"a": MARKDOWN, "b": "First doc b sentence. " * 40, "c": "Other. " * 30}
    frame = pl.DataFrame({"name": list(texts), "text": list(texts.values())})
    options = {"chunk_tokens": 20, "overlap_tokens": 5}
    one = split_documents(read_corpus(frame, id_column="name"), **options)
    two = split_documents(read_corpus(frame, id_column="name"), **options)
    assert one.equals(two)
    assert one["chunk_id"].n_unique() == one.height  # repeated texts get -2, -3 ...
    assert any(i.endswith("-2") for i in one["chunk_id"])
    edited = frame.with_columns(
        pl.when(pl.col("name") == "b")
        .then(pl.lit("Changed entirely."))
        .otherwise("text")
        .alias("text")
    )
    three = split_documents(read_corpus(edited, id_column="name"), **options)
    for name in ("a", "c"):
        assert (
            three.filter(doc_id=name)["chunk_id"].to_list()
            == one.filter(doc_id=name)["chunk_id"].to_list()
        )
    assert set(three.filter(doc_id="b")["chunk_id"]).isdisjoint(one.filter(doc_id="b")["chunk_id"])
    assert all(i.startswith(f"{d}#") for i, d in one.select("chunk_id", "doc_id").iter_rows())


def test_the_module_example_runs() -> None:
    assert doctest.testmod(corpus).failed == 0
