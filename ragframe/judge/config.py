"""`JudgeConfig`: which endpoint, which model, and how hard to push it. Configuration only:
every part of the judge reads it; the per-run state (pool, cache reads, stats) is a
`JudgeSession`, which the public `Judge` (`ragframe.judge.client`, this class plus
`session()`) makes."""

from __future__ import annotations

import base64
import copy
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Self, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlparse

from ragframe.errors import ConfigError
from ragframe.judge.cache import AnswerCache, default_cache_path
from ragframe.judge.pricing import Price
from ragframe.judge.task import Task

OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
OPENAI_DEFAULT_EMBEDDING = "text-embedding-3-small"
#: The model name that asks for the embedded judge (`Judge("local")`, `--model local`,
#: `RAGFRAME_MODEL=local`). Its own name (`ragframe.judge.local.LOCAL_MODEL`), as the
#: output's metadata records it, asks for it too where no base URL is given.
EMBEDDED = "local"
#: The sampling temperatures OpenAI's API accepts, which OpenAI-compatible servers follow.
TEMPERATURE_MAX = 2.0
#: The largest seed: OpenAI's API and llama.cpp's server read it as a signed 64-bit integer.
SEED_MAX = 2**63 - 1
#: Characters per token assumed when texts are cut to the embedding model's input limit
#: without its tokenizer: English runs about 4 characters a token, code and dense text 2 to 3,
#: so 2 keeps nearly every cut text inside the limit (a text still too long fails alone).
EMBED_CHARS_PER_TOKEN = 2
#: live: send requests now. defer: send nothing; collect what the cache lacks as Batch API
#: requests (`JudgeSession.deferred`). dry: send nothing; count what would be sent, and answer
#: with schema-valid placeholders so that later stages are counted too.
BackendName = Literal["live", "defer", "dry"]
#: How the judge is asked for JSON, strictest first (`ragframe.judge.structured`).
StructuredMode = Literal["json_schema", "json_object", "prompt"]
MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "prompt")


