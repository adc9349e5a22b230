"""Remote logs (`s3://...`) read through Polars with its storage options, against moto's S3
server on 127.0.0.1 (no network): the same frame, sample and metadata as the local file, the
command line through the AWS_* environment, and one line for a missing object or bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from s3_stand_in import Bucket, free_port, s3_bucket

from ragframe.errors import ConfigError, InputError
from ragframe.inputs.columns import load_frame
from ragframe.inputs.io import input_path, open_input, read_metadata, write_parquet
from ragframe.inputs.sample import draw_sample

DATA = Path(__file__).resolve().parent.parent / "data"
BUCKET = "ragframe-logs"


@dataclass
class Store(Bucket):
    """The stand-in bucket holding the sample log, one object per format."""

    local: Path  # the logs uploaded, as local files, one per format

    def put(self, key: str, path: Path) -> str:
        # public-read: http(s) URLs of the same objects are read with no credentials
        self.client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes(), ACL="public-read")
        return f"s3://{BUCKET}/{key}"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """moto's S3 server with a bucket holding the shipped sample as Parquet, JSONL and CSV."""
    with s3_bucket(BUCKET) as bucket:
        local = tmp_path_factory.mktemp("logs")
        frame = pl.read_parquet(DATA / "sample.parquet")
        frame.write_parquet(local / "log.parquet")
        frame.write_ndjson(local / "log.jsonl")
        as_json = [json.dumps(cell) for cell in frame.get_column("contexts").to_list()]
        frame.with_columns(pl.Series("contexts", as_json)).write_csv(local / "log.csv")
        store = Store(bucket.name, bucket.endpoint, bucket.client, local)
        for name in ("log.parquet", "log.jsonl", "log.csv"):
            store.put(name, local / name)
        yield store


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
    closed = {**s3.options, "aws_endpoint_url": f"http://127.0.0.1:{free_port()}"}
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


def test_a_scheme_polars_does_not_read_is_named_not_a_missing_file() -> None:
    """Polars takes "gcp://..." for a local path: it said the object did not exist."""
    with pytest.raises(InputError) as caught:
        open_input("gcp://bucket/log.parquet", storage_options={"token": "t"})
    message = str(caught.value)
    assert "'gs://bucket/log.parquet'" in message and "does not exist" not in message, message


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


# ------------------------------------------------------------------------ storage options checked


def _no_aws_environment(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Nothing but the test's own options reaches the store: no AWS_* variable, no ~/.aws."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))


def test_no_region_is_ragframe_s_hint_never_polars_warning(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a region or an endpoint Polars warns "'(default_)region' not set" and asks
    s3.amazonaws.com for the bucket's region (here, with no network, in vain): the user gets
    one line saying to set aws_region / AWS_REGION, and Polars' own warning never shows."""
    _no_aws_environment(monkeypatch, tmp_path)
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "max_retries": 0}
    url = f"s3://{BUCKET}/log.parquet"
    for read in (
        lambda: load_frame(url, storage_options=keys),
        lambda: input_path(url, storage_options=keys),
        lambda: read_metadata(url, storage_options=keys),
    ):
        with warnings.catch_warnings(record=True) as said, pytest.raises(InputError) as caught:
            warnings.simplefilter("always")
            read()
        message = str(caught.value)
        assert url in message and "no AWS region was set" in message, message
        assert "aws_region" in message and "AWS_REGION" in message and "\n" not in message
        assert not [w for w in said if "region" in str(w.message)], [str(w.message) for w in said]


def test_a_region_found_by_polars_is_one_warning_of_ragframe() -> None:
    """When Polars finds the region itself (a real AWS bucket), the read goes on with one
    ragframe warning saying how to skip that request; Polars' text is not shown."""
    from ragframe.inputs import io as rio

    def call() -> int:
        warnings.warn(
            "'(default_)region' not set; polars will try to get it from bucket\n\nSet the "
            "region manually to silence this warning.",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("something else", DeprecationWarning, stacklevel=1)
        return 7

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert rio._remote_open("s3://bucket/log.parquet", call) == 7
    texts = [str(w.message) for w in said]
    assert "something else" in texts, texts  # other warnings pass through as they were
    region = [t for t in texts if "region" in t]
    assert len(region) == 1 and "(default_)" not in region[0], texts
    assert "aws_region" in region[0] and "AWS_REGION" in region[0] and "\n" not in region[0]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"aws_regoin": "us-east-1"}, "did you mean 'aws_region'"),
        ({"aws_bogus": "x"}, "'aws_bogus'"),
        ({"endpoint_ulr": "http://127.0.0.1:1"}, "did you mean 'endpoint_url'"),
        ({"google_service_account": "key.json"}, "a Google Cloud Storage key"),
        ({"MAX_RETRIES": 0}, "did you mean 'max_retries'"),
    ],
)
def test_an_unknown_option_key_is_refused_before_any_request(
    s3: Store, options: dict[str, Any], says: str
) -> None:
    """Polars ignores a key object_store does not know: a typo would fall back to other
    credentials (or none) without a word. The endpoint is closed: a request would fail."""
    closed = {**s3.options, "aws_endpoint_url": f"http://127.0.0.1:{free_port()}"}
    url = f"s3://{BUCKET}/log.parquet"
    for read in (
        lambda: load_frame(url, storage_options={**closed, **options}),
        lambda: input_path(url, storage_options={**closed, **options}),
        lambda: read_metadata(url, storage_options={**closed, **options}),
    ):
        with pytest.raises(ConfigError) as caught:
            read()
        message = str(caught.value)
        key = next(iter(options))
        assert url in message and repr(key) in message and says in message, message
        assert "\n" not in message, message


