"""Run the user's own RAG pipeline over a test set's questions: `answer` and `aanswer`.

The step between `generate` and `evaluate`: each distinct question is asked once, at most
`concurrency` calls at a time, and what the pipeline returns becomes three columns beside the
test set's own (`answer`, `contexts`, `answer_error`), rows in their order. A call that fails
is that row's `answer_error`, never an exception out of the run. Each answer is committed to
an SQLite file the moment it arrives (the judge's `AnswerCache`: WAL, written off the event
loop), so a rerun, or a run after Ctrl-C, asks only the questions still without an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from ragframe._sync import run_sync
from ragframe.errors import ConfigError, InputError
from ragframe.judge.cache import AnswerCache, CacheWriteError, default_cache_path, request_key

__all__ = ["ANSWER_COLUMNS", "aanswer", "answer", "default_answers_path"]

#: The columns `answer` adds; a frame that has any of them already is refused.
ANSWER_COLUMNS = ("answer", "contexts", "answer_error")
#: The error of a row whose question is null or blank (the pipeline is not called for it).
NO_QUESTION = "InputError: the question is null or blank; fn was not called"

_SCHEMA = {
    "question": pl.String,
    "answer": pl.String,
    "contexts": pl.List(pl.String),
    "answer_error": pl.String,
}

#: What a pipeline may return, said in every error about a return value.
_EXPECTED = (
    "expected (answer, contexts), a dict with 'answer' and 'contexts', "
    "or an object with those attributes"
)


def default_answers_path() -> Path:
    """`rag_answers.sqlite3` beside the judge's default cache (`default_cache_path`)."""
    return default_cache_path().with_name("rag_answers.sqlite3")


async def aanswer(
    testset: pl.DataFrame | pl.LazyFrame,
    fn: Callable[[str], Any],
    *,
    question_column: str = "question",
    concurrency: int = 8,
    cache: bool | str | Path = True,
    version: str | None = None,
    timeout: float | None = None,
    progress: bool = False,
) -> pl.DataFrame:
    """Async twin of `answer`, for callers already inside an event loop (`await` it in
    Jupyter). The parameters are `answer`'s."""
    frame = _checked(testset, fn, question_column, concurrency, timeout)
    identity = _identity(fn, version, cache)
    distinct = (
        frame.get_column(question_column).cast(pl.String).drop_nulls().unique(maintain_order=True)
    )
    asked: list[str] = distinct.filter(distinct.str.strip_chars() != "").to_list()
    results: dict[str, tuple[str | None, list[str] | None, str | None]] = {}
    store = None if cache is False else AnswerCache(_cache_path(cache))
    try:
        keys = {q: request_key({"fn": identity, "question": q}) for q in asked}
        if store is not None:
            hits = await store.aget_many(list(keys.values()))
            for q, key in keys.items():
                if key in hits:
                    stored = json.loads(hits[key]["value"])
                    results[q] = (stored["answer"], stored["contexts"], None)
        todo = [q for q in asked if q not in results]
        bar = _bar(progress, len(asked), len(asked) - len(todo))
        try:
            await _ask_all(fn, todo, keys, identity, store, concurrency, timeout, results, bar)
        finally:
            if bar is not None:
                bar.close()
    finally:
        if store is not None:  # commits what is queued: a cancelled run keeps every answer
            await asyncio.to_thread(store.close)
    return _joined(frame, question_column, results)


