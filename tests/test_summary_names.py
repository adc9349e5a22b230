"""The run summary names the judge that answered, and says how many failures a plain rerun
will not send again: a figure is never read as another judge's, and a rerun that keeps failures
says so (issue 26)."""

from __future__ import annotations

from pathlib import Path

from conftest import judge_for, router
from test_failed_cache import METRIC, TASK, cut_off, rows

import ragframe
from ragframe.engine.stream import score_file
from ragframe.engine.summary import format_summary
from ragframe.testing.server import FakeServer


def test_the_summary_names_the_model_and_endpoint_that_answered(
    server: FakeServer, tmp_path: Path
) -> None:
    judge = judge_for(server, tmp_path, model="judge-under-test")
    result = ragframe.run(rows(), [METRIC], judge=judge)
    host = server.base_url.split("://")[1].split("/")[0]
    assert result.summary()["judge"] == {"model": "judge-under-test", "endpoint_host": host}
    assert f"judge judge-under-test at {host}" in str(result)


def test_a_streamed_summary_names_the_judge_too(server: FakeServer, tmp_path: Path) -> None:
    source = tmp_path / "in.parquet"
    rows(3).write_parquet(source)
    judge = judge_for(server, tmp_path, model="judge-under-test")
    result = score_file(source, tmp_path / "out.parquet", [METRIC], judge=judge, chunk_rows=2)
    assert result.summary()["judge"]["model"] == "judge-under-test"


def test_failures_a_plain_rerun_keeps_are_counted_in_the_summary(
    server: FakeServer, tmp_path: Path
) -> None:
    server.handler = router(**{TASK: cut_off})
    judge = judge_for(server, tmp_path, cache=True)
    first = ragframe.run(rows(), [METRIC], judge=judge)
    assert first.summary()["kept_failures"] == 2
    assert "failed requests a plain rerun will not send again: 2" in format_summary(
        first.summary(), local=False
    )


def test_a_clean_run_has_no_kept_failures_line(server: FakeServer, tmp_path: Path) -> None:
    result = ragframe.run(rows(), [METRIC], judge=judge_for(server, tmp_path, cache=True))
    assert "plain rerun" not in format_summary(result.summary(), local=False)
