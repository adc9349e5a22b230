"""What a session does with the requests its store cannot answer: the three backends.

`LiveBackend` sends them now. `DeferBackend` sends no chat request: each becomes a Batch API
request line (`JudgeSession.deferred`) and its rows wait, with a `PENDING` error, for
`ragframe batch collect`. `DryBackend` sends nothing at all: it counts what would be sent
(`JudgeSession.estimate`) and answers with schema-valid placeholders, so that the stages
after it are counted too. All three implement `Backend`, the one interface the session calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol

import numpy as np

from ragframe.errors import ConfigError, JudgeError
from ragframe.judge.cache import CacheWriteError
from ragframe.judge.config import JudgeConfig
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.results import Answer, dumps
from ragframe.judge.store import AnswerStore, Requests
from ragframe.judge.structured import request_body
from ragframe.judge.task import Task
from ragframe.judge.transport import Failure, Transport, raise_for_run

PENDING = "pending: this request waits for a batch (ragframe batch collect)"
#: What the judge is told when its answer did not validate (live and Batch API alike).
REPAIR_PROMPT = (
    "Your answer could not be used: {error}. Reply again with only the JSON object, matching "
    "the schema exactly."
)
#: A request the cache lacks, answered without sending it: (task, key, request) -> answer.
StandIn = Callable[[Task, str, dict[str, Any]], Answer]
#: The name of the judge whose bar opens in this context, when several judges run at once
#: (a jury: `bar_name`); None for a run with one judge.
_BAR_NAME: ContextVar[str | None] = ContextVar("ragframe_bar_name", default=None)


@contextlib.contextmanager
def bar_name(name: str) -> Iterator[None]:
    """Name the progress bars opened inside (`ragframe@{name}`), so that the bars of judges
    running at once are told apart. A context variable, not an argument: each judge's run
    is an asyncio task of its own, which copies the context it starts in, and the run's
    layers between the jury and the session need not carry a display detail."""
    token = _BAR_NAME.set(name)
    try:
        yield
    finally:
        _BAR_NAME.reset(token)


class Backend(Protocol):
    """The interface a `JudgeSession` calls, whatever the backend."""

    #: Whether answers read from the cache join this run's memo (else only fresh answers do).
    remembers_hits: bool

    async def answer(self, task: Task, requests: Requests, misses: list[str]) -> dict[str, Answer]:
        """Answers for the keys in `misses` (requests the store does not hold), by key."""
        ...

    async def embed(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """One row per text (see `JudgeSession.embed`)."""
        ...


class Progress:
    """The progress bar of the run's judge requests (tqdm: text in a terminal, a widget in
    Jupyter), or nothing when progress is off.

    The bar counts the prompts the run asks, each done once it has its answer: from the
    cache, as a duplicate (the same prompt again in a column, asked by another metric's
    stage, or in flight already: one request answers them all), or from its own request,
    sent and answered (repairs and retries inside that one tick). The postfix says which
    ("80 requests, 20 cached, 25 duplicates"); a rerun the cache answers whole shows a full
    bar, "no requests, 125 cached". Cached prompts and duplicates fill the bar at once but are
    left out of tqdm's rate, so the rate and the ETA are those of the requests sent.

    A request that failed for good (its retries and repairs spent) is done too, so the bar
    still ends full, but it is counted: "80 requests, 6 failed" (with the failures the cache
    remembers, `store.REMEMBERED_KINDS`: "no requests, 100 cached, 6 failed"). In Jupyter a
    run with any failure is not a green bar: "warning" (orange) from the first failure,
    "danger" (red) when it ends with no usable answer at all.

    The total is known from the start when the caller announces the run (`plan`): by task
    name, how many prompts that task will be asked in the whole run, all chunks together (an
    estimate: one per row per stage). Then
        total = the sum over tasks of max(planned, asked so far)
    so a stage that asks more than planned (claims verified in several requests, a file
    whose plan grows chunk by chunk) raises it as it asks, and nothing lowers it while the run
    goes: it never flickers, and the count done never passes it. Prompts planned but never
    asked (rows whose claims an earlier stage could not extract, rows missing an input when
    the plan counted every row of a file) stay in it until the run ends: a run that ends
    normally closes the bar at what it asked, full (in Jupyter too: the widget's max follows
    the total); an interrupted one keeps its total, so the bar shows how far the run got.

    Drawing stays cheap: one tqdm tick per request answered (tqdm redraws at most every
    `mininterval`), one redraw of the total and postfix per stage asked.
    """

    def __init__(self) -> None:
        self._bar: Any = None
        self.planned: Counter[str] = Counter()
        self.asked_of: Counter[str] = Counter()
        #: Requests sent, and those of them whose answer (or failure for good) is in.
        self.sent = 0
        self.answered = 0
        #: Prompts answered without a request of their own: from the cache, or duplicates.
        self.cached = 0
        self.duplicates = 0
        #: Prompts a metric's reused columns stand for (`ragframe.engine.reuse`): not asked.
        self.reused = 0
        #: Requests sent that failed for good; keys of the failures the cache remembered.
        self.failed_sent = 0
        self._remembered: set[str] = set()
        #: Prompts with a usable answer, from a request or the cache (duplicates aside).
        self.usable = 0
        self._total = 0  # the total on the bar: only raised while the run goes
        self._filled = 0  # cached + duplicates + reused already on the bar
        self._postfix = ""
        self._handle: Any = None  # Jupyter: the display handle of the widget's output

    @property
    def total(self) -> int:
        """The prompts the run is expected to ask (see the class docstring)."""
        tasks = self.planned.keys() | self.asked_of.keys()
        return sum(max(self.planned[task], self.asked_of[task]) for task in tasks)

    @property
    def done(self) -> int:
        """The prompts that have their answer."""
        return self.cached + self.duplicates + self.reused + self.answered

    @property
    def failed(self) -> int:
        """Requests without a usable answer: sent and failed for good, or remembered so."""
        return self.failed_sent + len(self._remembered)

    def postfix(self) -> str:
        """Where the answers so far come from: "80 requests, 20 cached, 25 duplicates"
        ("no requests, 100 cached" for a run the cache answers whole)."""
        if not self.sent and not self.done:
            return ""
        parts = [
            f"{self.sent} request{'s' if self.sent > 1 else ''}" if self.sent else "no requests"
        ]
        if self.reused:
            parts.append(f"{self.reused} reused")
        if self.cached:
            parts.append(f"{self.cached} cached")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicate{'s' if self.duplicates > 1 else ''}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)

    def open(self) -> None:
        self._total = self.total
        self._bar, self._handle = _open_bar(self._total)

    def plan(self, expected: Mapping[str, int]) -> None:
        """Set the prompts each task (by `Task.name`) is expected to be asked in the run."""
        for task, n in expected.items():
            if n < 0:
                raise ValueError(f"a plan counts prompts, 0 or more; got {task}: {n}")
            self.planned[task] = int(n)
        self.show()

    def asked(
        self, task: str, prompts: int, cached: int, waiting: int, failed: Iterable[str] = ()
    ) -> None:
        """A stage of `task` asks `prompts` prompts: the cache answered `cached` of them
        (`failed`: the keys of those whose answer is a failure it remembered), `waiting` need
        a request (sent now or already in flight: `add` says which), the others repeat a
        prompt this run has the answer of. Drawn with the requests (`add`), or now when none
        is needed."""
        remembered = set(failed)
        self.asked_of[task] += prompts
        self.cached += cached
        self.duplicates += prompts - cached - waiting
        self.usable += cached - len(remembered)
        self._remembered |= remembered
        if not waiting:
            self.show()

    def reuse(self, task: str, prompts: int) -> None:
        """`prompts` prompts of `task` that a metric's reused columns stand for: done, with
        a usable answer, and never asked (`ragframe.engine.reuse`)."""
        self.asked_of[task] += prompts
        self.reused += prompts
        self.usable += prompts
        self.show()

    def add(self, sent: int, joined: int = 0) -> None:
        """Of the prompts waiting, `sent` requests are sent now and `joined` wait for one
        another stage sent (duplicates: done at once, answered with it)."""
        self.sent += sent
        self.duplicates += joined
        self.show()

    def tick(self, failed: bool = False) -> None:
        """A request sent has its answer, or `failed` for good. A failure changes the
        postfix, drawn with the tick (tqdm redraws at most every `mininterval`, so a run whose
        every request fails is not a redraw per request)."""
        self.answered += 1
        if failed:
            self.failed_sent += 1
        else:
            self.usable += 1
        bar = self._bar
        if bar is None:
            return
        if failed:
            self._postfix = bar.postfix = self.postfix()
            if self.failed_sent == 1:
                _style_widget(bar, "warning")
        bar.update(1)

    def show(self, *, final: bool = False) -> None:
        """Redraw what changed: the total (only raised, unless `final`), the prompts done
        without a request (added to the count but not to the rate), the postfix."""
        bar = self._bar
        if bar is None:
            return
        total = self.total if final else max(self._total, self.total)
        changed = total != self._total
        if changed:
            self._total = total
            _set_total(bar, total)
        jump = self.cached + self.duplicates + self.reused - self._filled
        if jump:
            self._filled += jump
            bar.n += jump
            # Done without a request, so out of the rate and the ETA: tqdm's `initial` (work
            # done before the clock) for its mean rate, `last_print_n` for its moving one.
            bar.initial = getattr(bar, "initial", 0) + jump
            bar.last_print_n = getattr(bar, "last_print_n", 0) + jump
            changed = True
        postfix = self.postfix()
        if postfix != self._postfix:
            self._postfix = bar.postfix = postfix
            changed = True
            if self.failed:  # failures the cache remembered
                _style_widget(bar, "warning")
        if changed:
            bar.refresh()

    def close(self, finished: bool = True) -> None:
        """Close the bar; a run that `finished` ends it at the prompts it asked, all done
        (an interrupted one keeps its total: the bar then shows how far the run got)."""
        bar = self._bar
        if bar is None:
            return
        if finished:
            self.planned.clear()
            self.show(final=True)
        bar.close()
        if finished and not self._total:
            _fill_widget(bar)  # nothing to ask: a full bar, not an empty one
        if finished and self.failed:  # tqdm.notebook closed it green ("success")
            _style_widget(bar, "warning" if self.usable else "danger")
        if self._handle is not None:  # the notebook's saved text: the bar as it ended
            self._handle.update(bar.container)


def _open_bar(total: int) -> tuple[Any, Any]:
    """A bar (`_bar_class`), and in Jupyter the display handle of its widget.

    tqdm.notebook displays its widget once, with the text a notebook keeps beside it (what
    GitHub, nbconvert and any viewer without the widget's state show) drawn at 0%: displayed
    here under a handle instead, the text is redrawn at the end (`Progress.close`)."""
    cls = _bar_class()
    name = _BAR_NAME.get()
    desc = "ragframe" if name is None else f"ragframe@{name}"
    options: dict[str, Any] = {
        "total": total, "unit": "req", "desc": desc, "leave": True, "dynamic_ncols": True
    }  # fmt: skip
    notebook = sys.modules.get("tqdm.notebook")
    if notebook is None or not (isinstance(cls, type) and issubclass(cls, notebook.tqdm)):
        return cls(**options), None
    from IPython.display import display

    bar = cls(**options, display=False)
    return bar, display(bar.container, display_id=True)


def _set_total(bar: Any, total: int) -> None:
    """Set the bar's total, and in Jupyter its widget's `max` too (tqdm.notebook sets the
    widget's max only when the bar is made or reset: a total changed later would leave the
    bar short of full at the end)."""
    bar.total = total
    container = getattr(bar, "container", None)  # tqdm.notebook: [label, progress, text]
    if container is not None and total > 0:
        widget = container.children[1]
        widget.max = total
        if widget.bar_style == "info":  # made without a total: tqdm's "unknown" style
            widget.bar_style = ""


def _fill_widget(bar: Any) -> None:
    """Draw tqdm.notebook's widget full: a finished run that had nothing to ask."""
    container = getattr(bar, "container", None)
    if container is not None:
        widget = container.children[1]
        widget.max = widget.value = 1


def _style_widget(bar: Any, style: str) -> None:
    """Colour tqdm.notebook's widget: "warning" (orange), "danger" (red). A text bar has
    no colour to set: its postfix says the failures."""
    container = getattr(bar, "container", None)
    if container is not None:
        container.children[1].bar_style = style


def _bar_class() -> Any:
    """tqdm's notebook bar where it works, else its text bar, quietly.

    tqdm.auto picks the notebook bar in Jupyter, and without ipywidgets warns "IProgress not
    found" before falling back to the text bar: without ipywidgets the text bar is taken
    directly, and tqdm's warning is silenced either way (the text bar serves as well).
    """
    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm as text_bar

        return text_bar
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from tqdm.auto import tqdm

    return tqdm


class RemoteEmbeddings:
    """Embeddings through the endpoint (or the local embedder), cached by text.

    A text that could not be embedded (blank, refused by the endpoint, or in a request that
    failed for good) gets a row of NaN and its reason in `errors` (unless fail_fast), so only
    the rows that needed it fail.
    """

    def __init__(self, transport: Transport, store: AnswerStore, errors: dict[str, str]) -> None:
        self.judge = transport.judge
        self.transport = transport
        self.store = store
        self.errors = errors

    async def embed(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        judge = self.judge
        unique = list(dict.fromkeys(texts))
        model = judge.embedding_model or getattr(judge.embedder, "name", None)
        if model is None:
            from ragframe.judge.capabilities import EMBEDDING_FIX

            raise ConfigError(f"answer_relevancy needs an embedding model: {EMBEDDING_FIX}")
        sendable = self.transport.embeddable(unique, self.errors)
        keys = self.store.vector_keys(model, sendable)
        vectors: dict[str, Any] = dict(await self.store.vectors(keys.values()))
        # key -> unit vector, or -> why there is none
        missing = list({keys[t]: s for t, s in sendable.items() if keys[t] not in vectors}.items())
        chunks = [missing[i : i + batch_size] for i in range(0, len(missing), batch_size)]
        try:
            for found in await asyncio.gather(*(self._embed_chunk(c, model) for c in chunks)):
                vectors.update(found)
        except Failure as failure:
            raise JudgeError(f"embedding request failed: {failure.message}") from None
        for text, key in keys.items():
            if isinstance(vectors.get(key), str):
                self.errors[text] = vectors[key]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        size = next((len(v) for v in vectors.values() if isinstance(v, np.ndarray)), 1)
        nan_row = np.full(size, np.nan, dtype=np.float32)
        rows = {t: vectors.get(keys.get(t, "")) for t in unique}
        return np.stack([v if isinstance(v, np.ndarray) else nan_row for v in map(rows.get, texts)])

    async def _embed_chunk(self, chunk: list[tuple[str, str]], model: str) -> dict[str, Any]:
        """Embed one chunk of (key, text): key -> unit vector, or -> why it has none."""
        judge = self.judge
        inputs = [t for _, t in chunk]
        if judge.embedding_model is None and judge.embedder is not None:
            results: list[Any] = list(await asyncio.to_thread(judge.embedder.embed, inputs))
        else:
            try:
                results = await self.transport.embed_isolating(inputs)
            except Failure as failure:
                self.transport.stats.failures[failure.cause] += 1
                raise_for_run(failure, judge.fail_fast)
                # The texts of this chunk get no vector; their rows fail with the reason.
                results = [f"embedding request failed: {failure.message}"] * len(inputs)
        out: dict[str, Any] = {}
        pairs = list(zip((k for k, _ in chunk), results, strict=True))
        done = [(k, v) for k, v in pairs if not isinstance(v, str)]
        if done:
            matrix = _normalise(np.asarray([v for _, v in done], dtype=np.float32))
            fresh = list(zip((k for k, _ in done), matrix, strict=True))
            out.update(fresh)
            try:
                await self.store.save_vectors(model, fresh)
            except CacheWriteError as error:
                self.not_cached(error)
        out.update((k, v) for k, v in pairs if isinstance(v, str))
        return out

    def not_cached(self, error: CacheWriteError) -> None:
        """Count an answer the cache could not keep, and warn once a run: the answer was paid
        for and is valid, so the run uses it rather than failing its row or aborting."""
        failures = self.transport.stats.failures
        failures["cache_write"] += 1
        if failures["cache_write"] == 1:
            warnings.warn(
                f"{error}. This run goes on and uses every answer it gets, but a later run "
                "pays again for those not cached (counted as failures: cache_write)",
                stacklevel=2,
            )


class LiveBackend(RemoteEmbeddings):
    """Sends each request now, repairs an answer that does not fit its schema, and commits
    each answer to the cache the moment it arrives."""

    remembers_hits = True

    def __init__(
        self,
        transport: Transport,
        store: AnswerStore,
        errors: dict[str, str],
        progress: Progress,
    ) -> None:
        super().__init__(transport, store, errors)
        self.stats = transport.stats
        self.progress = progress

    async def answer(self, task: Task, requests: Requests, misses: list[str]) -> dict[str, Answer]:
        pending: dict[str, asyncio.Future[Answer]] = {}
        sent = 0
        for key in misses:
            future = self.store.inflight.get(key)  # asked by another stage: wait for that one
            if future is None:
                future = self.store.track(key, self._answer(task, key, requests[key]))
                sent += 1
            pending[key] = future
        self.progress.add(sent, joined=len(misses) - sent)
        done = await asyncio.gather(*pending.values())
        return dict(zip(pending, done, strict=True))

    async def _answer(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        failed = False
        try:
            answer = await self._answer_once(task, key, payload)
            failed = answer.error is not None
            return answer
        except Exception:
            failed = True  # fail_fast: this request's failure stops the run
            raise
        finally:
            self.progress.tick(failed=failed)

    async def _answer_once(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        """Ask, validate, and re-ask with the validation error (`repair_attempts` times)."""
        judge = self.judge
        schema = payload["schema"]
        messages = list(payload["messages"])
        answer = Answer()
        for repair in range(judge.repair_attempts + 1):
            try:
                content, logprobs, usage, finish = await self.transport.chat(
                    task, messages, schema, again=repair > 0
                )
            except Failure as failure:
                self.stats.failures[failure.cause] += 1
                raise_for_run(failure, judge.fail_fast)
                answer.error = failure.message
                return answer
            answer.requests += 1
            answer.prompt_tokens += usage[0]
            answer.completion_tokens += usage[1]
            try:
                if finish == "length":
                    raise AnswerError(
                        "the answer was cut off at max_tokens; answer more briefly", kind="length"
                    )
                answer.json = dumps(task.finish(parse_answer(content, schema)))
            except AnswerError as err:
                # An error text: every credential out, though the answer kept the word-like
                # ones (a quoted value may be a user name a proxy wrote in; see `Secrets`).
                why = f"{task.name}: unusable answer ({err.kind}): {err.message}"
                answer.error = self.transport.secrets.scrub(why)
                cause = err.kind if err.kind.startswith("invalid_") else f"invalid_{err.kind}"
                if repair < judge.repair_attempts:
                    self.stats.repairs += 1
                    self.stats.retries[cause] += 1
                    messages = [
                        *payload["messages"],
                        {"role": "assistant", "content": content or ""},
                        {"role": "user", "content": REPAIR_PROMPT.format(error=err.message)},
                    ]
                    continue
                self.stats.failures[cause] += 1
                try:  # remembered when it would fail the same way (store.REMEMBERED_KINDS)
                    await self.store.save_failure(key, answer, err.kind)
                except CacheWriteError as error:
                    self.not_cached(error)
                if judge.fail_fast:
                    raise JudgeError(answer.error) from None
                return answer
            answer.error = None
            answer.logprobs = logprobs
            try:
                await self.store.save(key, answer, content)
            except CacheWriteError as error:
                self.not_cached(error)
            return answer
        return answer


class UnsentBackend:
    """Base of the backends that send no chat request. Each request the store lacks goes to
    `stand_in`: the session's `_not_sent`, which a session subclass may override (the Batch
    API pass answers the requests it gave up on) and which by default is `self.not_sent`."""

    remembers_hits = False

    def __init__(self, judge: JudgeConfig, stand_in: StandIn | None) -> None:
        self.judge = judge
        self.stand_in = stand_in or self.not_sent

    async def answer(self, task: Task, requests: Requests, misses: list[str]) -> dict[str, Answer]:
        return {key: self.stand_in(task, key, requests[key]) for key in misses}

    def not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        raise NotImplementedError

    def body(self, task: Task, payload: dict[str, Any]) -> dict[str, Any]:
        """The request as it would go on the wire, in the strongest structured mode."""
        return request_body(self.judge, task, payload["messages"], payload["schema"], "json_schema")


class DeferBackend(UnsentBackend, RemoteEmbeddings):
    """Collects each chat request as a Batch API request line; embeddings are sent now."""

    def __init__(
        self,
        transport: Transport,
        store: AnswerStore,
        errors: dict[str, str],
        deferred: dict[str, dict[str, Any]],
        stand_in: StandIn | None = None,
    ) -> None:
        RemoteEmbeddings.__init__(self, transport, store, errors)
        UnsentBackend.__init__(self, transport.judge, stand_in)
        self.deferred = deferred

    def not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        self.deferred[key] = {
            "custom_id": key,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": self.body(task, payload),
        }
        return Answer(error=PENDING)


class DryBackend(UnsentBackend):
    """Sends nothing: counts what would be sent, and answers with placeholders."""

    def __init__(
        self, judge: JudgeConfig, estimate: Counter[str], stand_in: StandIn | None = None
    ) -> None:
        super().__init__(judge, stand_in)
        self.estimate = estimate

    def not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        from ragframe.judge.estimate import placeholder

        body = self.body(task, payload)
        value, completion_tokens = placeholder(payload["schema"])
        prompt_tokens = sum(len(m["content"]) for m in body["messages"]) // 4
        self.estimate["requests"] += 1
        self.estimate[f"requests:{task.name}"] += 1
        self.estimate["prompt_tokens"] += prompt_tokens
        self.estimate["completion_tokens"] += completion_tokens
        return Answer(
            json=dumps(value), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    async def embed(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Counts the distinct texts; any unit vectors will do."""
        self.estimate["embedding_texts"] += len(dict.fromkeys(texts))
        return np.full((len(texts), 8), 8**-0.5, dtype=np.float32)


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)
