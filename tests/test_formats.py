"""Input formats (Parquet, JSON Lines, CSV), chunks decoded off the event loop, and a durable
output file.

The promises: a JSON Lines or CSV log scores exactly as the same log in Parquet does, through
`score_file` (streamed) and `ragframe.run` (a path); in CSV a list column holds one JSON list
of strings per cell, and any other cell stops the run before its first request, naming the
column and the row; an unknown extension, or a file whose content is not what its name says,
gets a message saying which formats are read; chunks are decoded on a thread, not on the loop;
the output file and its directory are fsynced around the rename that puts it in place.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

import ragframe
from ragframe import InputError
from ragframe.cli import main
from ragframe.engine.stream import score_file
from ragframe.inputs.io import AtomicParquetWriter, open_input, write_parquet
from ragframe.testing.server import FakeServer

ROWS = 23
CHUNK = 5  # 23 rows: four full chunks and one of 3 rows
METRICS = ["context_precision"]


def log(n: int = ROWS) -> pl.DataFrame:
    """Text columns only (CSV has no other types), with a missing answer, an empty and a null
    context list, and texts that CSV must quote: commas, quotes, newlines."""
    return pl.DataFrame(
        {
            "run_id": [f"exp-{i % 3}" for i in range(n)],
            "question": [f'What does "device {i}" measure, and how?' for i in range(n)],
            "answer": [
                None if i == 4 else f"Device {i} measures pressure.\nIt is blue." for i in range(n)
            ],
            "contexts": [
                [] if i == 6 else None if i == 7 else [f"Device {i} measures pressure.", "It, too."]
                for i in range(n)
            ],
            "ground_truth": [f"Device {i} measures air pressure." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


def write_csv(frame: pl.DataFrame, path: Path, lists: tuple[str, ...] = ("contexts",)) -> None:
    """Write with Python's csv and json modules (not the reader under test): list columns as
    one JSON list per cell, nulls as empty cells."""
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(frame.columns)
        for row in frame.iter_rows():
            out.writerow(
                "" if value is None else json.dumps(value) if name in lists else value
                for name, value in zip(frame.columns, row, strict=True)
            )


def write_as(frame: pl.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        frame.write_parquet(path)
    elif path.suffix in (".jsonl", ".ndjson"):
        frame.write_ndjson(path)
    else:
        write_csv(frame, path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".csv"])
def test_jsonl_and_csv_score_exactly_like_parquet(
    server: FakeServer, judge: Any, tmp_path: Path, suffix: str
) -> None:
    parquet = write_as(log(), tmp_path / "log.parquet")
    other = write_as(log(), tmp_path / f"log{suffix}")
    expected = tmp_path / "from_parquet.parquet"
    score_file(parquet, expected, METRICS, judge=judge, chunk_rows=CHUNK)
    scored = tmp_path / "scored.parquet"
    result = score_file(other, scored, METRICS, judge=judge, chunk_rows=CHUNK)
    assert result.chunks == 5
    assert_frame_equal(pl.read_parquet(scored), pl.read_parquet(expected))
    # A path given to the in-memory API reads the same way.
    assert_frame_equal(
        ragframe.run(other, METRICS, judge=judge).frame,
        ragframe.run(parquet, METRICS, judge=judge).frame,
    )


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_chunks_come_in_order_and_never_larger_than_asked(tmp_path: Path, suffix: str) -> None:
    data = log(1000)
    source = open_input(write_as(data, tmp_path / f"big{suffix}"), list_columns={"contexts"})
    assert source.schema_frame().schema == data.schema
    heights = [chunk.height for chunk in source.chunks(64)]
    assert max(heights) <= 64 and sum(heights) == 1000 and len(heights) == 16
    assert_frame_equal(pl.concat(source.chunks(64)), data)


def test_csv_list_columns_mapped_by_columns_are_decoded(
    server: FakeServer, judge: Any, tmp_path: Path
) -> None:
    source = tmp_path / "renamed.csv"
    write_csv(log().rename({"contexts": "passages"}), source, lists=("passages",))
    out = tmp_path / "scored.parquet"
    score_file(source, out, METRICS, judge=judge, columns={"contexts": "passages"})
    assert pl.read_parquet(out).get_column("passages").to_list() == log()["contexts"].to_list()


@pytest.mark.parametrize(
    "cell",
    [
        "plain text",
        '"one string"',
        "[1, 2]",
        '["a", null]',
        '{"a": "b"}',
        '["unterminated',
        '[["nested"]]',
        '["raw\tcontrol"]',
    ],
)
def test_a_csv_cell_that_is_not_a_json_list_of_strings_stops_the_run_before_any_request(
    server: FakeServer, judge: Any, tmp_path: Path, cell: str
) -> None:
    source = tmp_path / "log.csv"
    write_csv(log(), source)
    with source.open("a", newline="") as handle:  # the very last row is the bad one
        csv.writer(handle).writerow(["exp-0", "Question?", "Answer.", cell, "Truth."])
    with pytest.raises(InputError, match=rf"column 'contexts', row {ROWS + 1} ") as caught:
        score_file(source, tmp_path / "out.parquet", METRICS, judge=judge, chunk_rows=CHUNK)
    assert "JSON list of strings" in str(caught.value)
    assert server.count() + server.count("/embeddings") == 0
    with pytest.raises(InputError, match=rf"column 'contexts', row {ROWS + 1} "):
        ragframe.run(source, METRICS, judge=judge)


PARQUET_MAGIC = b"PAR1"


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("log.parquet", b"old\n", "holds CSV or other text"),
        ("log.parquet", None, "cut short"),  # a Parquet file without its footer
        ("log.txt", b'{"question": "q"}\n', "not '.txt' files; it holds JSON Lines, so rename"),
        ("log", b"question,answer\nq,a\n", "not files without an extension"),
        ("log.jsonl", b"question,answer\nq,a\n", "named as JSON Lines but holds CSV"),
        ("log.jsonl", b'[{"question": "q"}]\n', "a JSON array"),
        ("log.csv", b'{"question": "q"}\n', "rename it to end in .jsonl"),
        ("log.csv", PARQUET_MAGIC + b"\x00" * 20 + PARQUET_MAGIC, "rename it to end in .parquet"),
        ("log.jsonl", b"", "is empty"),
        ("log.jsonl", b'{"question": "q"}\n{"question": \n', "cannot read"),
    ],
)
def test_files_that_cannot_be_read_say_which_formats_are(
    server: FakeServer, judge: Any, tmp_path: Path, name: str, content: bytes | None, says: str
) -> None:
    source = tmp_path / name
    if content is None:
        log().write_parquet(source)
        source.write_bytes(source.read_bytes()[:-20])
    else:
        source.write_bytes(content)
    with pytest.raises(InputError) as caught:
        score_file(source, tmp_path / "out.parquet", METRICS, judge=judge)
    message = str(caught.value)
    assert says in message
    assert "footer" not in message or says == "cut short"
    if says != "cut short":
        assert "Parquet (.parquet), JSON Lines (.jsonl, .ndjson) or CSV (.csv)" in message
    assert server.count() + server.count("/embeddings") == 0


def test_cli_refuses_an_unreadable_file_with_status_2(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "log.parquet"
    source.write_bytes(b"old\n")  # the 4-byte file that pyarrow calls a too-small footer
    argv = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--metrics", "faithfulness"]
    argv += ["--model", "fake-judge", "--base-url", server.base_url, "--no-cache", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "JSON Lines (.jsonl, .ndjson)" in err and "footer" not in err
    assert server.count() == 0


def test_chunks_are_decoded_off_the_event_loop(
    server: FakeServer, judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`score_file` runs its loop on this thread: no chunk may be decoded here."""
    decoded_on: list[int] = []
    iter_batches = pq.ParquetFile.iter_batches

    def recording(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        for batch in iter_batches(self, *args, **kwargs):
            decoded_on.append(threading.get_ident())
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    source = write_as(log(), tmp_path / "log.parquet")
    score_file(source, tmp_path / "out.parquet", METRICS, judge=judge, chunk_rows=CHUNK)
    assert len(decoded_on) == 5
    assert threading.get_ident() not in decoded_on


@pytest.mark.parametrize("how", ["write_parquet", "streamed"])
def test_the_output_is_fsynced_before_and_its_directory_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    target = tmp_path / "out.parquet"
    synced: list[tuple[str, int, int | None]] = []  # kind, inode, target's inode at that time
    fsync = os.fsync

    def recording(fd: int) -> None:
        info = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        synced.append((kind, info.st_ino, target.stat().st_ino if target.exists() else None))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    frame = log()
    if how == "write_parquet":
        write_parquet(frame, target, {"run": 1})
    else:
        writer = AtomicParquetWriter(target, frame.to_arrow().schema, {"run": 1}, overwrite=False)
        writer.write(frame.head(10))
        writer.write(frame.tail(-10))
        writer.close()
    assert_frame_equal(pl.read_parquet(target), frame)
    final = target.stat().st_ino
    # The data is synced while the file is still the temporary (the target does not exist
    # yet), then the directory once the rename has put it in place.
    assert synced == [("file", final, None), ("dir", tmp_path.stat().st_ino, final)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_estimate_counts_jsonl_and_csv_like_parquet(
    server: FakeServer, judge: Any, tmp_path: Path, suffix: str
) -> None:
    parquet = write_as(log(), tmp_path / "log.parquet")
    other = write_as(log(), tmp_path / f"log{suffix}")
    expected = ragframe.estimate(parquet, METRICS, judge=judge, chunk_rows=CHUNK)
    assert expected["rows"] == ROWS and expected["requests"] > 0
    assert ragframe.estimate(other, METRICS, judge=judge, chunk_rows=CHUNK) == expected
    assert server.count("") == 0


def test_128_bit_integers_are_read_whole_and_refused_in_chunks_by_name(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    log(2).with_columns(pl.Series("trace", [1, 2], dtype=pl.Int128)).write_parquet(path)
    assert open_input(path).read()["trace"].dtype == pl.Int128  # Polars reads it whole
    with pytest.raises(InputError, match=r"columns \['trace'\] hold 128-bit integers.*Int64"):
        open_input(path).schema_frame()


@pytest.mark.parametrize("command", ["score", "batch run"])
def test_an_output_named_as_another_format_is_refused_before_any_request(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    source = write_as(log(), tmp_path / "log.jsonl")
    argv = [*command.split(), str(source), "-o", str(tmp_path / "scored.csv")]
    argv += ["--metrics", "faithfulness", "--model", "fake-judge", "--base-url", server.base_url]
    argv += ["--manifest", str(tmp_path / "m.json")] if command != "score" else ["--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the output is always Parquet" in err and "scored.parquet" in err
    assert server.count("") == 0 and not (tmp_path / "scored.csv").exists()