class JudgeConfig:
    """What the judge is (endpoint, model, limits, cache): every part of the judge layer
    reads it. The public class is `Judge` (`ragframe.judge.client`), which adds `session()`;
    its docstring describes every parameter."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        embedding_model: str | None = None,
        concurrency: int = 16,
        timeout: float = 120.0,
        max_attempts: int = 6,
        rate_limit_wait: float = 600.0,
        repair_attempts: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = None,
        structured: Literal["auto", "json_schema", "json_object", "prompt"] = "auto",
        cache: bool | str | Path = True,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        adaptive: bool = True,
        fail_fast: bool = False,
        progress: bool = True,
        embedder: Any = None,
        max_text_chars: int | None = 50_000,
        price: Price | None = None,
        max_cost: float | None = None,
        output_bounds: tuple[int, int] | None = None,
        embedding_max_tokens: int | None = 8191,
        logprobs: bool | None = None,
        reasons: bool | None = None,
        retry_failed: bool = False,
    ) -> None:
        self.model = self._pick_judge(model, base_url, api_key)
        self.embedding_model = self._pick_embedding_model(embedding_model)
        self.embedder = embedder
        # What is asked, and how the answer is held to its schema.
        self.temperature, self.seed, self.logprobs = temperature, seed, logprobs
        self.structured, self.retry_failed = structured, retry_failed
        self.max_text_chars, self.embedding_max_tokens = max_text_chars, embedding_max_tokens
        self._take_local_defaults(max_tokens, output_bounds, reasons, repair_attempts, concurrency)
        # The pool: how fast it may go, and how often one request is tried again.
        self.adaptive = adaptive
        self.requests_per_minute, self.tokens_per_minute = requests_per_minute, tokens_per_minute
        self.timeout, self.max_attempts = timeout, max_attempts
        self.rate_limit_wait = rate_limit_wait
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        # What a request that fails for good does to the run, and whether it shows progress.
        self.fail_fast, self.progress = fail_fast, progress
        self.price, self.max_cost = self._pick_price(price, max_cost)
        self._check_settings()
        self.cache_path = _cache_path(cache)
        self._cache: AnswerCache | None = None

    def _pick_judge(
        self, model: str | None, base_url: str | Sequence[str] | None, api_key: str | None
    ) -> str:
        """Which judge answers, and under what model name; sets the endpoint, returns the model.

        The embedded judge runs only when no judge is named at all (no model, no base URL, no
        key, none in the environment) or when it is named (`EMBEDDED`, or its own name with no
        base URL). A model named with nowhere to send it is refused: it used to be scored by
        the embedded judge and recorded, priced and gated under the name given.
        $RAGFRAME_MODEL names a model as `model` does; an empty variable counts as unset.
        """
        from ragframe.judge.local import LOCAL_MODEL

        _refuse_empty("model", "--model", model)
        if isinstance(base_url, str):
            _refuse_empty("base_url", "--base-url", base_url)
        named, source = (
            (model, "--model (model=...)") if model else (_env("RAGFRAME_MODEL"), "$RAGFRAME_MODEL")
        )
        url = base_url if base_url is not None else _env("OPENAI_BASE_URL")
        key = api_key if api_key and api_key.strip() else _env("OPENAI_API_KEY")
        embedded = named == EMBEDDED or (named == LOCAL_MODEL and url is None)
        if embedded and base_url is not None:
            raise ConfigError(
                f"{source} is {named!r}, the embedded judge, which takes no base URL: drop "
                "--base-url (base_url=...), or name the model that endpoint serves"
            )
        if named and not embedded and url is None and key is None:
            raise ConfigError(_no_endpoint(named, source))
        #: Every endpoint of the judge (several replicas of one model, or one); `base_url` is
        #: the one this process sends to.
        self.base_urls = () if embedded else _endpoints(url)
        self.base_url = self.base_urls[0] if self.base_urls else None
        self._api_key = None if embedded else key
        self.local = self.base_url is None and self._api_key is None
        if self.local:
            return LOCAL_MODEL
        if named:
            return named
        if self.base_url is None:
            return OPENAI_DEFAULT_MODEL
        raise ConfigError(
            f"no judge model given for the endpoint {public_url(self.base_url)}: pass "
            "model=... (--model on the command line) or set RAGFRAME_MODEL"
        )

    def _pick_embedding_model(self, embedding_model: str | None) -> str | None:
        """The embedding model: given, else $RAGFRAME_EMBEDDING_MODEL, else OpenAI's default
        on OpenAI itself; None leaves the choice to `embedding_choice`."""
        chosen = embedding_model or _env("RAGFRAME_EMBEDDING_MODEL")
        if chosen is None and self.endpoint_host == "api.openai.com":
            return OPENAI_DEFAULT_EMBEDDING
        return chosen

    def _take_local_defaults(
        self,
        max_tokens: int | None,
        output_bounds: tuple[int, int] | None,
        reasons: bool | None,
        repair_attempts: int | None,
        concurrency: int,
    ) -> None:
        """The settings the embedded judge has its own defaults for (`LOCAL_DEFAULTS`): an
        argument given here wins; its concurrency is a ceiling."""
        local = _local_defaults() if self.local else {}
        self.max_tokens_cap = max_tokens if max_tokens is not None else local.get("max_tokens")
        self.output_bounds = output_bounds or local.get("output_bounds")
        self.reasons = reasons if reasons is not None else local.get("reasons", True)
        self.repair_attempts = (
            repair_attempts if repair_attempts is not None else local.get("repair_attempts", 1)
        )
        self.concurrency = min(concurrency, local["concurrency"]) if local else concurrency

    def _pick_price(
        self, price: Price | None, max_cost: float | None
    ) -> tuple[Price | None, float | None]:
        """The price per million tokens (given, else listed), and max_cost, which needs one."""
        from ragframe.judge.pricing import price_of

        price = price if price is not None or self.local else price_of(self.model)
        if max_cost is not None and price is None and not self.local:
            raise ConfigError(
                f"max_cost needs the price of {self.model!r}: pass price=(prompt $/1M tokens, "
                "completion $/1M tokens) or add the model to ragframe.judge.pricing.PRICES"
            )
        return price, max_cost

    def _check_settings(self) -> None:
        """Refuse settings no run can use, before any request (`Judge(timeout=0)` used to
        retry every request `max_attempts` times, then record every row as failed)."""
        _check_int("concurrency", self.concurrency, 1)
        _check_int("max_attempts", self.max_attempts, 1)
        _check_int("repair_attempts", self.repair_attempts, 0)
        _check_number("timeout", self.timeout, "seconds", positive=True)
        _check_number("temperature", self.temperature, "")
        if self.temperature > TEMPERATURE_MAX:
            raise ConfigError(
                f"temperature must be from 0 to {TEMPERATURE_MAX:g} (what OpenAI-compatible "
                f"servers accept), got {self.temperature!r}"
            )
        _check_number("rate_limit_wait", self.rate_limit_wait, "seconds")
        _check_number("backoff_base", self.backoff_base, "seconds")
        _check_number("backoff_max", self.backoff_max, "seconds")
        for name in ("max_text_chars", "embedding_max_tokens", "max_tokens_cap"):
            value = getattr(self, name)
            if value is not None:
                _check_int("max_tokens" if name == "max_tokens_cap" else name, value, 1, "or None")
        if self.seed is not None:
            _check_int("seed", self.seed, 0, "or None")
            if self.seed > SEED_MAX:
                raise ConfigError(
                    f"seed must be at most 2**63 - 1 (a signed 64-bit integer, as OpenAI-"
                    f"compatible servers read it), or None; got {self.seed!r}"
                )
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None:
                _check_number(name, value, "or None for no limit", positive=True)
        if self.max_cost is not None:
            _check_number("max_cost", self.max_cost, "dollars, or None (no limit)")
        if self.price is not None:
            self.price = _check_price(self.price)
        if self.structured not in ("auto", *MODES):
            raise ConfigError(
                f"structured must be auto, {', '.join(MODES)}; got {self.structured!r}"
            )

    def __repr__(self) -> str:
        where = "local" if self.local else (self.endpoint_host or "api.openai.com")
        return f"Judge(model={self.model!r}, endpoint={where!r}, concurrency={self.concurrency})"

    @property
    def endpoint_host(self) -> str:
        """The endpoint as cache keys and metadata name it: its host, or for several
        replicas their hosts sorted and joined by commas (the same whichever one answers)."""
        if self.local:
            return "local"
        if not self.base_urls:
            return "api.openai.com"
        # Without any user:password@ in the URL: the host is written to metadata, cache keys
        # and error messages, a credential never is.
        return ",".join(sorted({_host(url) for url in self.base_urls}))

    def for_endpoint(self, index: int) -> Self:
        """A copy sending to endpoint `index` (modulo their number) of `base_urls`, with
        the same identity (`endpoint_host`): how actors spread across replicas."""
        judge = self.replace()
        if self.base_urls:
            judge.base_url = self.base_urls[index % len(self.base_urls)]
        return judge

    def replace(self, **changes: Any) -> Self:
        """A copy with some of the pool's settings changed: `concurrency`,
        `requests_per_minute`, `tokens_per_minute`, `max_cost`, `progress`, or `cache` (as
        `Judge(cache=...)` takes it, or an open `AnswerCache`). How one judge is shared out
        among the processes of a cluster. The copy shares the open cache unless `cache` is
        given (a pickled copy opens its own)."""
        allowed = {
            "concurrency",
            "requests_per_minute",
            "tokens_per_minute",
            "max_cost",
            "progress",
            "cache",
        }
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise ConfigError(
                f"Judge.replace cannot change {unknown}; it changes {sorted(allowed)}"
            )
        judge = copy.copy(self)
        if "cache" in changes:
            cache = changes.pop("cache")
            if isinstance(cache, AnswerCache):
                judge._cache, judge.cache_path = cache, cache.path
            else:
                judge._cache, judge.cache_path = None, _cache_path(cache)
        for name, value in changes.items():
            setattr(judge, name, value)
        judge._check_settings()
        return judge

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for a worker process) without the open cache: the copy opens its own."""
        state = self.__dict__.copy()
        state["_cache"] = None
        return state

    @property
    def public_base_url(self) -> str:
        """The URL this process sends to, as it may be shown (credentials removed)."""
        if self.base_url is None:
            return "https://api.openai.com/v1"
        return public_url(self.base_url)

    @property
    def cache(self) -> AnswerCache | None:
        if self._cache is None and self.cache_path is not None:
            self._cache = AnswerCache(self.cache_path)
        return self._cache

    def max_tokens_for(self, task: Task) -> int:
        """The completion cap a request of `task` is sent with (the task's, within the judge's)."""
        cap = self.max_tokens_cap
        return min(task.max_tokens, cap) if cap else task.max_tokens

    def describe(self) -> dict[str, Any]:
        """What the output metadata records about the judge (never the API key)."""
        return {
            "model": self.model,
            "endpoint_host": self.endpoint_host,
            **self.embedding_choice(),
            "temperature": self.temperature,
            "seed": self.seed,
            "local": self.local,
        }

    def embedding_choice(self) -> dict[str, str | None]:
        """Which embedder answer_relevancy uses: `embedding_model` (its name) and `embedder`:
        "endpoint" (the model named, sent to the endpoint), "local" (an embedder in this
        process: the one given, else the local MiniLM when installed), or None for none."""
        if self.embedding_model is not None:
            return {"embedding_model": self.embedding_model, "embedder": "endpoint"}
        if self.embedder is not None:
            return {"embedding_model": getattr(self.embedder, "name", None), "embedder": "local"}
        from ragframe.judge import embed_local

        if embed_local.local_embedder_available():
            return {"embedding_model": embed_local.LOCAL_EMBEDDING_MODEL, "embedder": "local"}
        return {"embedding_model": None, "embedder": None}


