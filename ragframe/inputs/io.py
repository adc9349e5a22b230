"""Logs in (Parquet, JSON Lines, CSV; local files or URLs), Parquet out: nested columns stay
nested, run facts go into the file metadata, and files are written atomically and durably (a
temporary file, fsynced, renamed into place, then the directory fsynced).

A URL (`s3://`, `gs://`, `az://`, `hf://`, `http(s)://` ...) is read through Polars' scans, with
Polars' `storage_options` (or, without them, the environment object_store reads: AWS_*,
GOOGLE_*, AZURE_*, HF_TOKEN); a local path through pyarrow, as before."""

from __future__ import annotations

import ast
import difflib
import glob
import json
import os
import re
import tempfile
import warnings
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar
from urllib.parse import urlsplit

import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ragframe.errors import ConfigError, InputError

METADATA_KEY = b"ragframe"


#: Rows per Parquet row group written by ragframe (the default chunk of a streamed run).
ROW_GROUP_ROWS = 2000


class AtomicParquetWriter:
    """Writes row groups to a temporary file beside the target and renames it on close.

    A crash leaves the old output (or none) in place, never a half-written file. The temporary
    file gets the user's default permissions (umask), like any file the user creates.
    """

    def __init__(
        self, path: str | Path, schema: pa.Schema, metadata: dict[str, Any], *, overwrite: bool
    ) -> None:
        refuse_remote_output(path)
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise ConfigError(
                f"output {str(self.path)!r} exists; pass overwrite=True (--overwrite) to replace it"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(self.path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.{os.getpid()}.", suffix=".tmp", dir=self.path.parent
        )
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        self._tmp = Path(tmp)
        self._schema = schema.with_metadata(
            {**(schema.metadata or {}), METADATA_KEY: json.dumps(metadata, default=str).encode()}
        )
        self._writer = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")

    def write(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        schema = self._schema.remove_metadata()
        if not table.schema.equals(schema):  # (a cast, even to the same schema, costs ~20 ms)
            table = table.cast(schema)
        # Row groups of a streamed chunk's size, also for a frame written at once, so that a
        # reader after a few rows of a big file (the report's worst rows) decodes few groups.
        self._writer.write_table(table, ROW_GROUP_ROWS)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Metadata known only at the end (the run's totals) replaces what was given at start."""
        self._writer.add_key_value_metadata(
            {METADATA_KEY.decode(): json.dumps(metadata, default=str)}
        )

    def close(self) -> None:
        """Finish the file and put it in place durably: the data reaches the disk before the
        rename, and the rename (a change to the directory) reaches it after; otherwise a power
        cut soon after could leave an empty or missing output where a complete one was reported."""
        self._writer.close()
        _fsync_path(self._tmp, directory=False)
        os.replace(self._tmp, self.path)
        _fsync_path(self.path.parent, directory=True)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)


def _fsync_path(path: Path, *, directory: bool) -> None:
    """fsync a file or a directory by path (a directory is opened read-only to be synced)."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ remote paths

#: URL schemes read through Polars' object-store readers: its cloud schemes (Amazon S3, Google
#: Cloud Storage, Azure, Hugging Face) and plain http(s).
REMOTE_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "adl", "abfs", "abfss", "hf", "http", "https"}
)
#: Schemes people write for a store whose Polars spelling differs (Polars takes "gcp://..." for
#: a local path, and said the object did not exist).
_SCHEME_SPELLED = {"gcp": "gs"}
#: Polars' `storage_options`: object_store's keys (aws_endpoint_url, aws_access_key_id, ...),
#: text; Polars' own keys (max_retries, file_cache_ttl, ...) take integers.
StorageOptions = Mapping[str, Any]
#: A URL's scheme: two characters or more, so that a Windows drive ("C://data") is a path.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
#: What `pathlib.Path` makes of a URL: it collapses the "//" after the scheme ("s3:/b/key").
_COLLAPSED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/(?!/)")
#: Where each store's credentials come from: the storage_options keys, then the environment.
_CREDENTIALS = {
    "s3": "aws_access_key_id, aws_secret_access_key, aws_region, aws_endpoint_url in "
    "storage_options, or AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL "
    "(and AWS_ALLOW_HTTP=true for an http endpoint) in the environment",
    "gs": "google_service_account in storage_options, or GOOGLE_SERVICE_ACCOUNT / "
    "GOOGLE_APPLICATION_CREDENTIALS in the environment",
    "az": "account_name and account_key (or sas_token) in storage_options, or "
    "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY in the environment",
    "hf": "token in storage_options, or HF_TOKEN in the environment",
    "http": "the URL (an http(s) server takes no storage credentials here)",
}
_STORE_OF = {"s3a": "s3", "gcs": "gs", "https": "http"}
_STORE_OF |= dict.fromkeys(("azure", "adl", "abfs", "abfss"), "az")


class RemotePath(str):
    """A URL kept as text (a `pathlib.Path` would collapse its "//"), answering the questions
    that code written for local paths asks of one: `name`, `suffix`, `stem`, `resolve()`.
    Polars' readers take it as the string it is."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The last part of the URL's path (no query string)."""
        return self.split("://", 1)[1].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    def resolve(self) -> RemotePath:
        """A URL is already absolute (and never equal to a local path it is compared with)."""
        return self


def remote_url(path: Any) -> RemotePath | None:
    """`path` as a RemotePath when it is a URL ragframe reads remotely, else None (a local path).

    A string with a scheme ragframe does not read (`ftp://`) is an InputError naming those it
    does. A `pathlib.Path` made from a URL ("s3:/bucket/key": the "//" collapsed) that names no
    local file is taken as that URL, so a caller that wrapped the URL in Path still reads it.
    """
    if isinstance(path, str):
        found = _URL.match(path)
        if found is None:
            return None
        scheme = found.group(1).lower()
        if scheme in _SCHEME_SPELLED:
            raise InputError(
                f"cannot read {path!r}: Polars reads that store's URLs as "
                f"{_SCHEME_SPELLED[scheme]}://; write it "
                f"{_SCHEME_SPELLED[scheme] + path[found.end(1) :]!r}"
            )
        if scheme not in REMOTE_SCHEMES:
            raise InputError(
                f"cannot read {path!r}: ragframe reads local files and URLs of the schemes "
                f"{', '.join(sorted(REMOTE_SCHEMES))}; copy the file locally first"
            )
        return RemotePath(path)
    if isinstance(path, Path):
        text = str(path)
        found = _COLLAPSED_URL.match(text)
        if found and found.group(1).lower() in REMOTE_SCHEMES and not path.exists():
            return RemotePath(f"{found.group(1)}://{text[found.end() :]}")
    return None


def refuse_remote_output(path: str | Path) -> None:
    """ragframe writes its Parquet atomically on a local disk: refuse a URL as an output (or
    its collapsed Path form, which would otherwise create a local directory named "s3:")."""
    text = str(path)
    found = _URL.match(text) or _COLLAPSED_URL.match(text)
    if found and found.group(1).lower() in REMOTE_SCHEMES:
        url = text if _URL.match(text) else f"{found.group(1)}://{text[found.end() :]}"
        raise ConfigError(
            f"cannot write the output to {url!r}: ragframe writes a local file (atomically); "
            "write it locally, then copy it (e.g. aws s3 cp scored.parquet " + url + ")"
        )


#: Suffixes of the formats a scored output is not: ragframe writes Parquet only.
NOT_PARQUET = (".csv", ".jsonl", ".ndjson", ".json")


def refuse_non_parquet_output(output: str | Path | None) -> None:
    """The scored output is always Parquet: refuse a name that says another format (a file
    named .csv holding Parquet bytes would mislead whoever opens it)."""
    suffix = Path(output).suffix.lower() if output else ""
    if suffix in NOT_PARQUET:
        raise ConfigError(
            f"the output is always Parquet, but {str(output)!r} is named as {suffix}; "
            f"name it {str(Path(str(output)).with_suffix('.parquet'))!r}"
        )


def refuse_unwritable_output(path: str | Path) -> None:
    """What would stop an output being written, said before a run spends its requests: a URL,
    a name for another format, an existing directory, a directory that cannot be created or
    written (tried with a probe file, so that it holds for root and read-only mounts too)."""
    refuse_remote_output(path)
    refuse_non_parquet_output(path)
    target = Path(path)
    if target.is_dir():
        raise ConfigError(
            f"output {str(target)!r} is a directory; name a file, e.g. "
            f"{str(target / 'scored.parquet')!r}"
        )
    folder = target.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the writer creates the missing ones below it
    if not folder.is_dir():
        raise ConfigError(
            f"cannot write the output {str(target)!r}: {str(folder)!r} is a file, not a "
            "directory; choose another path"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".ragframe-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the output {str(target)!r}: the directory {str(folder)!r} is not "
            f"writable ({exc.strerror or exc}); choose another path"
        ) from exc


def remote_problem(url: str, exc: BaseException) -> InputError:
    """One line for an object store's refusal: what went wrong with `url` and what to check,
    from Polars' (object_store's) message, which holds the store's whole XML reply."""
    text = str(exc)
    scheme = url.split("://", 1)[0].lower()
    store = _STORE_OF.get(scheme, scheme)
    credentials = _CREDENTIALS.get(store, "storage_options")
    host = url.split("://", 1)[1].split("/", 1)[0]
    if "NoSuchBucket" in text:
        return InputError(
            f"remote input {url!r}: the bucket {host!r} does not exist; check the URL's bucket "
            f"and the endpoint it is asked at ({credentials})"
        )
    if "169.254.169.254" in text or "metadata.google.internal" in text:
        return InputError(
            f"remote input {url!r}: no credentials were found (the store's client fell back to "
            f"the cloud instance's metadata service); give {credentials}"
        )
    denied = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", " 403")
    if any(word in text for word in (*denied, " 401", "Unauthorized")):
        code = next((w.strip() for w in (*denied, " 401", "Unauthorized") if w in text), "")
        return InputError(
            f"remote input {url!r}: access denied ({code}); check the credentials: {credentials}"
        )
    if (
        isinstance(exc, FileNotFoundError)
        or "NoSuchKey" in text
        or " 404" in text
        or "not found" in text.lower()
    ):
        where = "no object at that key" if "NoSuchKey" in text else "no bucket or object there"
        return InputError(
            f"remote input {url!r} does not exist (the store has {where}); check the URL's "
            "bucket, path and file name"
        )
    if isinstance(exc, ConnectionError) or "connect" in text.lower() or "dns error" in text:
        cause = re.sub(r"^\d+: ", "", [ln.strip() for ln in text.splitlines() if ln.strip()][-1])
        return InputError(
            f"cannot reach the store for {url!r} ({cause}); check the endpoint and the "
            f"network ({credentials})"
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return InputError(f"cannot read {url!r}: {first}")


def _words(text: str) -> frozenset[str]:
    """The space-separated words of `text` (long lists of keys kept readable)."""
    return frozenset(text.split())


# Which storage_options keys a URL's store reads. Polars hands every key it does not use itself
# to object_store's `FromStr` for the URL's store (after lower-casing it) and drops, without a
# word, every key that does not parse (polars-io `parse_untyped_config`: "Silently ignores"):
# a typo falls back to the environment's credentials, or to none. So ragframe refuses, before
# any request, a key that the store would ignore. Refused rather than warned about: the lists
# below are complete, being the `FromStr` match arms of object_store 0.14 (`AmazonS3ConfigKey`,
# `GoogleConfigKey`, `AzureConfigKey`, and `ClientConfigKey` with or without the store's
# prefix), the version Polars 2.1 links (every alias was found in its compiled library), plus
# the keys Polars reads itself (`POLARS_STORAGE_CONFIG_KEYS`, exact case) and those its Python
# credential providers read (`profile` for S3, `token` for Google). An http(s) URL reads only
# Polars' own keys; an hf:// URL `token` (polars-io `CloudOptions::from_untyped_config`).
_CLIENT_KEYS = _words(
    "allow_http allow_invalid_certificates disable_system_certificates connect_timeout "
    "default_content_type http1_only http2_only http2_keep_alive_interval "
    "http2_keep_alive_timeout http2_keep_alive_while_idle http2_max_frame_size "
    "pool_idle_timeout pool_max_idle_per_host proxy_url proxy_ca_certificate proxy_excludes "
    "randomize_addresses read_timeout timeout user_agent"
)
_S3_KEYS = (
    _words(
        "aws_access_key_id access_key_id aws_secret_access_key secret_access_key "
        "aws_default_region default_region aws_region region aws_bucket aws_bucket_name "
        "bucket_name bucket aws_endpoint_url aws_endpoint endpoint_url endpoint "
        "aws_endpoint_url_s3 aws_session_token aws_token session_token token "
        "aws_virtual_hosted_style_request virtual_hosted_style_request aws_s3_express "
        "s3_express aws_imdsv1_fallback imdsv1_fallback aws_metadata_endpoint "
        "metadata_endpoint aws_unsigned_payload unsigned_payload aws_checksum_algorithm "
        "checksum_algorithm aws_container_credentials_relative_uri "
        "container_credentials_relative_uri aws_container_credentials_full_uri "
        "container_credentials_full_uri aws_container_authorization_token_file "
        "container_authorization_token_file aws_web_identity_token_file "
        "web_identity_token_file aws_role_arn role_arn aws_role_session_name role_session_name "
        "aws_endpoint_url_sts endpoint_url_sts aws_skip_signature skip_signature "
        "aws_copy_if_not_exists copy_if_not_exists aws_conditional_put conditional_put "
        "aws_disable_tagging disable_tagging aws_disable_bulk_delete disable_bulk_delete "
        "aws_request_payer request_payer aws_allow_http aws_server_side_encryption "
        "server_side_encryption aws_sse_kms_key_id sse_kms_key_id aws_sse_bucket_key_enabled "
        "sse_bucket_key_enabled aws_sse_customer_key_base64 sse_customer_key_base64 "
        "aws_profile profile"
    )
    | _CLIENT_KEYS
    | {f"aws_{key}" for key in _CLIENT_KEYS}
)
_GS_KEYS = (
    _words(
        "google_service_account service_account google_service_account_path "
        "service_account_path google_service_account_key service_account_key google_bucket "
        "google_bucket_name bucket bucket_name google_base_url base_url "
        "google_application_credentials application_credentials google_bearer_token "
        "bearer_token google_skip_signature skip_signature token"
    )
    | _CLIENT_KEYS
    | {f"google_{key}" for key in _CLIENT_KEYS}
)
_AZ_KEYS = (
    _words(
        "azure_storage_account_key azure_storage_access_key azure_storage_master_key "
        "master_key account_key access_key azure_storage_account_name account_name "
        "azure_storage_client_id azure_client_id client_id azure_storage_client_secret "
        "azure_client_secret client_secret azure_storage_tenant_id azure_storage_authority_id "
        "azure_tenant_id azure_authority_id tenant_id authority_id "
        "azure_storage_authority_host azure_authority_host authority_host "
        "azure_storage_sas_key azure_storage_sas_token sas_key sas_token azure_storage_token "
        "bearer_token token azure_storage_use_emulator use_emulator azure_storage_endpoint "
        "azure_endpoint endpoint azure_msi_endpoint azure_identity_endpoint identity_endpoint "
        "msi_endpoint azure_object_id object_id azure_msi_resource_id msi_resource_id "
        "azure_federated_token_file federated_token_file azure_use_fabric_endpoint "
        "use_fabric_endpoint azure_use_azure_cli use_azure_cli azure_skip_signature "
        "skip_signature azure_container_name container_name azure_disable_tagging "
        "disable_tagging azure_fabric_token_service_url fabric_token_service_url "
        "azure_fabric_workload_host fabric_workload_host azure_fabric_session_token "
        "fabric_session_token azure_fabric_cluster_identifier fabric_cluster_identifier "
        "azure_credential_type credential_type azure_storage_encryption_key encryption_key "
        "azure_allow_http"
    )
    | _CLIENT_KEYS
    | {f"azure_{key}" for key in _CLIENT_KEYS}
)
_STORE_KEYS: dict[str, frozenset[str]] = {
    "s3": _S3_KEYS,
    "gs": _GS_KEYS,
    "az": _AZ_KEYS,
    "hf": frozenset({"token"}),
    "http": frozenset(),
}
_STORE_NAMES = {
    "s3": "an Amazon S3",
    "gs": "a Google Cloud Storage",
    "az": "an Azure",
    "hf": "a Hugging Face",
}
#: The keys Polars reads itself (integers; exact case), from polars.io.cloud._utils, whose
#: list is taken when present so that a newer Polars' key is not refused.
_POLARS_KEYS = _words(
    "file_cache_ttl max_retries retry_timeout_ms retry_init_backoff_ms retry_max_backoff_ms "
    "retry_base_multiplier rate_read_init rate_read_floor rate_read_ceiling rate_write_init "
    "rate_write_floor rate_write_ceiling"
)
try:
    from polars.io.cloud._utils import POLARS_STORAGE_CONFIG_KEYS as _FOUND
except ImportError:  # an older Polars: its keys are a subset of the list above
    _FOUND = frozenset()
_POLARS_KEYS |= frozenset(_FOUND)
#: Keys (lower case, any alias) whose value object_store parses as a URL: one without its
#: scheme, or with a port out of range, made Polars panic ("request valid: InvalidUri").
_URL_KEYS = _words(
    "aws_endpoint_url aws_endpoint endpoint_url endpoint aws_endpoint_url_s3 "
    "aws_endpoint_url_sts endpoint_url_sts aws_metadata_endpoint metadata_endpoint "
    "azure_storage_endpoint azure_endpoint azure_msi_endpoint azure_identity_endpoint "
    "identity_endpoint msi_endpoint azure_storage_authority_host azure_authority_host "
    "authority_host google_base_url base_url proxy_url aws_proxy_url google_proxy_url "
    "azure_proxy_url"
)
#: The prefix of the environment variables object_store reads for each store (`from_env`).
_ENV_PREFIX = {"s3": "AWS_", "gs": "GOOGLE_", "az": "AZURE_"}
#: object_store's spellings of one key (the `FromStr` arms that name the same key, the first
#: taken as its name): an option under any of them overrides the environment variable of any
#: other, since Polars builds the store `from_env` and then applies the options. A client key
#: (`timeout`) is also spelled with the store's prefix (`aws_timeout`).
_ALIASES: dict[str, dict[str, str]] = {
    store: {alias: group.split()[0] for group in groups for alias in group.split()}
    for store, groups in {
        "s3": (
            "aws_access_key_id access_key_id",
            "aws_secret_access_key secret_access_key",
            "aws_default_region default_region",
            "aws_region region",
            "aws_bucket aws_bucket_name bucket_name bucket",
            "aws_endpoint_url aws_endpoint endpoint_url endpoint",
            "aws_session_token aws_token session_token token",
            *(
                f"aws_{key} {key}"
                for key in _words(
                    "virtual_hosted_style_request s3_express imdsv1_fallback metadata_endpoint "
                    "unsigned_payload checksum_algorithm container_credentials_relative_uri "
                    "container_credentials_full_uri container_authorization_token_file "
                    "web_identity_token_file role_arn role_session_name endpoint_url_sts "
                    "skip_signature copy_if_not_exists conditional_put disable_tagging "
                    "disable_bulk_delete request_payer server_side_encryption sse_kms_key_id "
                    "sse_bucket_key_enabled sse_customer_key_base64"
                )
            ),
        ),
        "gs": (
            "google_service_account service_account google_service_account_path "
            "service_account_path",
            "google_service_account_key service_account_key",
            "google_bucket google_bucket_name bucket bucket_name",
            "google_base_url base_url",
            "google_application_credentials application_credentials",
            "google_bearer_token bearer_token",
            "google_skip_signature skip_signature",
        ),
        "az": (
            "azure_storage_account_key azure_storage_access_key azure_storage_master_key "
            "master_key account_key access_key",
            "azure_storage_account_name account_name",
            "azure_storage_client_id azure_client_id client_id",
            "azure_storage_client_secret azure_client_secret client_secret",
            "azure_storage_tenant_id azure_storage_authority_id azure_tenant_id "
            "azure_authority_id tenant_id authority_id",
            "azure_storage_authority_host azure_authority_host authority_host",
            "azure_storage_sas_key azure_storage_sas_token sas_key sas_token",
            "azure_storage_token bearer_token token",
            "azure_storage_use_emulator use_emulator",
            "azure_storage_endpoint azure_endpoint endpoint",
            "azure_msi_endpoint azure_identity_endpoint identity_endpoint msi_endpoint",
            "azure_storage_encryption_key encryption_key",
            *(
                f"azure_{key} {key}"
                for key in _words(
                    "object_id msi_resource_id federated_token_file use_fabric_endpoint "
                    "use_azure_cli skip_signature container_name disable_tagging "
                    "fabric_token_service_url fabric_workload_host fabric_session_token "
                    "fabric_cluster_identifier credential_type"
                )
            ),
        ),
    }.items()
}
#: Keys (by their name in `_ALIASES`) whose value is a document of many lines, parsed as such:
#: a service-account key (JSON, often pretty-printed) and a proxy's CA certificate (PEM).
#: Polars reads them with their line breaks and surrounding blanks; every other text value
#: becomes a header, a URL, a host or a path, where a control character made Polars panic.
_DOCUMENT_KEYS = frozenset({"google_service_account_key", "proxy_ca_certificate"})


def _key_name(store: str, key: str) -> str:
    """One name for all of object_store's spellings of `key` in `store` (lower case)."""
    lower = key.lower()
    if lower in _ALIASES.get(store, {}):
        return _ALIASES[store][lower]
    bare = lower.removeprefix(_ENV_PREFIX.get(store, "").lower())
    return bare if bare in _CLIENT_KEYS else lower


def _store(url: str) -> str:
    """The store a URL's scheme reads from: s3, gs, az, hf or http."""
    scheme = url.split("://", 1)[0].lower()
    return _STORE_OF.get(scheme, scheme)


def _value_problem(store: str, key: str, value: Any) -> str | None:
    """Why Polars could not use this text value (it panicked on each), or None. Never echoes
    the value, which may be a secret; an endpoint's is shown, being no secret. A document's
    lines (a JSON key, a PEM certificate) are its own: not refused."""
    if not isinstance(value, str) or _key_name(store, key) in _DOCUMENT_KEYS:
        return None  # Polars says itself which type it expected
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        where = "ends with" if value.rstrip("\r\n") != value else "holds"
        return (
            f"its value {where} a line break or another control character (read from a file "
            "with its newline?); strip it"
        )
    if value != value.strip():
        return "its value starts or ends with a space; strip it"
    if key.lower() in _URL_KEYS:
        try:
            parts = urlsplit(value)
            port_ok = parts.port is None or 0 < parts.port < 65536
        except ValueError:
            parts, port_ok = urlsplit(""), False
        shown = "its value" if "@" in value else repr(value)  # a proxy's URL may hold a password
        if not port_ok:
            return f"{shown} is not a URL object_store can use (its port); fix it"
        if parts.scheme not in ("http", "https") or not parts.netloc:
            example = "" if "@" in value else f", e.g. 'http://{value.split('://')[-1]}'"
            return f"{shown} is not an http(s) URL; give it with its scheme{example}"
    return None


def check_storage_options(url: str, storage_options: StorageOptions | None) -> None:
    """Refuse, before any request, what Polars would silently ignore or panic on: a key the
    URL's store does not read (with the close matches), and a text value it cannot use (an
    endpoint without its scheme, a key with its newline), in the options or in the store's
    environment variables (read when no option gives that key under any of its spellings)."""
    store = _store(url)
    known = _STORE_KEYS.get(store)
    if known is None:
        return
    for key, value in (storage_options or {}).items():
        if key in _POLARS_KEYS:
            continue
        lower = key if store == "hf" else key.lower()  # Polars' hf:// takes `token` as is
        if lower not in known:
            raise ConfigError(f"storage_options for {url!r}: {_unknown_key(key, store)}")
        problem = _value_problem(store, key, value)
        if problem:
            raise ConfigError(f"storage_options for {url!r}: {key!r}: {problem}")
    given = {_key_name(store, key) for key in storage_options or {}}
    prefix = _ENV_PREFIX.get(store)
    for name, value in os.environ.items() if prefix else ():
        lower = name.lower()
        if name.startswith(prefix or "") and lower in known and _key_name(store, name) not in given:
            problem = _value_problem(store, name, value)
            if problem:
                raise ConfigError(f"reading {url!r}: the environment variable {name}: {problem}")


def _unknown_key(key: str, store: str) -> str:
    """One line on a key the store does not read: whose key it is, or the close matches."""
    lower = key.lower()
    readable = sorted(_STORE_KEYS[store] | _POLARS_KEYS)
    if store == "http":
        head = (
            f"{key!r} is not read: an http(s) URL takes only Polars' own options (max_retries, "
            "retry_timeout_ms, file_cache_ttl, ...)"
        )
    else:
        head = f"{key!r} is not a key Polars reads for {_STORE_NAMES[store]} URL"
    owners = [name for other, name in _STORE_NAMES.items() if lower in _STORE_KEYS[other]]
    if store != "http" and owners and lower not in _STORE_KEYS[store]:
        return f"{head}: it is {owners[0]} key; drop it, or read a URL of that store"
    close = difflib.get_close_matches(lower, readable, n=3, cutoff=0.75)
    if close:
        return f"{head}; did you mean {' or '.join(repr(c) for c in close)}?"
    if store == "http":
        return f"{head}; drop it"
    return (
        f"{head} (it would be ignored without a word); the keys it reads include "
        f"{_KEY_EXAMPLES[store]} (object_store's configuration keys)"
    )


#: A few keys of each store, for the message on a key it does not read.
_KEY_EXAMPLES = {
    "s3": "aws_access_key_id, aws_secret_access_key, aws_region, aws_endpoint_url",
    "gs": "google_service_account, google_application_credentials, token",
    "az": "account_name, account_key, sas_token",
    "hf": "token",
}


def _opts(url: str, storage_options: StorageOptions | None) -> dict[str, Any] | None:
    """Polars' storage_options as the dict it takes (None: the environment's settings),
    checked first (`check_storage_options`)."""
    check_storage_options(url, storage_options)
    return dict(storage_options) if storage_options else None


#: Polars' warning when an S3 URL has neither a region nor an endpoint: it then asks
#: https://<bucket>.s3.amazonaws.com for the bucket's region (polars-io `build_aws`).
_POLARS_REGION_WARNING = "'(default_)region' not set"
_REGION_HINT = "set aws_region in storage_options or AWS_REGION in the environment"


def _remote_open(url: str, call: Any, format_name: str = "Parquet") -> Any:
    """`_remote_call` for the request that opens a URL (where Polars builds its store), with
    Polars' missing-region warning turned into ragframe's one line: a warning when Polars found
    the region itself, a hint in the error when it could not.

    Only the opening calls, made in the caller's thread, catch warnings: catching them swaps
    process-wide state (not thread-safe), and a chunk read in the reader's thread needs no
    region again (Polars keeps the store and the bucket's region it found)."""
    failure: InputError | None = None
    with warnings.catch_warnings(record=True) as said:
        warnings.filterwarnings("always", message=re.escape(_POLARS_REGION_WARNING))
        try:
            value = _remote_call(url, call, format_name)
        except InputError as exc:
            failure = exc
    region = False
    for caught in said:
        if _POLARS_REGION_WARNING in str(caught.message):
            region = True
        else:  # someone else's warning: passed on as it came
            warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    if failure is not None:
        if not region:
            raise failure
        cause = failure.__cause__ or failure
        if "amazonaws.com" in str(cause):
            raise InputError(
                f"cannot read {url!r}: no AWS region was set, and Polars could not ask AWS for "
                f"the bucket's region ({_last_line(cause)}); {_REGION_HINT} (or aws_endpoint_url"
                " / AWS_ENDPOINT_URL for a store of your own)"
            ) from cause
        raise InputError(f"{failure} (no AWS region was set: {_REGION_HINT})") from cause
    if region:
        warnings.warn(
            f"{url}: no AWS region was set, so Polars asked AWS for the bucket's region (one "
            f"more request); {_REGION_HINT} to skip it",
            UserWarning,
            stacklevel=3,
        )
    return value


def _last_line(exc: BaseException) -> str:
    """The innermost cause in an object_store message ("2: failed to lookup address ...")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return re.sub(r"^\d+: ", "", lines[-1]) if lines else type(exc).__name__


def _remote_call(url: str, call: Any, format_name: str = "Parquet") -> Any:
    """`call()` with its errors as one-line InputErrors (see `remote_failure`). A panic in
    Polars' Rust code (pyo3's PanicException, a BaseException that `except Exception` misses)
    is one of them: it says which setting to check, not a Rust backtrace."""
    try:
        return call()
    except (pl.exceptions.PolarsError, OSError, ValueError, pl.exceptions.PanicException) as exc:
        raise remote_failure(url, exc, format_name) from exc


def remote_failure(url: str, exc: BaseException, format_name: str) -> InputError:
    """Why a remote read failed, in one line: the store's refusal (`remote_problem`), an
    option Polars would not take, a panic in its reader, or bytes that are not the format the
    name says."""
    text = str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    if isinstance(exc, pl.exceptions.PanicException):
        store = _store(url)
        credentials = _CREDENTIALS.get(store, "storage_options")
        return InputError(
            f"cannot read {url!r}: Polars' cloud reader failed on a setting it could not use "
            f"({first}); check the storage_options and the environment it read: {credentials}"
        )
    if isinstance(exc, OSError) or "object-store error" in text:
        return remote_problem(url, exc)
    if isinstance(exc, ValueError):
        return InputError(f"cannot read {url!r}: {first}; check storage_options")
    return InputError(
        f"cannot read {url!r} as {format_name}: {first}. ragframe reads {FORMATS_READ}; check "
        "that the file is complete and in the format its name says"
    )


def input_path(
    path: str | Path, *, storage_options: StorageOptions | None = None
) -> Path | RemotePath:
    """`path` as a Path, or an InputError saying that it does not exist or is a directory.

    A URL comes back as a RemotePath; a Parquet one's footer is read first (one small ranged
    request), so that a missing object or a refused credential is said here, in one line.
    """
    url = remote_url(path)
    if url is not None:
        options = _opts(url, storage_options)
        if INPUT_FORMATS.get(url.suffix.lower()) == "Parquet":
            _remote_open(url, lambda: pl.read_parquet_metadata(url, storage_options=options))
        return url
    return _local_input(path)


def _local_input(path: str | Path) -> Path:
    """A local input as a Path, or an InputError saying it does not exist or is a directory."""
    source = Path(path)
    if not source.exists():
        raise InputError(f"input file {str(source)!r} does not exist")
    if source.is_dir():
        raise InputError(f"input {str(source)!r} is a directory; pass one file: {FORMATS_READ}")
    return source


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """Open a local Parquet file to be read in chunks of rows, or say why it cannot be."""
    source = _local_input(path)
    try:
        # Buffered column-chunk reads: otherwise pyarrow reads a whole row group's column chunk
        # at once (a row group may hold hundreds of thousands of rows), and memory grows with it.
        return pq.ParquetFile(source, buffer_size=1 << 20, pre_buffer=False)
    except (pa.ArrowException, OSError) as exc:
        wide = _wide_integer_columns(source)
        if wide:
            raise InputError(
                f"cannot read {str(source)!r} in chunks: the columns {wide} hold 128-bit "
                "integers, which Arrow does not read; cast them to Int64 or String before "
                "writing the file (pl.col(...).cast(pl.Int64))"
            ) from exc
        raise InputError(
            f"cannot read {str(source)!r} as Parquet: {exc}. ragframe reads {FORMATS_READ}"
        ) from exc


#: 128-bit integer types (where this Polars has them): Polars reads and writes them, Arrow
#: does not, so chunked reads and Parquet output both have to name them.
WIDE_INTEGERS = {getattr(pl, name, None) for name in ("Int128", "UInt128")} - {None}


def _wide_integer_columns(source: Path) -> list[str]:
    """Columns Polars reads as 128-bit integers (Arrow cannot), or [] if none or unreadable."""
    try:
        schema = pl.read_parquet_schema(source)
    except (pl.exceptions.PolarsError, OSError):
        return []
    return [name for name, dtype in schema.items() if dtype in WIDE_INTEGERS]


def empty_frame(parquet: pq.ParquetFile) -> pl.DataFrame:
    """The file's columns and types with no rows: enough to validate a run before reading."""
    # Not Schema.empty_table(): it imports pandas (0.3 s of every `ragframe score`).
    return pl.DataFrame(pl.from_arrow(pa.Table.from_batches([], schema=parquet.schema_arrow)))