def answer(
    testset: pl.DataFrame | pl.LazyFrame,
    fn: Callable[[str], Any],
    *,
    question_column: str = "question",
    concurrency: int = 8,
    cache: bool | str | Path = True,
    version: str | None = None,
    timeout: float | None = None,
    progress: bool = False,
) -> pl.DataFrame:
    """Ask your RAG pipeline every question of `testset`: the test set back, rows in order
    and every column untouched, plus `answer` (String), `contexts` (List(String)) and
    `answer_error` (String, null where `fn` answered), ready for `ragframe.evaluate`.

    >>> import polars as pl, ragframe
    >>> def rag(question):
    ...     return f"You asked: {question}", [f"a passage about {question}"]
    >>> testset = pl.DataFrame({"question": ["tides?", "rain?", "tides?", " "]})
    >>> out = ragframe.answer(testset, rag, cache=False)
    >>> out.columns
    ['question', 'answer', 'contexts', 'answer_error']
    >>> out["answer"].to_list()
    ['You asked: tides?', 'You asked: rain?', 'You asked: tides?', None]
    >>> out["answer_error"][3]
    'InputError: the question is null or blank; fn was not called'

    Parameters
    ----------
    testset
        A Polars DataFrame or LazyFrame with a question column. A frame that already has an
        `answer`, `contexts` or `answer_error` column is refused (drop or rename it first).
    fn
        Your pipeline: `fn(question)`, a plain function (run in worker threads) or an
        `async def` (awaited). It returns `(answer, contexts)`, a dict with the keys `answer`
        and `contexts` (other keys are ignored), or an object with those attributes. `answer`
        is a string; `contexts` a list of strings (one string is one context, None none).
        Anything else, or an exception, becomes that row's `answer_error` as one line
        (`"TypeError: ..."`); the run goes on.
    question_column
        The column holding the questions. A null or blank question is an error row, and `fn`
        is not called for it. Identical questions are asked once.
    concurrency
        At most this many calls of `fn` at once.
    cache
        True (the default): answers are kept in `rag_answers.sqlite3` beside the judge's
        cache (`$RAGFRAME_CACHE`'s folder, else `~/.cache/ragframe/`); a path: that file;
        False: no cache. Each answer is committed as it arrives, so a rerun, or a run after
        Ctrl-C, calls `fn` only for the questions without one. Errors are not kept: a rerun
        asks those again.
    version
        Part of the cache key, beside `fn`'s module and qualified name. **The cache cannot
        see inside `fn`**: change the prompt, the retriever, the index or the model behind
        the same function and a rerun still returns the old answers. Pass a new `version`
        (`"v2"`, a commit hash, the index's date) whenever the pipeline changes, or
        `cache=False`. A lambda has no name to tell it from another, so with a cache it
        needs a `version`.
    timeout
        Seconds each call may take, else that row's error is a TimeoutError. An async `fn`
        is cancelled; a sync one cannot be stopped: its thread finishes in the background,
        still holding its slot of `concurrency`, and its late answer is dropped.
    progress
        A progress bar of the questions answered (tqdm: a widget in Jupyter).

    Raises
    ------
    ConfigError
        Before any call: `concurrency` below 1, `fn` not callable, a timeout not above 0,
        a missing question column, or answer columns already in the frame.
    InputError
        The question column does not hold strings.
    """
    return run_sync(
        aanswer(
            testset,
            fn,
            question_column=question_column,
            concurrency=concurrency,
            cache=cache,
            version=version,
            timeout=timeout,
            progress=progress,
        )
    )


# ------------------------------------------------------------------------------- checks