def test_an_http_url_refuses_store_keys(s3: Store) -> None:
    url = f"{s3.endpoint}/{BUCKET}/log.parquet"
    with pytest.raises(ConfigError, match=r"'aws_region'.*http\(s\) URL takes only Polars' own"):
        load_frame(url, storage_options={"aws_region": "us-east-1"})
    assert load_frame(url, storage_options={"max_retries": 1}).height == 20


def test_every_spelling_object_store_takes_is_read(s3: Store) -> None:
    """Aliases and upper case are object_store's own spellings: accepted, and used."""
    aliases = {
        "endpoint": s3.endpoint,
        "ACCESS_KEY_ID": "testing",
        "secret_access_key": "testing",
        "Region": "us-east-1",
        "allow_http": "true",
        "timeout": "30s",
        "file_cache_ttl": 0,
    }
    url = f"s3://{BUCKET}/log.parquet"
    assert load_frame(url, storage_options=aliases).equals(load_frame(s3.local / "log.parquet"))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"aws_endpoint_url": "127.0.0.1:9000"}, "'http://127.0.0.1:9000'"),
        ({"endpoint": "http://127.0.0.1:99999"}, "its port"),
        ({"aws_access_key_id": "testing\n"}, "line break"),
        ({"aws_region": " us-east-1"}, "space"),
    ],
)
def test_an_option_value_polars_would_panic_on_is_refused(
    s3: Store, change: dict[str, str], says: str
) -> None:
    """An endpoint without its scheme, or a key read from a file with its newline, made
    Polars panic (pyo3's PanicException, a BaseException): refused first, in one line."""
    options = {k: v for k, v in s3.options.items() if k != "aws_endpoint_url"}
    url = f"s3://{BUCKET}/log.parquet"
    with pytest.raises(ConfigError) as caught:
        load_frame(url, storage_options={"aws_endpoint_url": s3.endpoint, **options, **change})
    message = str(caught.value)
    assert url in message and repr(next(iter(change))) in message and says in message, message
    assert "\n" not in message and "testing" not in message, message  # no secret echoed