def _env(name: str) -> str | None:
    """An environment variable, None when unset or blank (what a missing CI secret gives)."""
    value = os.environ.get(name)
    return value if value and value.strip() else None


def _refuse_empty(name: str, flag: str, value: str | None) -> None:
    """A name given blank (`--model "$UNSET"`) is refused: read as unset, it would pick
    another judge than the one meant."""
    if value is not None and not value.strip():
        raise ConfigError(
            f"{name} is empty ({flag} {value!r}, an unset variable?): give it a value, or "
            "leave it out for the default"
        )


def _no_endpoint(model: str, source: str) -> str:
    """The refusal of a model named with no endpoint and no key: what to set."""
    how = (
        "unset RAGFRAME_MODEL or set it to local"
        if source.startswith("$")
        else f"--model {EMBEDDED} (Judge({EMBEDDED!r}))"
    )
    return (
        f"{source} names the judge {model!r} but no endpoint is configured: set "
        f"OPENAI_API_KEY, or pass --base-url (base_url=...) for another endpoint, or {how} "
        "for the embedded judge"
    )


def _local_defaults() -> dict[str, Any]:
    from ragframe.judge.local import LOCAL_DEFAULTS

    return LOCAL_DEFAULTS


def _endpoints(base_url: str | Sequence[str] | None) -> tuple[str, ...]:
    """`base_url` as a tuple of URLs (none for OpenAI itself or the embedded judge)."""
    if base_url is None:
        return ()
    if isinstance(base_url, str):  # "URL,URL" (--base-url, $OPENAI_BASE_URL) names several
        urls = tuple(u.strip() for u in re.split(r",\s*(?=https?://)", base_url))
    else:
        urls = tuple(base_url)
    if not urls or not all(isinstance(url, str) and url for url in urls):
        raise ConfigError(f"base_url must be a URL or a non-empty list of URLs, got {base_url!r}")
    return urls