def read_chunks(parquet: pq.ParquetFile, chunk_rows: int) -> Iterator[pl.DataFrame]:
    """The file's rows in order, `chunk_rows` at a time, as Polars frames.

    Decoded on the calling thread: pyarrow's decoding threads buy nothing at a few thousand
    rows per chunk, and each keeps buffers of its own (peak memory then grows with the file).
    """
    for batch in parquet.iter_batches(batch_size=chunk_rows, use_threads=False):
        yield pl.DataFrame(pl.from_arrow(batch))


# ------------------------------------------------------------------------------ input formats

#: The formats ragframe reads, by file extension (case-insensitive).
INPUT_FORMATS: dict[str, str] = {
    ".parquet": "Parquet",
    ".pq": "Parquet",
    ".jsonl": "JSON Lines",
    ".ndjson": "JSON Lines",
    ".csv": "CSV",
}
FORMATS_READ = "Parquet (.parquet), JSON Lines (.jsonl, .ndjson) or CSV (.csv)"
_EXTENSION_FOR = {"Parquet": ".parquet", "JSON Lines": ".jsonl", "CSV": ".csv"}

#: One JSON string (RFC 8259: no raw control characters, only the defined escapes), and a cell
#: that is a JSON list of such strings. A regular language, so one vectorised regex checks a
#: whole column before decoding: `str.json_decode` alone would accept `"text"` or `[1, true]`.
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_JSON_LIST_OF_STRINGS = (
    rf"^[ \t\n\r]*\[[ \t\n\r]*(?:{_JSON_STRING}[ \t\n\r]*"
    rf"(?:,[ \t\n\r]*{_JSON_STRING}[ \t\n\r]*)*)?\][ \t\n\r]*$"
)
#: Bytes per CSV block, to start with: pyarrow's reader holds a few dozen blocks (36 MiB at
#: 1 MiB, 203 MiB at 16 MiB, measured), and a row must fit in one block, so a file with longer
#: rows gets a larger block, up to the maximum.
_CSV_BLOCK_BYTES = 1 << 20
_CSV_MAX_BLOCK_BYTES = 1 << 30