def _checked(
    testset: Any, fn: Any, question_column: str, concurrency: Any, timeout: Any
) -> pl.DataFrame:
    """The frame to answer, after every check that can fail before a call."""
    if not callable(fn):
        raise ConfigError(f"fn must be callable (your RAG pipeline), not {type(fn).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be a whole number of 1 or more, not {concurrency!r}")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ConfigError(f"timeout must be a number of seconds above 0 (or None), not {timeout!r}")
    if isinstance(testset, pl.LazyFrame):
        testset = testset.collect()
    if not isinstance(testset, pl.DataFrame):
        raise ConfigError(
            f"testset must be a Polars DataFrame or LazyFrame, not {type(testset).__name__} "
            "(pandas: pl.from_pandas(df); a file: pl.read_parquet(path))"
        )
    if question_column not in testset.columns:
        raise ConfigError(
            f"no column {question_column!r} in the test set (its columns: {testset.columns}); "
            "pass question_column=..."
        )
    taken = [name for name in ANSWER_COLUMNS if name in testset.columns]
    if taken:
        renames = ", ".join(f"{name!r}: '{name}_before'" for name in taken)
        raise ConfigError(
            f"the test set already has {taken}, which answer() would fill: drop them "
            f"(df.drop({taken})) to answer again, or rename them "
            f"(df.rename({{{renames}}})) to keep them beside the new ones"
        )
    dtype = testset.schema[question_column]
    if dtype not in (pl.String, pl.Null, pl.Categorical) and not isinstance(dtype, pl.Enum):
        raise InputError(
            f"the question column {question_column!r} holds {dtype}, not strings: cast it "
            f"(df.with_columns(pl.col({question_column!r}).cast(pl.String))) or name another"
        )
    return testset