#: Query parameters whose value is a credential (`?api-key=...` on Azure, `?key=` on Gemini).
_SECRET_PARAM = re.compile(
    r"(?i)^(api[-_]?key|key|token|access[-_]?token|auth|authorization|password|passwd|pwd|"
    r"secret|client[-_]?secret|sig|signature|x-api-key|code)$"
)
REDACTED = "REDACTED"


def public_url(url: str) -> str:
    """`url` as it may be printed, logged or written: without user:password@ and with the value
    of any credential-like query parameter replaced by REDACTED. The one place a base URL is
    made safe to show; use it for every message, log line, metadata field and manifest."""
    if "://" not in url:  # "alice:pw@host/v1" parses with no netloc; cut what precedes an @
        head, at, _ = url.partition("/")[0].rpartition("@")
        return url[len(head) + len(at) :] if at else url
    parsed = urlparse(url)
    netloc = parsed.netloc.rpartition("@")[2]
    query = parsed.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, REDACTED if _SECRET_PARAM.match(k) else v) for k, v in pairs], safe=","
        )
    return parsed._replace(netloc=netloc, query=query).geturl()


def client_endpoint(url: str | None) -> tuple[str | None, dict[str, str] | None]:
    """(base_url, default_headers) for the `openai` client: the URL without user:password@ and,
    when it had one, the Basic Authorization header it stood for. What the HTTP library does
    with such a URL anyway, except that it also logs the URL whole, password included."""
    if url is None or "://" not in url:
        return url, None
    parsed = urlparse(url)
    if parsed.username is None and parsed.password is None:
        return url, None
    user, password = unquote(parsed.username or ""), unquote(parsed.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    bare = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
    return bare, {"Authorization": f"Basic {token}"}


def _host(url: str) -> str:
    """host[:port] of a URL, without any user:password@."""
    return urlparse(url).netloc.rpartition("@")[2] or public_url(url).partition("/")[0]


def _check_int(name: str, value: Any, minimum: int, also: str = "") -> None:
    """ConfigError naming `name` unless `value` is a whole number >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        rest = f" {also}" if also else ""
        raise ConfigError(f"{name} must be a whole number {minimum} or more{rest}, got {value!r}")


def _check_number(name: str, value: Any, unit: str, *, positive: bool = False) -> None:
    """ConfigError naming `name` unless `value` is a finite number >= 0 (> 0 if `positive`)."""
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    )
    if not ok:
        rule = "more than 0" if positive else "0 or more"
        rest = f" ({unit})" if unit else ""
        raise ConfigError(f"{name} must be {rule}, a finite number{rest}; got {value!r}")


def _check_price(given: Any) -> Price:
    """`given` as a tuple; ConfigError unless it is (prompt, completion) or (prompt,
    completion, cached prompt) dollars per million tokens, each a finite number >= 0, the
    cached rate at most the prompt rate (a provider's discount; a larger one is most likely
    the order mixed up). Any sized iterable will do (a list, a numpy array), not a string."""
    say = (
        "price must be (prompt, completion) or (prompt, completion, cached prompt) dollars "
        "per million tokens, like (0.15, 0.6) or (0.15, 0.6, 0.075)"
    )
    try:  # a 0-d numpy array is Sized, and len() of it raises
        sized = not isinstance(given, str | bytes) and isinstance(given, Iterable)
        ok = sized and len(given) in (2, 3)
    except TypeError:
        ok = False
    if not ok:
        raise ConfigError(f"{say}; got {given!r}")
    price = tuple(given)
    for part in price:
        _check_number("price", part, "dollars per million tokens")
    if len(price) == 3 and price[2] > price[0]:
        raise ConfigError(
            f"{say}: the cached prompt rate (third) is a discount on the prompt rate (first), "
            f"not more; got {price!r}"
        )
    return cast(Price, price)  # its parts checked above


def _cache_path(cache: bool | str | Path | None) -> Path | None:
    """Judge(cache=...): True for the default file, False or None for none, else a path."""
    if cache is True:
        return default_cache_path()
    if cache is False or cache is None:
        return None
    return Path(cache)
