"""A metric that must be built (`g_eval`: G-Eval judges by your criteria) named where names
become metrics: `resolve` itself says how to build it, so every caller of `resolve` (the Batch
API job, the engine) gives the same one line as the run specification, never "unknown metric"."""

from __future__ import annotations

import polars as pl
import pytest

import ragframe
from ragframe.engine.batch import BatchJob
from ragframe.errors import ConfigError
from ragframe.metrics import resolve


def _says_how_to_build(err: pytest.ExceptionInfo[ConfigError]) -> None:
    message = str(err.value)
    assert "\n" not in message
    assert "unknown metric" not in message
    assert "'g_eval' cannot be named: G-Eval needs your criteria" in message
    assert 'GEval(name=..., criteria="...")' in message


@pytest.mark.parametrize("names", [["g_eval"], ["faithfulness", " g_eval "]])
def test_resolve_says_how_to_build_g_eval(names: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(names)
    _says_how_to_build(err)


def test_the_advice_is_python_that_builds_the_metric() -> None:
    """What the message tells a user to write builds a metric of that name."""
    from ragframe.metrics import BUILT

    advice = BUILT["g_eval"].replace("name=...", 'name="g_eval"').replace('"..."', '"Be right."')
    (metric,) = resolve([eval(f"ragframe.{advice}", {"ragframe": ragframe})])
    assert metric.name == "g_eval"


def test_batch_job_says_how_to_build_g_eval(make_judge, tmp_path) -> None:
    """The Batch API job resolves its metrics itself (not through the run specification)."""
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    frame = pl.DataFrame({"question": ["q"], "answer": ["a"], "contexts": [["c"]]})
    with pytest.raises(ConfigError) as err:
        job.submit(frame, ["g_eval"])
    _says_how_to_build(err)
    assert not (tmp_path / "job.json").exists()
