"""A warm run costs a few Polars queries per metric stage, not one per helper step (issue 29).

Every eager DataFrame operation (`with_columns`, `join`, `filter`, `group_by().agg()`, a
Series method) runs one Polars query through `LazyFrame._collect_eager`, and a lazy plan one
through `LazyFrame.collect`. The test counts both while a rerun whose answers are all cached
scores the shipped sample with the core 4 (one chunk), and bounds the count well under the
171 such a run cost when each helper ran its steps eagerly: a change that brings back
per-helper queries fails here. Nothing is timed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
import pytest

import ragframe
from ragframe.judge.client import Judge
from ragframe.metrics import CORE

#: Queries a warm run of one chunk with the core 4 may cost: 40 once the stages were folded
#: into one plan each, 171 before. Headroom for a stage or two, not for per-helper queries.
MAX_QUERIES = 60


@contextmanager
def counted_queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count every Polars query run inside the block: [count]."""
    seen = [0]

    def counting(run: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[0] += 1
            return run(*args, **kwargs)

        return wrapper

    with monkeypatch.context() as patch:
        for name in ("collect", "_collect_eager"):
            patch.setattr(pl.LazyFrame, name, counting(getattr(pl.LazyFrame, name)))
        patch.setattr(pl, "collect_all", counting(pl.collect_all))
        yield seen


def test_the_counter_sees_eager_and_lazy_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count rests on Polars running eager operations as lazy queries: checked here, so
    a Polars that stops doing so fails loudly instead of counting nothing."""
    frame = pl.DataFrame({"a": [1, 2, 3]})
    with counted_queries(monkeypatch) as seen:
        frame.with_columns(b=pl.col("a") + 1).filter(pl.col("a") > 1)
        frame.lazy().select("a").collect()
    assert seen[0] == 3


def test_a_warm_chunk_with_the_core_4_costs_few_queries(
    sample: pl.DataFrame,
    make_judge: Callable[..., Judge],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cold = ragframe.run(sample, list(CORE), judge=make_judge(cache=True))
    assert cold.stats.requests > 0
    with counted_queries(monkeypatch) as seen:
        warm = ragframe.run(sample, list(CORE), judge=make_judge(cache=True))
    assert warm.stats.requests == 0  # every answer came from the cache
    assert warm.frame.equals(cold.frame)
    assert 0 < seen[0] <= MAX_QUERIES, f"{seen[0]} Polars queries for one warm chunk"