def test_an_environment_value_polars_would_panic_on_is_refused(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_aws_environment(monkeypatch, tmp_path)
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing\r\n")
    url = f"s3://{BUCKET}/log.parquet"
    with pytest.raises(ConfigError) as caught:
        load_frame(url)
    message = str(caught.value)
    assert url in message and "AWS_SECRET_ACCESS_KEY" in message and "line break" in message
    assert "\n" not in message, message


def test_a_panic_in_polars_cloud_reader_is_one_line() -> None:
    """Whatever else makes Polars panic becomes one line naming the URL and what to check,
    not a PanicException (which `except Exception` does not catch)."""
    import polars as pl

    from ragframe.inputs import io as rio

    def call() -> None:
        raise pl.exceptions.PanicException("request valid: InvalidUri(InvalidFormat)")

    url = "s3://bucket/log.parquet"
    with pytest.raises(InputError) as caught:
        rio._remote_call(url, call)
    message = str(caught.value)
    assert url in message and "InvalidUri" in message and "storage_options" in message, message
    assert "AWS_ENDPOINT_URL" in message and "\n" not in message, message


def test_summarize_says_a_broken_endpoint_variable_in_one_line(s3: Store) -> None:
    """AWS_ENDPOINT_URL without its scheme made Polars panic: a Rust backtrace on stderr."""
    broken = Store(BUCKET, s3.endpoint.removeprefix("http://"), s3.client, s3.local)
    done = _cli(broken, None, "summarize", f"s3://{BUCKET}/log.parquet")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "AWS_ENDPOINT_URL" in lines[0], done.stderr
    assert "'http://127.0.0.1:" in lines[0], done.stderr


def _pem_key_and_certificate() -> tuple[str, str]:
    """A fresh RSA private key and a self-signed certificate of it, both as PEM text: the
    multi-line documents a service-account key and a proxy's CA certificate hold."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ragframe test proxy CA")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return pem_key, certificate.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.parametrize("key", ["proxy_ca_certificate", "AWS_PROXY_CA_CERTIFICATE"])
def test_a_proxy_ca_certificate_of_many_lines_is_read(s3: Store, key: str) -> None:
    """A PEM certificate is lines by nature: Polars reads it (here through moto as the proxy);
    ragframe refused it as "a line break or another control character"."""
    _, certificate = _pem_key_and_certificate()
    options = {**s3.options, "proxy_url": s3.endpoint, key: certificate}
    url = f"s3://{BUCKET}/log.parquet"
    assert load_frame(url, storage_options=options).equals(load_frame(s3.local / "log.parquet"))


def test_a_pretty_printed_service_account_key_reaches_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Google service-account key is JSON, often pretty-printed (`$(cat sa.json)`), with a
    PEM key inside: Polars takes it as it takes the compact form. Given as an option or as
    GOOGLE_SERVICE_ACCOUNT_KEY, it reaches the store (closed here: "cannot reach"), as the
    compact one does, instead of being refused for its line breaks."""
    for name in list(os.environ):
        if name.startswith("GOOGLE_"):
            monkeypatch.delenv(name)
    closed = f"http://127.0.0.1:{free_port()}"
    pem_key, _ = _pem_key_and_certificate()
    account = {
        "type": "service_account",
        "project_id": "ragframe-test",
        "private_key_id": "k1",
        "private_key": pem_key,
        "client_email": "reader@ragframe-test.iam.gserviceaccount.com",
        "token_uri": f"{closed}/token",
    }
    url = "gs://ragframe-logs/log.parquet"
    said = []
    for text in (json.dumps(account), json.dumps(account, indent=2) + "\n"):
        base = {"google_base_url": closed, "max_retries": 0}
        with pytest.raises(InputError) as caught:
            load_frame(url, storage_options={**base, "google_service_account_key": text})
        said.append(str(caught.value))
        monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", text)
        with pytest.raises(InputError) as caught:
            load_frame(url, storage_options=base)
        said.append(str(caught.value))
        monkeypatch.delenv("GOOGLE_SERVICE_ACCOUNT_KEY")
    assert all("cannot reach the store" in line for line in said), said
    assert len(set(said)) == 1, said


@pytest.mark.parametrize(
    ("store", "option", "variable"),
    [
        ("s3", "aws_session_token", "AWS_SESSION_TOKEN"),
        ("gs", "bearer_token", "GOOGLE_BEARER_TOKEN"),
    ],
)
def test_a_header_value_with_a_line_break_is_still_refused(
    store: str, option: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only documents (a JSON key, a PEM certificate) may hold lines: a token becomes header
    text, on which Polars panicked. Both the option and the variable are refused."""
    url = f"{store}://ragframe-logs/log.parquet"
    with pytest.raises(ConfigError, match="line break"):
        load_frame(url, storage_options={option: "token\n"})
    monkeypatch.setenv(variable, "token\n")
    with pytest.raises(ConfigError, match=f"{variable}.*line break"):
        load_frame(url, storage_options={"max_retries": 0})


@pytest.mark.parametrize("alias", ["endpoint_url", "endpoint", "AWS_ENDPOINT", "aws_endpoint_url"])
def test_an_option_overrides_a_broken_variable_under_any_alias(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alias: str
) -> None:
    """Polars builds the store from the environment, then applies the options: an option under
    any of object_store's spellings of a key replaces its variable, which then does not matter
    (ragframe refused a broken AWS_ENDPOINT_URL that the option `endpoint_url` overrode)."""
    _no_aws_environment(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true\n")
    options = {
        k: v for k, v in s3.options.items() if k not in ("aws_endpoint_url", "aws_allow_http")
    }
    options |= {alias: s3.endpoint, "allow_http": "true"}
    url = f"s3://{BUCKET}/log.parquet"
    assert load_frame(url, storage_options=options).equals(load_frame(s3.local / "log.parquet"))
    del options["allow_http"]  # AWS_ALLOW_HTTP is read now: refused, naming it
    with pytest.raises(ConfigError, match=r"AWS_ALLOW_HTTP.*line break"):
        load_frame(url, storage_options=options)
