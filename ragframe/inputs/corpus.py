"""A corpus in, chunks out: the first step from documents to a test set (issue 30).

A corpus is a set of documents, each a text with an id. `read_corpus` takes it as a Polars
frame, a Parquet / JSON Lines / CSV file (local or a URL) with a text column, or a folder of
`.txt` / `.md` files, and returns one row per document: `doc_id`, `text`, then the table's other
columns unchanged (metadata that the chunks, and later the test-set rows, carry along). A null
or blank text stays a document; it just has no chunks.

`split_documents` cuts each document into chunks whose `text` is exactly
`document[start:end]` (character offsets, as Python's `str` and Polars' `str.slice` count
them), never beginning or ending with whitespace, so that a reference context can always be
found again in its document.

The splitter, per document:

1. Sections. A line starting with 1 to 6 `#` and a space or tab (up to three spaces of indent)
   opens a Markdown section; `#` lines inside ``` or ~~~ fences are code, not headings. A chunk
   never spans two sections; its `heading` is the path of headings above it ("Intro > Setup"),
   null before the first one. A section that holds only its heading line gives no chunk (its
   title lives on in its subsections' heading path), unless every section is like that.
2. Pieces. Each section is cut at paragraphs (blank lines), each paragraph at sentences
   (after `.`, `!`, `?` followed by a space, after `。！？`, and at line breaks), and a sentence
   longer than a whole chunk at words. The pieces are packed in order into chunks of at most
   `chunk_tokens`. Where a chunk must end, it ends at the strongest boundary (paragraph, then
   sentence, then word) that still leaves it at least half full, the latest such one.
3. Overlap. Each chunk after the first of a section begins with the last pieces of the one
   before, as many as fit in `overlap_tokens` (0: none), never all of them.
4. Tails. A last chunk whose new text (past the end of the previous chunk) is under
   `min_chunk_tokens` is merged into the previous chunk of its section. So a chunk may exceed
   `chunk_tokens` by less than `min_chunk_tokens`, and a single word longer than
   `chunk_tokens` (a URL, a base64 blob) is a chunk of its own, whatever its size.

Edge cases: a blank document has no chunks; a document shorter than `min_chunk_tokens` is one
chunk; nothing is random, so the same corpus and options always give the same chunks.

Tokens are estimated without a tokenizer as ceil(characters / 4) of the exact span
(`estimate_tokens`): OpenAI's rule of thumb for English, the same for every judge, and a bound
on a chunk's length in characters, which a word count is not (Chinese or Japanese text has no
spaces). It undercounts those scripts and code; pick `chunk_tokens` with that in mind.

Chunk ids are `{doc_id}#{h}`, `h` the first 12 hex digits of the BLAKE2b hash of the chunk's
text (`-2`, `-3` ... appended to a text repeated within one document). The same corpus and
options give the same ids; editing one document never changes another's; and an id never comes
to mean other text: a test set's `reference_context_ids` still name the same words after the
documents change, or name nothing. (`{doc_id}#{index}` would silently point to other text.)

Small sizes, to show the sections and the overlap ("Run it." begins chunk 3 again):

>>> text = "# Intro\\n\\nHello there. Bye now.\\n\\n## Setup\\n\\nRun it. Then test it. Ship."
>>> chunks = split_documents(
...     read_corpus(pl.DataFrame({"text": [text]})),
...     chunk_tokens=6,
...     overlap_tokens=2,
...     min_chunk_tokens=0,
... )
>>> chunks.select("chunk_index", "start", "end", "heading", "text")
shape: (5, 5)
┌─────────────┬───────┬─────┬───────────────┬───────────────────────┐
│ chunk_index ┆ start ┆ end ┆ heading       ┆ text                  │
│ ---         ┆ ---   ┆ --- ┆ ---           ┆ ---                   │
│ u32         ┆ u32   ┆ u32 ┆ str           ┆ str                   │
╞═════════════╪═══════╪═════╪═══════════════╪═══════════════════════╡
│ 0           ┆ 0     ┆ 21  ┆ Intro         ┆ # Intro               │
│             ┆       ┆     ┆               ┆                       │
│             ┆       ┆     ┆               ┆ Hello there.          │
│ 1           ┆ 22    ┆ 30  ┆ Intro         ┆ Bye now.              │
│ 2           ┆ 32    ┆ 49  ┆ Intro > Setup ┆ ## Setup              │
│             ┆       ┆     ┆               ┆                       │
│             ┆       ┆     ┆               ┆ Run it.               │
│ 3           ┆ 42    ┆ 63  ┆ Intro > Setup ┆ Run it. Then test it. │
│ 4           ┆ 64    ┆ 69  ┆ Intro > Setup ┆ Ship.                 │
└─────────────┴───────┴─────┴───────────────┴───────────────────────┘
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.io import INPUT_FORMATS, InputFile, StorageOptions, open_input, remote_url

#: The suffixes of a folder's documents (read as UTF-8 text, Markdown or not).
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
#: The columns `split_documents` writes; a corpus column of one of these names would clash.
CHUNK_COLUMNS = ("chunk_id", "doc_id", "chunk_index", "start", "end", "text", "tokens", "heading")
#: Column names that often hold a document's text, suggested when `text_column` is missing.
_TEXT_ALIASES = ("content", "page_content", "body", "document", "passage", "chunk", "contents")
_SUPPORTED = (
    "a Polars frame, a .parquet / .jsonl / .ndjson / .csv file with a text column, "
    "or a folder of .txt / .md files"
)

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*\r?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’»)\]]*(?=\s)|[。！？]+[」』”’）)]*|\n")
_WORD = re.compile(r"\S+")

_PARAGRAPH, _SENTENCE, _WORD_BREAK = 3, 2, 1


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / 4): the one token estimate used for sizes, overlaps and the column."""
    return _tokens(len(text))


