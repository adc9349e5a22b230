"""Remote logs (`s3://...`) read through Polars with its storage options, against moto's S3
server on 127.0.0.1 (no network): the same frame, sample and metadata as the local file, the
command line through the AWS_* environment, and one line for a missing object or bucket."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import polars as pl
import pytest
from moto.server import ThreadedMotoServer

from ragframe.errors import ConfigError, InputError
from ragframe.inputs.columns import load_frame
from ragframe.inputs.io import input_path, open_input, read_metadata, write_parquet
from ragframe.inputs.sample import draw_sample

DATA = Path(__file__).resolve().parent.parent / "data"
BUCKET = "ragframe-logs"


@dataclass
class Store:
    """moto's S3 server: where it listens and how to reach it (options, or environment)."""

    endpoint: str
    client: Any
    local: Path  # the logs uploaded, as local files, one per format

    @property
    def options(self) -> dict[str, str]:
        return {
            "aws_endpoint_url": self.endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        return {f"AWS_{key.removeprefix('aws_').upper()}": v for key, v in self.options.items()}

    def put(self, key: str, path: Path) -> str:
        # public-read: http(s) URLs of the same objects are read with no credentials
        self.client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes(), ACL="public-read")
        return f"s3://{BUCKET}/{key}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """moto's S3 server with a bucket holding the shipped sample as Parquet, JSONL and CSV."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        local = tmp_path_factory.mktemp("logs")
        frame = pl.read_parquet(DATA / "sample.parquet")
        frame.write_parquet(local / "log.parquet")
        frame.write_ndjson(local / "log.jsonl")
        as_json = [json.dumps(cell) for cell in frame.get_column("contexts").to_list()]
        frame.with_columns(pl.Series("contexts", as_json)).write_csv(local / "log.csv")
        store = Store(endpoint, client, local)
        for name in ("log.parquet", "log.jsonl", "log.csv"):
            store.put(name, local / name)
        yield store
    finally:
        server.stop()


FORMATS = ["log.parquet", "log.jsonl", "log.csv"]


@pytest.mark.parametrize("name", FORMATS)
def test_a_remote_log_reads_as_the_local_file(s3: Store, name: str) -> None:
    url = f"s3://{BUCKET}/{name}"
    remote = open_input(url, list_columns={"contexts"}, storage_options=s3.options)
    local = open_input(s3.local / name, list_columns={"contexts"})
    assert remote.format == local.format
    assert remote.schema_frame().schema == local.schema_frame().schema
    assert remote.rows == local.rows
    assert remote.read().equals(local.read())
    chunked = pl.concat(list(remote.chunks(7)))
    assert [c.height for c in remote.chunks(7)] == [7, 7, 6]
    assert chunked.equals(local.read())
    assert (
        pl.concat(list(remote.column_chunks(["question"], 7)))
        .sort("question")
        .equals(local.read().select("question").sort("question"))
    )
    assert load_frame(url, storage_options=s3.options).equals(load_frame(s3.local / name))


@pytest.mark.parametrize("name", FORMATS)
def test_a_remote_sample_is_the_local_sample(s3: Store, name: str) -> None:
    url = f"s3://{BUCKET}/{name}"
    remote = draw_sample(url, 5, seed=7, storage_options=s3.options)
    local = draw_sample(s3.local / name, 5, seed=7)
    assert remote.frame.equals(local.frame)
    assert remote.rows_total == local.rows_total == 20


@pytest.mark.parametrize("name", FORMATS)
def test_an_http_url_reads_as_the_local_file(s3: Store, name: str) -> None:
    """Plain http(s): moto serves the bucket's objects path-style to any GET."""
    url = f"{s3.endpoint}/{BUCKET}/{name}"
    assert load_frame(url).equals(load_frame(s3.local / name))
    missing = f"{s3.endpoint}/{BUCKET}/missing/{name}"
    with pytest.raises(InputError) as caught:
        load_frame(missing)
    message = str(caught.value)
    assert missing in message and "does not exist" in message and "\n" not in message, message


def test_a_path_that_collapsed_a_url_is_read_as_the_url(s3: Store) -> None:
    """pathlib turns "s3://b/k" into "s3:/b/k"; a caller that wrapped the URL still reads it."""
    source = open_input(Path(f"s3://{BUCKET}/log.parquet"), storage_options=s3.options)
    assert source.path == f"s3://{BUCKET}/log.parquet"
    assert source.read().height == 20


def test_read_metadata_of_a_remote_scored_file(s3: Store, tmp_path: Path) -> None:
    written = tmp_path / "scored.parquet"
    write_parquet(pl.read_parquet(DATA / "sample.parquet"), written, {"judge": {"model": "m"}})
    url = s3.put("scored/meta.parquet", written)
    assert read_metadata(url, storage_options=s3.options) == read_metadata(written)
    assert read_metadata(url, storage_options=s3.options)["judge"] == {"model": "m"}