def _identity(fn: Callable[..., Any], version: str | None, cache: bool | str | Path) -> str:
    """What the cache knows of `fn`: its module and qualified name (a partial's function, a
    callable object's class), and `version`. Nothing of its code or its state."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not hasattr(target, "__qualname__"):
        target = type(target)
    name = f"{getattr(target, '__module__', None)}.{target.__qualname__}"
    if "<lambda>" in name and version is None and cache is not False:
        raise ConfigError(
            "a lambda has no name the cache can tell from another lambda's: pass version=..., "
            "or cache=False, or a function made with def"
        )
    return name if version is None else f"{name}@{version}"


def _cache_path(cache: bool | str | Path) -> Path:
    return default_answers_path() if cache is True else Path(cache)


# ------------------------------------------------------------------------------- calls


async def _ask_all(
    fn: Callable[[str], Any],
    todo: list[str],
    keys: Mapping[str, str],
    identity: str,
    store: AnswerCache | None,
    concurrency: int,
    timeout: float | None,
    results: dict[str, tuple[str | None, list[str] | None, str | None]],
    bar: Any,
) -> None:
    """Ask every question of `todo`, at most `concurrency` calls at once, filling `results`
    and committing each answer to `store` as it arrives."""
    if not todo:
        return
    pool = None
    if _is_async(fn):
        call = _async_caller(fn, timeout)
    else:
        pool = concurrent.futures.ThreadPoolExecutor(concurrency, "ragframe-answer")
        call = _thread_caller(fn, pool, concurrency, timeout)
    pending = iter(todo)
    unwritten: list[CacheWriteError] = []

    async def worker() -> None:
        for question in pending:  # shared: each question is taken by one worker
            try:
                value = _normalised(await call(question))
            except Exception as exc:  # the row's error; a cancellation goes through
                results[question] = (None, None, _one_line(exc, timeout))
            else:
                results[question] = (*value, None)
                if store is not None:
                    stored = json.dumps({"answer": value[0], "contexts": value[1]})
                    try:
                        await store.aput(keys[question], identity, {"value": stored})
                    except CacheWriteError as err:  # the answer is good; only a rerun pays
                        unwritten.append(err)
            if bar is not None:
                bar.update(1)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, len(todo))):
                group.create_task(worker())
    finally:
        if pool is not None:  # a timed-out thread finishes on its own; none is waited for
            pool.shutdown(wait=False, cancel_futures=True)
    if unwritten:
        warnings.warn(
            f"{len(unwritten)} answers could not be kept in the cache (a rerun asks them "
            f"again): {unwritten[0]}",
            stacklevel=4,
        )


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 (an object with an async __call__)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _async_caller(
    fn: Callable[[str], Any], timeout: float | None
) -> Callable[[str], Awaitable[Any]]:
    """Calls of an async `fn`, each cancelled after `timeout`. The `concurrency` workers
    that await them are the bound: no semaphore needed."""

    async def call(question: str) -> Any:
        return await asyncio.wait_for(fn(question), timeout)

    return call


def _thread_caller(
    fn: Callable[[str], Any],
    pool: concurrent.futures.ThreadPoolExecutor,
    concurrency: int,
    timeout: float | None,
) -> Callable[[str], Awaitable[Any]]:
    """Calls of a sync `fn` on the pool's threads. A slot is given back when the thread
    returns, not when its caller stops waiting, so a timed-out call still counts toward
    `concurrency` until it ends."""
    slots = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()

    async def call(question: str) -> Any:
        await slots.acquire()
        try:
            running = loop.run_in_executor(pool, fn, question)
        except BaseException:
            slots.release()
            raise
        running.add_done_callback(lambda _: slots.release())
        value = await asyncio.wait_for(asyncio.shield(running), timeout)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(
                "fn returned an awaitable from a plain call; define it with async def "
                "so that answer() awaits it"
            )
        return value

    return call


def _normalised(value: Any) -> tuple[str, list[str]]:
    """(answer, contexts) from what `fn` returned; a TypeError or KeyError saying what is
    wrong otherwise."""
    if isinstance(value, tuple):
        if len(value) != 2:
            raise TypeError(f"fn returned a tuple of {len(value)} items; {_EXPECTED}")
        found, contexts = value
    elif isinstance(value, Mapping):
        missing = [key for key in ("answer", "contexts") if key not in value]
        if missing:
            raise KeyError(f"fn returned a dict without {missing}; {_EXPECTED}")
        found, contexts = value["answer"], value["contexts"]
    elif hasattr(value, "answer") and hasattr(value, "contexts"):
        found, contexts = value.answer, value.contexts
    else:
        raise TypeError(f"fn returned {type(value).__name__}; {_EXPECTED}")
    if not isinstance(found, str):
        raise TypeError(f"the answer is {type(found).__name__}, not a string")
    if contexts is None:
        contexts = []
    elif isinstance(contexts, str):
        contexts = [contexts]
    elif not isinstance(contexts, list | tuple) or not all(isinstance(c, str) for c in contexts):
        raise TypeError(f"contexts must be a list of strings, not {_describe(contexts)}")
    return found, list(contexts)


def _describe(contexts: Any) -> str:
    if isinstance(contexts, list | tuple):
        kinds = sorted({type(c).__name__ for c in contexts if not isinstance(c, str)})
        return f"a {type(contexts).__name__} holding {', '.join(kinds)}"
    return type(contexts).__name__


def _one_line(exc: Exception, timeout: float | None) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        text = f"no answer within {timeout:g} s" if timeout is not None else ""
    elif isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])  # KeyError's str() quotes its message
    else:
        text = str(exc)
    name = type(exc).__name__
    text = " ".join(text.split())
    return f"{name}: {text}" if text else name


def _bar(progress: bool, total: int, done: int) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="answer", unit="question")


# ------------------------------------------------------------------------------- frames


def _joined(
    frame: pl.DataFrame,
    question_column: str,
    results: Mapping[str, tuple[str | None, list[str] | None, str | None]],
) -> pl.DataFrame:
    """`frame` with the three answer columns, joined by question, rows in their order."""
    answers = pl.DataFrame(
        [(q, *value) for q, value in results.items()], schema=_SCHEMA, orient="row"
    )
    key = "__ragframe_question"
    while key in frame.columns:
        key += "_"
    question = pl.col(question_column).cast(pl.String)
    asked = (
        frame.with_columns(pl.when(question.str.strip_chars() != "").then(question).alias(key))
        .join(answers.rename({"question": key}), on=key, how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col(key).is_null())
            .then(pl.lit(NO_QUESTION))
            .otherwise(pl.col("answer_error"))
            .alias("answer_error")
        )
        .drop(key)
    )
    assert asked.height == frame.height  # one answer per distinct question: no row doubled
    return asked