def _tokens(chars: int) -> int:
    return -(-chars // 4)


# ------------------------------------------------------------------------------ reading


def read_corpus(
    source: pl.DataFrame | pl.LazyFrame | str | Path,
    *,
    text_column: str = "text",
    id_column: str | None = None,
    storage_options: StorageOptions | None = None,
) -> pl.DataFrame:
    """The documents of `source` as one frame: `doc_id`, `text`, then the other columns.

    `doc_id` is the `id_column` value as text when one is named, else the row number ("0",
    "1", ...) of a table, or the file's path relative to the folder (POSIX, e.g.
    "guide/setup.md"); a folder is read recursively, in path order, skipping hidden files and
    folders. Null or blank texts are kept: they are documents with no chunks.
    `storage_options` reach Polars for a URL (`s3://...`), as for scored logs.

    Raises ConfigError (one line saying what to change) for a missing text or id column, null
    or repeated ids, a missing or empty folder, a file that is not UTF-8, or an unsupported
    file type; and InputError, as `ragframe score` does, for a table file it cannot parse.
    """
    if isinstance(source, pl.LazyFrame):
        source = source.collect()
    if isinstance(source, pl.DataFrame):
        return _from_table(source, "the corpus frame", text_column, id_column)
    if not isinstance(source, (str, Path)):
        raise ConfigError(f"cannot read a corpus from a {type(source).__name__}; pass {_SUPPORTED}")
    url = remote_url(source)
    if url is not None:
        _check_table_suffix(url.suffix, url)
        return _read_table(open_input(url, storage_options=storage_options), text_column, id_column)
    path = Path(source)
    if not path.exists():
        raise ConfigError(f"corpus {str(path)!r} does not exist; pass {_SUPPORTED}")
    if path.is_dir():
        return _from_folder(path)
    if path.suffix.lower() in TEXT_SUFFIXES:  # one document: a folder of one
        return _documents([path.name], [_read_text(path)])
    _check_table_suffix(path.suffix, path)
    return _read_table(open_input(path), text_column, id_column)


def _check_table_suffix(suffix: str, path: Any) -> None:
    if suffix.lower() not in INPUT_FORMATS:
        named = f"a {suffix!r} file" if suffix else "a file without an extension"
        raise ConfigError(
            f"cannot read the corpus {str(path)!r}: ragframe reads {_SUPPORTED}, not {named}; "
            "convert it, or put its text in .txt files in a folder"
        )


def _read_table(reader: InputFile, text_column: str, id_column: str | None) -> pl.DataFrame:
    """A table file: its columns checked from the schema before its rows are read."""
    where = repr(str(reader.path))
    _check_text_column(reader.schema_frame().schema, where, text_column)
    return _from_table(reader.read(), where, text_column, id_column)


def _check_text_column(schema: pl.Schema, where: str, text_column: str) -> None:
    """`text_column` is a column of strings (or all null), else a ConfigError saying which."""
    columns = schema.names()
    if text_column not in columns:
        raise ConfigError(
            f"{where} has no text column {text_column!r} (its columns: {columns})"
            f"{_did_you_mean(text_column, columns, _TEXT_ALIASES)}; name the column holding "
            "the documents' text with text_column= (--text-column)"
        )
    dtype = schema[text_column]
    if isinstance(dtype, pl.List) and dtype.inner == pl.String:
        raise ConfigError(
            f"{where}: the text column {text_column!r} holds lists of strings, not one text "
            f"per document; join them first, e.g. pl.col({text_column!r}).list.join('\\n\\n')"
        )
    if not (dtype in (pl.String, pl.Null, pl.Categorical) or isinstance(dtype, pl.Enum)):
        raise ConfigError(
            f"{where}: the text column {text_column!r} holds {dtype}, not text; name a column "
            "of strings with text_column= (--text-column)"
        )


def _from_table(
    table: pl.DataFrame, where: str, text_column: str, id_column: str | None
) -> pl.DataFrame:
    """Validate the table's text and id columns, then rename them to `text` and `doc_id`."""
    _check_text_column(table.schema, where, text_column)
    columns = table.columns
    if table.height == 0:
        raise ConfigError(f"{where} has no rows: a corpus needs at least one document")
    text = pl.col(text_column).cast(pl.String).alias("text")
    if id_column is None:
        if "doc_id" in columns:
            raise ConfigError(
                f"{where} has a 'doc_id' column but no id_column was named; pass "
                "id_column='doc_id' (--id-column doc_id) to use it, or rename it"
            )
        doc_id = pl.int_range(pl.len(), dtype=pl.UInt32).cast(pl.String).alias("doc_id")
    else:
        doc_id = pl.col(_id_column(table, where, id_column)).cast(pl.String).alias("doc_id")
    rest = [c for c in columns if c not in (text_column, id_column)]
    clash = [c for c in rest if c in CHUNK_COLUMNS]
    if clash:
        raise ConfigError(
            f"{where}: the column {clash[0]!r} would clash with the chunks' own column of "
            f"that name ({', '.join(CHUNK_COLUMNS)}); rename it"
        )
    return table.select(doc_id, text, *rest)


def _id_column(table: pl.DataFrame, where: str, id_column: str) -> str:
    """`id_column` if it names one non-null, unique value per row; else a ConfigError."""
    if id_column not in table.columns:
        raise ConfigError(
            f"{where} has no id column {id_column!r} (its columns: {table.columns})"
            f"{_did_you_mean(id_column, table.columns, ())}; name it with id_column= "
            "(--id-column), or leave it out to number the rows"
        )
    ids = table.get_column(id_column)
    if isinstance(ids.dtype, (pl.List, pl.Array, pl.Struct)):
        raise ConfigError(
            f"{where}: the id column {id_column!r} holds {ids.dtype}; ids are single values"
        )
    nulls = ids.is_null()
    if nulls.any():
        raise ConfigError(
            f"{where}: the id column {id_column!r} is null in {nulls.sum()} rows (the first: "
            f"row {int(nulls.arg_true()[0])}); give every document an id"
        )
    as_text = ids.cast(pl.String)
    repeated = as_text.is_duplicated()
    if repeated.any():
        first = as_text.filter(repeated)[0]
        raise ConfigError(
            f"{where}: the id column {id_column!r} repeats the id {first!r} "
            f"({int(repeated.sum())} rows share an id); every document needs an id of its own"
        )
    return id_column


def _did_you_mean(name: str, columns: Sequence[str], aliases: Sequence[str]) -> str:
    """'; did you mean 'x'?' for a close column name (or a usual alias present), else ''."""
    lower = {c.lower(): c for c in columns}
    close = [lower[c] for c in difflib.get_close_matches(name.lower(), list(lower), n=1)]
    close = close or [c for c in columns if c.lower() in aliases][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def _from_folder(folder: Path) -> pl.DataFrame:
    """Every visible .txt / .md file under `folder`, by relative POSIX path."""
    files: dict[str, Path] = {}
    others: dict[str, int] = {}
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if path.suffix.lower() in TEXT_SUFFIXES:
            files[relative.as_posix()] = path
        else:
            suffix = path.suffix.lower() or "(no suffix)"
            others[suffix] = others.get(suffix, 0) + 1
    if not files:
        held = ", ".join(f"{n} {s}" for s, n in sorted(others.items()))
        what = f"only other files ({held})" if held else "no files"
        raise ConfigError(
            f"corpus folder {str(folder)!r} holds {what}; a corpus folder holds .txt or .md "
            "files (searched in subfolders too); convert the documents to text first"
        )
    names = sorted(files)
    return _documents(names, [_read_text(files[name]) for name in names])


def _read_text(path: Path) -> str:
    """The file as UTF-8 (a leading byte-order mark dropped), or a ConfigError naming it."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"corpus file {str(path)!r} is not UTF-8 (byte {exc.start}: {exc.reason}); "
            f"convert it, e.g. iconv -f latin1 -t utf-8"
        ) from exc


def _documents(ids: list[str], texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"doc_id": ids, "text": texts}, schema={"doc_id": pl.String, "text": pl.String}
    )


# ------------------------------------------------------------------------------ splitting


@dataclass(frozen=True, slots=True)
class _Piece:
    """A span of a section with no whitespace at either end, and the strength of the
    boundary before it (paragraph 3, sentence 2, word 1)."""

    start: int
    end: int
    boundary: int


def split_documents(
    docs: pl.DataFrame,
    *,
    chunk_tokens: int = 384,
    overlap_tokens: int = 48,
    min_chunk_tokens: int = 16,
) -> pl.DataFrame:
    """The chunks of every document (see the module docstring for the rule), in document
    order: `chunk_id`, `doc_id`, `chunk_index`, `start`, `end`, `text`, `tokens`, `heading`,
    then the documents' other columns, repeated on each of their chunks.

    `docs` is `read_corpus`'s frame (a `doc_id` and a `text` column of strings, ids unique).
    """
    _check_sizes(chunk_tokens, overlap_tokens, min_chunk_tokens)
    missing = [c for c in ("doc_id", "text") if c not in docs.columns]
    if missing:
        raise ConfigError(
            f"split_documents needs the columns 'doc_id' and 'text' (missing: {missing}); "
            "read the corpus with read_corpus first"
        )
    if docs.schema["doc_id"] != pl.String or docs.schema["text"] not in (pl.String, pl.Null):
        raise ConfigError(
            "split_documents needs String 'doc_id' and 'text' columns (got "
            f"{docs.schema['doc_id']}, {docs.schema['text']}); read the corpus with read_corpus"
        )
    repeated = docs.get_column("doc_id").is_duplicated()
    if repeated.any():
        raise ConfigError(
            f"the documents repeat the doc_id {docs['doc_id'].filter(repeated)[0]!r}; "
            "every document needs an id of its own"
        )
    clash = [c for c in docs.columns if c in CHUNK_COLUMNS and c not in ("doc_id", "text")]
    if clash:
        raise ConfigError(
            f"the documents' column {clash[0]!r} would clash with a chunk column; rename it"
        )

    columns: dict[str, list[Any]] = {k: [] for k in CHUNK_COLUMNS if k != "tokens"}
    for doc_id, text in docs.select("doc_id", "text").iter_rows():
        seen: dict[str, int] = {}
        for index, (start, end, heading) in enumerate(
            _chunk_spans(text or "", chunk_tokens, overlap_tokens, min_chunk_tokens)
        ):
            span = text[start:end]
            digest = hashlib.blake2b(span.encode(), digest_size=6).hexdigest()
            seen[digest] = seen.get(digest, 0) + 1
            suffix = f"-{seen[digest]}" if seen[digest] > 1 else ""
            columns["chunk_id"].append(f"{doc_id}#{digest}{suffix}")
            columns["doc_id"].append(doc_id)
            columns["chunk_index"].append(index)
            columns["start"].append(start)
            columns["end"].append(end)
            columns["text"].append(span)
            columns["heading"].append(heading)
    chunks = pl.DataFrame(
        columns,
        schema={
            "chunk_id": pl.String,
            "doc_id": pl.String,
            "chunk_index": pl.UInt32,
            "start": pl.UInt32,
            "end": pl.UInt32,
            "text": pl.String,
            "heading": pl.String,
        },
    ).with_columns(
        tokens=((pl.col("end") - pl.col("start") + 3) // 4).cast(pl.UInt32)  # estimate_tokens
    )
    chunks = chunks.join(docs.drop("text"), on="doc_id", how="left", maintain_order="left")
    return chunks.select(*CHUNK_COLUMNS, *[c for c in docs.columns if c not in CHUNK_COLUMNS])


def _check_sizes(chunk_tokens: int, overlap_tokens: int, min_chunk_tokens: int) -> None:
    for name, value in (
        ("chunk_tokens", chunk_tokens),
        ("overlap_tokens", overlap_tokens),
        ("min_chunk_tokens", min_chunk_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be a whole number of tokens, not {value!r}")
    if chunk_tokens < 1:
        raise ConfigError(f"chunk_tokens must be at least 1, not {chunk_tokens}")
    if not 0 <= overlap_tokens < chunk_tokens:
        raise ConfigError(
            f"overlap_tokens must be at least 0 and under chunk_tokens ({chunk_tokens}), "
            f"not {overlap_tokens}"
        )
    if not 0 <= min_chunk_tokens <= chunk_tokens:
        raise ConfigError(
            f"min_chunk_tokens must be between 0 and chunk_tokens ({chunk_tokens}), "
            f"not {min_chunk_tokens}"
        )


def _chunk_spans(
    text: str, chunk_tokens: int, overlap_tokens: int, min_chunk_tokens: int
) -> list[tuple[int, int, str | None]]:
    """(start, end, heading path) of each chunk of one document."""
    sections = [s for s in _sections(text) if s[3]]
    if not sections:
        return []
    bodied = [s for s in sections if not s[4]]
    spans: list[tuple[int, int, str | None]] = []
    for start, end, heading, _, _ in bodied or sections:
        pieces = _pieces(text, start, end, 4 * chunk_tokens)
        for first, last in _pack(pieces, chunk_tokens, overlap_tokens, min_chunk_tokens):
            spans.append((first, last, heading))
    return spans


def _sections(text: str) -> list[tuple[int, int, str | None, bool, bool]]:
    """(start, end, heading path, has text, only a heading line) of each Markdown section."""
    bounds: list[tuple[int, str | None, int]] = [(0, None, -1)]  # (start, heading, line end)
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        fenced = _FENCE.match(line)
        if fenced:
            mark = fenced.group(1)
            if fence is None:
                fence = mark[0] * 3
            elif mark.startswith(fence):
                fence = None
        elif fence is None and (found := _HEADING.match(line.rstrip("\n"))):
            level, title = len(found.group(1)), found.group(2).strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            if title:
                stack.append((level, title))
            path = " > ".join(t for _, t in stack) or None
            bounds.append((offset, path, offset + len(line.rstrip())))
        offset += len(line)
    sections = []
    for (start, heading, line_end), nxt in zip(
        bounds, [*bounds[1:], (len(text), None, -1)], strict=True
    ):
        end = nxt[0]
        first, last = _trim(text, start, end)
        if first < last:
            sections.append((start, end, heading, True, line_end >= last))
    return sections


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The span [start, end) without whitespace at either end (start == end when blank)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut(text: str, start: int, end: int, cuts: re.Pattern[str]) -> list[tuple[int, int]]:
    """The non-blank, trimmed spans of text[start:end] between the ends of `cuts`' matches."""
    spans = []
    at = start
    for found in cuts.finditer(text, start, end):
        spans.append(_trim(text, at, found.end()))
        at = found.end()
    spans.append(_trim(text, at, end))
    return [(s, e) for s, e in spans if s < e]


def _pieces(text: str, start: int, end: int, max_chars: int) -> list[_Piece]:
    """The section's sentences (words, for a sentence longer than a chunk), each marked with
    the boundary before it."""
    pieces: list[_Piece] = []
    for p_start, p_end in _cut(text, start, end, _PARAGRAPH_BREAK):
        boundary = _PARAGRAPH
        for s_start, s_end in _cut(text, p_start, p_end, _SENTENCE_END):
            if s_end - s_start <= max_chars:
                pieces.append(_Piece(s_start, s_end, boundary))
            else:
                for i, word in enumerate(_WORD.finditer(text, s_start, s_end)):
                    pieces.append(
                        _Piece(word.start(), word.end(), boundary if i == 0 else _WORD_BREAK)
                    )
            boundary = _SENTENCE
    return pieces


def _pack(
    pieces: list[_Piece], chunk_tokens: int, overlap_tokens: int, min_chunk_tokens: int
) -> list[tuple[int, int]]:
    """Greedy packing of one section's pieces into (start, end) chunks, with overlap and the
    short tail merged (see the module docstring)."""
    limit, overlap = 4 * chunk_tokens, 4 * overlap_tokens  # in characters: ceil(c/4) <= t
    chunks: list[tuple[int, int]] = []
    first = new = 0  # the chunk's first piece, and its first piece not in the previous chunk
    n = len(pieces)
    while new < n:
        while first < new and pieces[new].end - pieces[first].start > limit:
            first += 1  # too much overlap for the next piece to fit: take less
        last = new
        while last + 1 < n and pieces[last + 1].end - pieces[first].start <= limit:
            last += 1
        stop = last + 1  # the chunk is pieces[first:stop]
        if stop < n:
            half = [
                k
                for k in range(new + 1, stop + 1)
                if 2 * (pieces[k - 1].end - pieces[first].start) >= limit
            ]
            if half:
                stop = max(half, key=lambda k: (pieces[k].boundary, k))
        chunks.append((pieces[first].start, pieces[stop - 1].end))
        if stop >= n:
            break
        back = stop
        while back - 1 > first and pieces[stop - 1].end - pieces[back - 1].start <= overlap:
            back -= 1
        first, new = back, stop
    if len(chunks) > 1 and _tokens(chunks[-1][1] - chunks[-2][1]) < min_chunk_tokens:
        chunks[-2:] = [(chunks[-2][0], chunks[-1][1])]
    return chunks