class InputFile(ABC):
    """One input log, whatever its format: its columns and types before any row is read
    (`schema_frame`, to validate a run before its first request), then its rows in order, a
    bounded number at a time (`chunks`), or all at once (`read`).

    `chunks` is an ordinary iterator: a caller on an event loop advances it on a thread.
    """

    format: ClassVar[str]

    def __init__(self, path: Path | RemotePath) -> None:
        self.path = path

    @property
    def rows(self) -> int | None:
        """The number of rows, where the format records it (Parquet); None where it does not."""
        return None

    @abstractmethod
    def schema_frame(self) -> pl.DataFrame:
        """The file's columns and types with no rows."""

    @abstractmethod
    def chunks(self, chunk_rows: int) -> Iterator[pl.DataFrame]:
        """The rows in file order, at most `chunk_rows` per frame."""

    def read(self) -> pl.DataFrame:
        """Every row in one frame (for the in-memory API)."""
        frames = list(self.chunks(1 << 16))
        return pl.concat(frames, how="vertical") if frames else self.schema_frame()

    def column_chunks(self, names: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
        """Only the `names` columns, `chunk_rows` rows at a time (order not guaranteed): what a
        check of the values needs, reading no other column where the format allows."""
        for chunk in self.chunks(chunk_rows):
            yield chunk.select(names)

    def _unreadable(self, exc: BaseException) -> InputError:
        return InputError(
            f"cannot read {str(self.path)!r} as {self.format}: {exc}. ragframe reads "
            f"{FORMATS_READ}; check that the file is complete and in the format its name says"
        )


class ParquetInput(InputFile):
    """Parquet: row groups decoded a chunk at a time (see `open_parquet`, `read_chunks`)."""

    format = "Parquet"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._parquet: pq.ParquetFile | None = None

    @property
    def parquet(self) -> pq.ParquetFile:
        """The file opened for chunked reads: only when chunks or the schema are wanted, so
        that `read` (through Polars) also takes files pyarrow cannot open (128-bit integers)."""
        if self._parquet is None:
            self._parquet = open_parquet(self.path)
        return self._parquet

    @property
    def rows(self) -> int | None:
        return int(self.parquet.metadata.num_rows)

    def schema_frame(self) -> pl.DataFrame:
        return empty_frame(self.parquet)

    def chunks(self, chunk_rows: int) -> Iterator[pl.DataFrame]:
        try:
            yield from read_chunks(self.parquet, chunk_rows)
        except (pa.ArrowException, OSError) as exc:
            raise self._unreadable(exc) from exc

    def read(self) -> pl.DataFrame:
        try:
            return pl.read_parquet(self.path)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise self._unreadable(exc) from exc

    def column_chunks(self, names: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
        try:
            for batch in self.parquet.iter_batches(chunk_rows, columns=names, use_threads=False):
                yield pl.DataFrame(pl.from_arrow(batch))
        except (pa.ArrowException, OSError) as exc:
            raise self._unreadable(exc) from exc


class JsonLinesInput(InputFile):
    """JSON Lines through Polars' streaming engine (`scan_ndjson(...).collect_batches`).

    The types are inferred from every line when the file is opened (one pass over memory-mapped
    pages, no copy): a line past the first hundred that changes a column's type, or is not JSON
    at all, stops the run before its first request, not midway. `collect_batches` then decodes
    ahead into a bounded channel, so memory follows the chunk size, not the file.
    """

    format = "JSON Lines"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._scan = pl.scan_ndjson(path, infer_schema_length=None)
        try:
            self._schema = self._scan.collect_schema()
        except pl.exceptions.PolarsError as exc:
            raise self._unreadable(exc) from exc

    def schema_frame(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self._schema)

    def chunks(self, chunk_rows: int) -> Iterator[pl.DataFrame]:
        try:
            yield from self._scan.collect_batches(chunk_size=chunk_rows, maintain_order=True)
        except pl.exceptions.PolarsError as exc:
            raise self._unreadable(exc) from exc

    def column_chunks(self, names: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
        scan = pl.scan_ndjson(self.path, schema=self._schema).select(names)
        try:
            yield from scan.collect_batches(chunk_size=chunk_rows, maintain_order=False)
        except pl.exceptions.PolarsError as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: BaseException) -> InputError:
        """Polars' message counts characters within a buffer ("at character 27", "at line 0"):
        the file is read again, line by line, to name the bad line itself."""
        found = first_bad_line(self.path)
        if found is None:
            return super()._unreadable(exc)
        if isinstance(found, int):
            return InputError(
                f"{super()._unreadable(exc)} (ragframe's line-by-line check of its first "
                f"{found:,} lines found none wrong and stopped there: it reads at most "
                f"{BAD_LINE_SCAN_LINES:,} lines or {BAD_LINE_SCAN_BYTES >> 20} MiB)"
            )
        return InputError(
            f"cannot read {str(self.path)!r} as JSON Lines: {found}. Each line holds one JSON "
            f"object ({{...}}): fix or remove that line. ragframe reads {FORMATS_READ}"
        )


class RemoteInput(InputFile):
    """A log at a URL, read through a Polars scan with the run's `storage_options`: the
    schema from the scan, the rows in order through its streaming engine (`collect_batches`),
    every error of the store said in one line (`remote_problem`)."""

    path: RemotePath

    def __init__(self, url: RemotePath, storage_options: StorageOptions | None) -> None:
        super().__init__(url)
        self.storage_options = _opts(url, storage_options)
        self.scan = _remote_open(url, self._scan, self.format)
        self._schema = _remote_open(url, self.scan.collect_schema, self.format)

    @abstractmethod
    def _scan(self) -> pl.LazyFrame:
        """The file as a Polars scan (nothing read yet)."""

    def _decode(self, frame: pl.DataFrame, offset: int) -> pl.DataFrame:
        """A chunk as it is scored (CSV decodes its JSON list cells)."""
        return frame

    def schema_frame(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self._schema)

    def _batches(
        self, lazy: pl.LazyFrame, chunk_rows: int, *, ordered: bool = True
    ) -> Iterator[pl.DataFrame]:
        """`lazy`'s rows, `chunk_rows` at a time, the store's errors said in one line."""
        batches = lazy.collect_batches(chunk_size=chunk_rows, maintain_order=ordered)
        take = partial(next, batches, None)
        while (batch := _remote_call(self.path, take, self.format)) is not None:
            yield batch

    def chunks(self, chunk_rows: int) -> Iterator[pl.DataFrame]:
        offset = 0
        for batch in self._batches(self.scan, chunk_rows):
            yield self._decode(batch, offset)
            offset += batch.height

    def column_chunks(self, names: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
        yield from self._batches(self.scan.select(names), chunk_rows, ordered=False)

    def read(self) -> pl.DataFrame:
        return self._decode(_remote_call(self.path, self.scan.collect, self.format), 0)

    def _unreadable(self, exc: BaseException) -> InputError:
        return remote_failure(self.path, exc, self.format)


class RemoteParquetInput(RemoteInput):
    """Parquet at a URL: its row count from the footer, its row groups fetched as needed."""

    format = "Parquet"

    def _scan(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.path, storage_options=self.storage_options)

    @property
    def rows(self) -> int | None:
        if not hasattr(self, "_rows"):
            counted = _remote_call(self.path, self.scan.select(pl.len()).collect)
            self._rows = int(counted.item())
        return self._rows


class RemoteJsonLinesInput(RemoteInput):
    """JSON Lines at a URL: the types inferred from every line at open, as for a local file."""

    format = "JSON Lines"

    def _scan(self) -> pl.LazyFrame:
        return pl.scan_ndjson(
            self.path, infer_schema_length=None, storage_options=self.storage_options
        )


class RemoteCsvInput(RemoteInput):
    """CSV at a URL: every cell text, the `list_columns` decoded from JSON lists. Their cells
    are all checked at open (one pass over those columns), as for a local file."""

    format = "CSV"

    def __init__(
        self,
        url: RemotePath,
        storage_options: StorageOptions | None,
        list_columns: Collection[str],
    ) -> None:
        super().__init__(url, storage_options)
        self._lists = [name for name in self._schema if name in set(list_columns)]
        if self._lists:
            offset = 0
            for chunk in self._batches(self.scan.select(self._lists), 1 << 16):
                check_json_lists(chunk, self._lists, self.path, offset)
                offset += chunk.height

    def _scan(self) -> pl.LazyFrame:
        return pl.scan_csv(self.path, infer_schema=False, storage_options=self.storage_options)

    def schema_frame(self) -> pl.DataFrame:
        lists = set(self._lists)
        return pl.DataFrame(
            schema={n: pl.List(pl.String) if n in lists else pl.String for n in self._schema}
        )

    def _decode(self, frame: pl.DataFrame, offset: int) -> pl.DataFrame:
        return decode_json_lists(frame, self._lists, self.path, offset)

    def column_chunks(self, names: list[str], chunk_rows: int) -> Iterator[pl.DataFrame]:
        yield from (chunk.select(names) for chunk in self.chunks(chunk_rows))


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_TYPES[type(None)] = "null"


#: `first_bad_line` reads at most this many lines, or bytes, of a file Polars refused: the
#: error path of a 50 GB file must not json.loads all of it (past the cap, Polars' message).
BAD_LINE_SCAN_LINES = 1_000_000
BAD_LINE_SCAN_BYTES = 256 << 20


def first_bad_line(path: Path) -> str | int | None:
    """What is wrong with the first line of a JSON Lines file that Polars cannot read, as
    "line N (counting from 1) ...", or None when every line looks right. Read a line at a
    time: only on the error path, in memory bounded by the longest line, and at most
    BAD_LINE_SCAN_LINES lines or BAD_LINE_SCAN_BYTES bytes: an int, the lines read, says the
    scan stopped at that cap with none found wrong."""
    kinds: dict[str, tuple[str, int]] = {}  # top-level key -> (object | array, first line)
    read = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number > BAD_LINE_SCAN_LINES or read >= BAD_LINE_SCAN_BYTES:
                return number - 1
            read += len(raw)
            line = raw.strip(b" \t\r\n")
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")
            if not line:
                continue
            where = f"line {number} (counting from 1)"
            shown = line[:80].decode("utf-8", errors="replace")
            shown += "..." if len(line) > 80 else ""
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                return f"{where} is not UTF-8 text (byte {exc.start + 1} of the line)"
            except json.JSONDecodeError as exc:
                return f"{where} is not valid JSON ({exc.msg} at column {exc.colno}): {shown!r}"
            if not isinstance(record, dict):
                kind = _JSON_TYPES.get(type(record), "value")
                return f"{where} holds a JSON {kind}, not an object: {shown!r}"
            for key, value in record.items():
                if not isinstance(value, dict | list):
                    continue  # scalars of different types meet as text; these cannot
                kind = "object" if isinstance(value, dict) else "array"
                seen = kinds.setdefault(key, (kind, number))
                if seen[0] != kind:
                    return (
                        f"{where} gives {key!r} as a JSON {kind}, where line {seen[1]} gives it "
                        f"as a JSON {seen[0]}; a column holds one type"
                    )
    return None


class CsvInput(InputFile):
    """CSV, read block by block with pyarrow's streaming reader.

    Not Polars' `scan_csv(...).collect_batches`: measured on Polars 2.1, it reads a 400 MB file
    ahead into memory before the first batch is taken (324 MiB resident, growing with the
    file), where pyarrow's reader holds one block (119 MiB for the same file, 115 for half of
    it). Every cell is text (CSV has no types; nothing is guessed from the first rows and then
    contradicted midway); the `list_columns` hold a JSON list of strings per cell, decoded here.
    Their cells are checked when the file is opened, in one streamed pass over the file: a bad
    cell in the last row stops the run before its first request, not after.
    """

    format = "CSV"

    def __init__(self, path: Path, list_columns: Collection[str]) -> None:
        super().__init__(path)
        self._block = _CSV_BLOCK_BYTES
        while True:
            try:
                self._open(list_columns)
                break
            except pa.ArrowInvalid as exc:
                # pyarrow needs every row inside one block: grow it for a file with long rows.
                if "straddl" not in str(exc) or self._block >= _CSV_MAX_BLOCK_BYTES:
                    raise self._unreadable(exc) from exc
                self._block *= 4
            except (pa.ArrowException, OSError) as exc:
                raise self._unreadable(exc) from exc

    def _open(self, list_columns: Collection[str]) -> None:
        """Read the header, then pass over the whole file once (a block at a time, keeping no
        row): the block size is settled and the list cells are checked before any request."""
        header = self._reader({}).schema.names
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise InputError(
                f"{str(self.path)!r} repeats the column names {repeated} in its header; "
                "give every column a name of its own"
            )
        self._types = {name: pa.string() for name in header}
        self._lists = [name for name in header if name in set(list_columns)]
        offset = 0
        for batch in self._reader(self._types, self._lists or header[:1]):
            frame = pl.DataFrame(pl.from_arrow(batch))
            check_json_lists(frame, self._lists, self.path, offset)
            offset += frame.height

    def _reader(
        self, types: dict[str, pa.DataType], only: list[str] | None = None
    ) -> pa_csv.CSVStreamingReader:
        return pa_csv.open_csv(
            self.path,
            read_options=pa_csv.ReadOptions(use_threads=False, block_size=self._block),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),
            convert_options=pa_csv.ConvertOptions(
                column_types=types,
                strings_can_be_null=True,
                null_values=[""],
                include_columns=only,
            ),
        )

    def schema_frame(self) -> pl.DataFrame:
        lists = set(self._lists)
        return pl.DataFrame(
            schema={n: pl.List(pl.String) if n in lists else pl.String for n in self._types}
        )

    def chunks(self, chunk_rows: int) -> Iterator[pl.DataFrame]:
        offset = 0
        try:
            for table in _rebatch(self._reader(self._types), chunk_rows):
                frame = pl.DataFrame(pl.from_arrow(table))
                yield decode_json_lists(frame, self._lists, self.path, offset)
                offset += frame.height
        except (pa.ArrowException, pl.exceptions.PolarsError, OSError) as exc:
            raise self._unreadable(exc) from exc


def _rebatch(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Regroup record batches of any size into tables of exactly `rows` rows (the last fewer)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        pending.append(batch)
        held += batch.num_rows
        if held < rows:
            continue
        table = pa.Table.from_batches(pending)
        start = 0
        while held - start >= rows:
            yield table.slice(start, rows)
            start += rows
        pending = table.slice(start).to_batches()
        held -= start
    if held:
        yield pa.Table.from_batches(pending)


def decode_json_lists(
    frame: pl.DataFrame, names: Collection[str], path: Path, offset: int = 0
) -> pl.DataFrame:
    """Decode text columns holding one JSON list of strings per cell into List(String).

    An empty cell is null. Any other cell that is not a JSON list of strings is an InputError
    naming the column and the row (`offset` is the frame's first row in the file, 0-based).
    """
    if not names:
        return frame
    check_json_lists(frame, names, path, offset)
    return frame.with_columns(pl.col(n).str.json_decode(pl.List(pl.String)) for n in names)


def check_json_lists(frame: pl.DataFrame, names: Collection[str], path: Path, offset: int) -> None:
    """Raise an InputError naming the column and row of the first cell of `names` that is
    neither empty nor a JSON list of strings (`str.json_decode` alone takes `"a"` or `[1]`)."""
    valid = frame.select(
        (pl.col(n).is_null() | pl.col(n).str.contains(_JSON_LIST_OF_STRINGS)).alias(n)
        for n in names
    )
    for name in names:
        column = valid.get_column(name)
        if column.all():
            continue
        row = int(column.arg_min() or 0)
        cell = frame.get_column(name)[row]
        shown = cell if len(cell) <= 80 else cell[:80] + "..."
        if _python_list_literal(cell):
            raise InputError(
                f"{str(path)!r}, column {name!r}, row {offset + row + 1}: {shown!r} is a Python "
                "list, as ragas's EvaluationDataset.to_csv (and pandas' to_csv) write them, not "
                "JSON: read the file with --from ragas (read_traces(path, format='ragas')), or "
                "save the dataset with to_jsonl"
            )
        raise InputError(
            f"{str(path)!r}, column {name!r}, row {offset + row + 1} (counting data rows from 1"
            f"): {shown!r} is not a JSON list of strings. In CSV, each cell of a list column "
            'holds one, e.g. ["first context", "second context"] (quoted as CSV needs: '
            '"[""first context"", ""second context""]"); leave the cell empty for none'
        )


def _python_list_literal(cell: str) -> bool:
    """A cell holding a Python list (`['a', 'b']`, as `str(list)` writes it) that is not JSON."""
    text = cell.strip()
    if not text.startswith("["):
        return False
    try:
        json.loads(text, strict=False)
        return False
    except ValueError:
        pass
    try:
        return isinstance(ast.literal_eval(text), list)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False


def _content_looks_like(path: Path) -> str:
    """A guess at what a file holds, from its first bytes (for messages, never to read it)."""
    with path.open("rb") as handle:
        head = handle.read(4096)
    if not head:
        return "nothing (the file is empty)"
    if head.startswith(b"PAR1"):
        return "Parquet"
    if b"\x00" in head:
        return "binary data, not text"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith("{"):
        return "JSON Lines"
    if text.startswith("["):
        return "a JSON array (not JSON Lines: one object per line)"
    return "CSV or other text"


def _check_content(path: Path, format_name: str) -> None:
    """Refuse, before any reader's error, a file whose first bytes are not of its format."""
    looks = _content_looks_like(path)
    if looks.startswith("nothing"):
        raise InputError(
            f"{str(path)!r} is empty (0 bytes): not even a header or a schema to score. "
            f"ragframe reads {FORMATS_READ}"
        )
    if format_name == "Parquet" and looks == "Parquet":
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4))
            footer = handle.read(4)
        if footer == b"PAR1" and path.stat().st_size >= 12:
            return
        raise InputError(
            f"{str(path)!r} starts like a Parquet file but has no Parquet footer: it was cut "
            "short, most likely while being written. Write it again"
        )
    if looks == format_name or (format_name == "CSV" and looks == "CSV or other text"):
        return
    rename = _EXTENSION_FOR.get(looks)
    hint = f"; rename it to end in {rename}" if rename else ""
    raise InputError(
        f"{str(path)!r} is named as {format_name} but holds {looks}. ragframe reads "
        f"{FORMATS_READ}, chosen by the file's extension{hint}"
    )


def open_input(
    path: str | Path,
    *,
    list_columns: Collection[str] = (),
    storage_options: StorageOptions | None = None,
) -> InputFile:
    """Open a log to be validated and then read in chunks, choosing the reader by extension.

    `list_columns`: in CSV, the columns whose cells hold a JSON list of strings (contexts,
    IDs); see `ragframe.inputs.columns.list_columns`. Other formats carry lists natively.
    `storage_options`: for a URL (`s3://...`), Polars' storage options (endpoint, keys,
    region); without them the store's usual environment variables are read.
    """
    url = remote_url(path)
    if url is not None:
        return _open_remote(url, list_columns, storage_options)
    source = _local_input(path)
    suffix = source.suffix.lower()
    format_name = INPUT_FORMATS.get(suffix)
    if format_name is None:
        looks = _content_looks_like(source)
        rename = _EXTENSION_FOR.get(looks)
        hint = f"; it holds {looks}, so rename it to end in {rename}" if rename else ""
        named = f"{suffix!r} files" if suffix else "files without an extension"
        raise InputError(
            f"cannot read {str(source)!r}: ragframe reads {FORMATS_READ}, chosen by the file's "
            f"extension, not {named}{hint}"
        )
    _check_content(source, format_name)
    if format_name == "Parquet":
        return ParquetInput(source)
    if format_name == "JSON Lines":
        return JsonLinesInput(source)
    return CsvInput(source, list_columns)


def _open_remote(
    url: RemotePath, list_columns: Collection[str], storage_options: StorageOptions | None
) -> InputFile:
    """The reader for a URL, by its extension (its bytes are not sniffed: that is a request)."""
    format_name = INPUT_FORMATS.get(url.suffix.lower())
    if format_name is None:
        named = f"{url.suffix!r} files" if url.suffix else "files without an extension"
        raise InputError(
            f"cannot read {url!r}: ragframe reads {FORMATS_READ}, chosen by the file's "
            f"extension, not {named}"
        )
    if format_name == "Parquet":
        return RemoteParquetInput(url, storage_options)
    if format_name == "JSON Lines":
        return RemoteJsonLinesInput(url, storage_options)
    return RemoteCsvInput(url, storage_options, list_columns)


def _remove_stale_temporaries(path: Path) -> None:
    """Delete temporary files that earlier writers of `path` left when they were killed
    (SIGKILL gives no chance to clean up): those whose writing process no longer exists."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = stale.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.unlink(missing_ok=True)
        except PermissionError:
            pass  # another user's live process


def _unwritable(dtype: pl.DataType) -> str | None:
    """Why Parquet (through pyarrow) cannot hold a column of this type, or None if it can."""
    if isinstance(dtype, pl.Object):
        return "it holds Python objects; convert them, e.g. to pl.String"
    if dtype in WIDE_INTEGERS:
        return "pyarrow has no 128-bit integers; cast it to pl.Decimal(38, 0) or pl.String"
    if isinstance(dtype, pl.Struct):
        if not dtype.fields:
            return "a struct with no fields has no Parquet type; drop it"
        return next((w for w in (_unwritable(f.dtype) for f in dtype.fields) if w), None)
    if isinstance(dtype, pl.List | pl.Array):
        return _unwritable(dtype.inner)
    return None


def check_writable(schema: pl.Schema) -> None:
    """Refuse, naming the column and the fix, a frame that Parquet cannot hold.

    Called before writing (and by callers before scoring, when they can): without it an
    Object column is silently stored as 8-byte pointers, and Int128 fails deep in pyarrow.
    """
    problems = [
        f"{name!r} ({dtype}): {why}"
        for name, dtype in schema.items()
        if (why := _unwritable(dtype))
    ]
    if problems:
        raise InputError("cannot write these columns to Parquet: " + "; ".join(problems))


def write_parquet(
    frame: pl.DataFrame, path: str | Path, metadata: dict[str, Any], *, overwrite: bool = False
) -> None:
    """Write `frame` with ragframe's metadata, atomically; an existing file only with
    `overwrite=True`."""
    check_writable(frame.schema)
    writer = AtomicParquetWriter(path, frame.to_arrow().schema, metadata, overwrite=overwrite)
    try:
        writer.write(frame)
    except BaseException:
        writer.abort()
        raise
    writer.close()


def read_metadata(
    path: str | Path, *, storage_options: StorageOptions | None = None
) -> dict[str, Any]:
    """The metadata ragframe recorded in a scored Parquet file ({} if none); a URL's is read
    from its footer alone, with Polars' `storage_options` (or the environment's settings)."""
    # The file's key-value metadata: a streamed write replaces the start-of-run entry with the
    # final one at close (the Arrow schema keeps the first).
    url = remote_url(path)
    if url is not None:
        options = _opts(url, storage_options)
        found = _remote_open(url, lambda: pl.read_parquet_metadata(url, storage_options=options))
        text = found.get(METADATA_KEY.decode())
        return json.loads(text) if text else {}
    raw = pq.read_metadata(path).metadata or {}
    blob = raw.get(METADATA_KEY)
    return json.loads(blob) if blob else {}