def test_the_environment_reaches_the_store_without_storage_options(
    s3: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the command line relies on: object_store's AWS_* variables."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{BUCKET}/log.parquet"
    assert load_frame(url).equals(pl.read_parquet(s3.local / "log.parquet"))
    assert input_path(url) == url and input_path(url).name == "log.parquet"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"s3://{BUCKET}/no/such.parquet", "does not exist"),
        (f"s3://{BUCKET}/no/such.jsonl", "does not exist"),
        (f"s3://{BUCKET}/no/such.csv", "does not exist"),
        ("s3://no-such-bucket/log.parquet", "the bucket 'no-such-bucket' does not exist"),
    ],
)
def test_a_missing_object_or_bucket_is_one_line(s3: Store, url: str, says: str) -> None:
    reads = [
        lambda: open_input(url, storage_options=s3.options),
        lambda: load_frame(url, storage_options=s3.options),
    ]
    if url.endswith(".parquet"):  # its footer is read to check it (summarize, compare, report)
        reads += [
            lambda: input_path(url, storage_options=s3.options),
            lambda: read_metadata(url, storage_options=s3.options),
        ]
    for read in reads:
        with pytest.raises(InputError) as caught:
            read()
        message = str(caught.value)
        assert url in message and says in message, message
        assert "\n" not in message and "<?xml" not in message, message


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("not.parquet", b"question\nq\n", "as Parquet"),
        ("bad.jsonl", b'{"question": "q"}\nnot json\n', "as JSON Lines"),
        ("bad.csv", b'question,contexts\nq,"[""a""]"\nr,plain text\n', "column 'contexts', row 2"),
    ],
)
def test_a_remote_file_not_in_its_format_is_one_line(
    s3: Store, tmp_path: Path, name: str, body: bytes, says: str
) -> None:
    (tmp_path / name).write_bytes(body)
    url = s3.put(f"bad/{name}", tmp_path / name)
    with pytest.raises(InputError) as caught:
        load_frame(url, storage_options=s3.options)
    message = str(caught.value)
    assert url in message and says in message and "\n" not in message, message


def test_an_unreachable_store_or_a_bad_option_is_one_line(s3: Store) -> None:
    url = f"s3://{BUCKET}/log.parquet"
    closed = {**s3.options, "aws_endpoint_url": f"http://127.0.0.1:{_free_port()}"}
    with pytest.raises(InputError, match=r"cannot reach the store for .*check the endpoint"):
        load_frame(url, storage_options={**closed, "max_retries": 0})
    with pytest.raises(InputError, match=r"'max_retries'.*check storage_options$"):
        load_frame(url, storage_options={**s3.options, "max_retries": "many"})


def test_a_refused_credential_is_one_line(s3: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks keys now
    wrong = {**s3.options, "aws_access_key_id": "AKIAWRONG"}
    url = f"s3://{BUCKET}/log.parquet"
    for read in (
        lambda: load_frame(url, storage_options=wrong),
        lambda: read_metadata(url, storage_options=wrong),
    ):
        with pytest.raises(InputError) as caught:
            read()
        message = str(caught.value)
        assert url in message and "access denied (InvalidAccessKeyId)" in message, message
        assert "AWS_ACCESS_KEY_ID" in message and "\n" not in message, message


def test_unread_schemes_and_remote_outputs_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError, match="ragframe reads local files and URLs of the schemes"):
        open_input("ftp://host/log.parquet")
    with pytest.raises(InputError, match="does not exist"):  # a Windows drive, not a scheme
        open_input("C://logs/log.parquet")
    frame = pl.DataFrame({"question": ["q"]})
    monkeypatch.chdir(tmp_path)
    for target in ("s3://bucket/out.parquet", Path("s3://bucket/out.parquet")):
        with pytest.raises(ConfigError, match="write it locally, then copy it"):
            write_parquet(frame, target, {})
    assert not (tmp_path / "s3:").exists()


def test_evaluate_reads_a_url_with_storage_options(s3: Store, judge: Any) -> None:
    import ragframe

    url = f"s3://{BUCKET}/log.jsonl"
    remote = ragframe.evaluate(url, ["faithfulness"], judge=judge, storage_options=s3.options)
    local = ragframe.evaluate(s3.local / "log.jsonl", ["faithfulness"], judge=judge)
    assert remote.height == 20 and remote.get_column("faithfulness").is_not_null().all()
    assert remote.equals(local)


def test_score_file_streams_a_url_with_storage_options(
    s3: Store, judge: Any, tmp_path: Path
) -> None:
    """The streamed path (`score_file`, what `ragframe score` runs) takes a URL as the URL it
    is (a Path would collapse its "//") and its storage options; the output stays local."""
    from ragframe.engine.stream import score_file

    url, out, local_out = (
        f"s3://{BUCKET}/log.parquet",
        tmp_path / "r.parquet",
        tmp_path / "l.parquet",
    )
    score_file(url, out, ["faithfulness"], judge=judge, storage_options=s3.options)
    score_file(s3.local / "log.parquet", local_out, ["faithfulness"], judge=judge)
    assert pl.read_parquet(out).equals(pl.read_parquet(local_out))
    with pytest.raises(ConfigError, match="write it locally"):
        score_file(url, f"s3://{BUCKET}/out.parquet", ["faithfulness"], judge=judge)


def test_decisions_read_a_remote_scored_file_through_the_environment(
    s3: Store, judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summarize (and every decision built on its reader), and the report, on an s3:// file."""
    import ragframe

    result = ragframe.run(s3.local / "log.parquet", ["faithfulness"], judge=judge)
    written = tmp_path / "scored.parquet"
    write_parquet(result.frame, written, result.metadata())
    url = s3.put("scored/run.parquet", written)
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    assert ragframe.summarize(url).equals(ragframe.summarize(written))
    assert read_metadata(url) == read_metadata(written) != {}
    html = ragframe.report(url, output=tmp_path / "report.html")
    assert (tmp_path / "report.html").exists(), html


# ------------------------------------------------------------------------------ the command line


def _cli(s3: Store, base_url: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    """`ragframe ...` in a subprocess with only the AWS_* environment to reach the store (and
    the fake judge at `base_url`, for score)."""
    drop = ("AWS_", "OPENAI_", "RAGFRAME_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env = {**clean, **s3.env, "OPENAI_API_KEY": "test"}
    judge = ["--base-url", base_url, "--model", "m"] if base_url else []
    command = [sys.executable, "-m", "ragframe.cli", *argv, *judge]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_summarize_gate_compare_report_read_a_url_through_the_environment(
    s3: Store, tmp_path: Path
) -> None:
    frame = pl.read_parquet(DATA / "sample.parquet").with_columns(
        faithfulness=pl.Series([i / 20 for i in range(20)])
    )
    write_parquet(frame, tmp_path / "scored.parquet", {})
    url = s3.put("scored/cli.parquet", tmp_path / "scored.parquet")
    remote = _cli(s3, None, "summarize", url)
    local = _cli(s3, None, "summarize", str(tmp_path / "scored.parquet"))
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and "faithfulness" in remote.stdout
    gate = _cli(s3, None, "gate", url, "--fail-under", "faithfulness=0.9")
    assert gate.returncode == 1 and "faithfulness" in gate.stdout + gate.stderr, gate.stderr
    compared = _cli(s3, None, "compare", url, str(tmp_path / "scored.parquet"), "--on", "id")
    assert compared.returncode == 0, compared.stderr
    report = _cli(s3, None, "report", url, "-o", str(tmp_path / "report.html"))
    assert report.returncode == 0 and (tmp_path / "report.html").stat().st_size, report.stderr


def test_score_reads_a_url_through_the_environment(s3: Store, server: Any, tmp_path: Path) -> None:
    common = ["--metrics", "faithfulness", "--no-progress"]
    remote = _cli(
        s3,
        server.base_url,
        "score",
        f"s3://{BUCKET}/log.parquet",
        "-o",
        str(tmp_path / "r.parquet"),
        *common,
    )
    assert remote.returncode == 0, remote.stderr
    local = _cli(
        s3,
        server.base_url,
        "score",
        str(s3.local / "log.parquet"),
        "-o",
        str(tmp_path / "l.parquet"),
        *common,
    )
    assert local.returncode == 0, local.stderr
    scored = pl.read_parquet(tmp_path / "r.parquet")
    assert scored.height == 20 and scored.get_column("faithfulness").is_not_null().all()
    assert scored.equals(pl.read_parquet(tmp_path / "l.parquet"))


def test_score_samples_a_url_and_estimates_it(s3: Store, server: Any, tmp_path: Path) -> None:
    """The in-memory path (--sample) and the dry run read a URL through the environment."""
    url = f"s3://{BUCKET}/log.parquet"
    out = tmp_path / "sampled.parquet"
    sampled = _cli(
        s3,
        server.base_url,
        "score",
        url,
        "--sample",
        "5",
        "-o",
        str(out),
        "--metrics",
        "faithfulness",
        "--no-progress",
    )
    assert sampled.returncode == 0, sampled.stderr
    local = draw_sample(s3.local / "log.parquet", 5, seed=0).frame
    assert pl.read_parquet(out).get_column("id").to_list() == local.get_column("id").to_list()
    dry = _cli(s3, server.base_url, "score", url, "--dry-run", "--metrics", "faithfulness")
    assert dry.returncode == 0 and "20" in dry.stdout + dry.stderr, dry.stderr


def test_score_says_in_one_line_that_a_remote_input_is_missing(
    s3: Store, server: Any, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/missing.parquet"
    done = _cli(
        s3, server.base_url, "score", url, "-o", str(tmp_path / "o.parquet"), "--no-progress"
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and url in lines[0] and "does not exist" in lines[0], done.stderr
    refused = _cli(
        s3,
        server.base_url,
        "score",
        str(s3.local / "log.parquet"),
        "-o",
        f"s3://{BUCKET}/o.parquet",
    )
    assert refused.returncode == 2 and "write it locally" in refused.stderr, refused.stderr
