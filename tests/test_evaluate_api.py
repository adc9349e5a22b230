"""evaluate / run as a notebook meets them: typed keyword-only options (completed by Jupyter,
listed one by one on the API page), the frame type that went in comes out (pandas in, pandas
out), and a notebook run's frame written with its provenance, as `ragframe score` writes it."""

from __future__ import annotations

import asyncio
import html
import inspect
import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest
from conftest import judge_for, task_name

import ragframe
from ragframe.engine import run as run_module
from ragframe.engine.prepare import failed_metrics
from ragframe.engine.result import RowsFailedWarning, RunResult
from ragframe.errors import ConfigError, InputError
from ragframe.inputs import sample as sample_module
from ragframe.inputs.sample import draw_sample
from ragframe.judge.client import RunStats
from ragframe.metrics import CORE, base, resolve
from ragframe.metrics.base import NO_CLAIM_FOUND, NOTHING_TO_SCORE
from ragframe.testing.server import FakeServer, Faults, Reply, auto_answer

ROOT = Path(__file__).resolve().parent.parent

RUN_OPTIONS = (
    "judge",
    "columns",
    "sample",
    "seed",
    "reasons",
    "thresholds",
    "strict",
    "repeats",
    "calibration",
    "judges",
    "aggregate",
    "storage_options",
)
ESTIMATE_OPTIONS = (
    "judge",
    "columns",
    "chunk_rows",
    "sample",
    "seed",
    "reasons",
    "repeats",
    "judges",
    "storage_options",
)
WRITES = ("output", "overwrite")
SIGNATURES: dict[str, tuple[str, ...]] = {
    "evaluate": RUN_OPTIONS + WRITES,
    "aevaluate": RUN_OPTIONS + WRITES,
    "run": RUN_OPTIONS,
    "arun": RUN_OPTIONS,
    "estimate": ESTIMATE_OPTIONS,
    "aestimate": ESTIMATE_OPTIONS,
}


def log(n: int = 3) -> pd.DataFrame:
    """A pandas RAG log with an index of its own and a column ragframe does not read."""
    return pd.DataFrame(
        {
            "question": [f"question {i}" for i in range(n)],
            "answer": [f"Fact one of row {i}. Fact two of row {i}." for i in range(n)],
            "contexts": [[f"context of row {i}"] for i in range(n)],
            "experiment": [f"exp-{i % 2}" for i in range(n)],
        },
        index=pd.Index([f"r{i}" for i in range(n)], name="trace_id"),
    )


# ------------------------------------------------------------------------ the signatures


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_every_option_is_a_typed_keyword_only_parameter(name: str) -> None:
    """A notebook completes named parameters, never the keys of `**options`."""
    params = inspect.signature(getattr(ragframe, name)).parameters
    data, metrics = params["data"], params["metrics"]
    assert data.kind is metrics.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert metrics.default is CORE
    for option in SIGNATURES[name]:
        assert option in params, (name, option)
        assert params[option].kind is inspect.Parameter.KEYWORD_ONLY, (name, option)
        assert params[option].annotation is not inspect.Parameter.empty, (name, option)
    keyword_only = [p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert sorted(p.name for p in keyword_only) == sorted(SIGNATURES[name])


def test_a_misspelt_option_is_named_and_nothing_is_sent(server: FakeServer, tmp_path: Path) -> None:
    judge = judge_for(server, tmp_path)
    with pytest.raises(ConfigError, match=r"no such option 'treshold'.*'thresholds'.*check_gates"):
        ragframe.evaluate(log(), ["faithfulness"], judge=judge, treshold={"faithfulness": 0.5})
    with pytest.raises(ConfigError, match=r"estimate: no such option 'output'.*'chunk_rows'"):
        ragframe.estimate(log(), ["faithfulness"], judge=judge, output="x.parquet")
    with pytest.raises(TypeError, match="positional"):  # options are keyword-only
        ragframe.run(log(), ["faithfulness"], judge)  # type: ignore[misc]
    assert server.count() == 0


@pytest.fixture(scope="module")
def api_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The API page of the site as `mkdocs build --strict` renders it."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return (out / "api" / "index.html").read_text()


def parameter_rows(page: str, name: str) -> dict[str, str]:
    """The rows of the parameters table of `ragframe.{name}`'s section: name -> its text."""
    start = page.index(f'id="ragframe.{name}"')
    end = page.find('id="ragframe.', start + 1)  # the next entry's heading
    section = page[start : end if end > 0 else len(page)]
    table = re.search(r"Parameters:.*?<tbody>(.*?)</tbody>", section, re.S)
    assert table, f"no parameters table in the section of {name}"
    rows = {}
    for row in re.findall(r"<tr.*?</tr>", table.group(1), re.S):
        cells = [
            " ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split())
            for c in re.findall(r"<td.*?</td>", row, re.S)
        ]
        rows[cells[0]] = " ".join(cells[1:])
    return rows


@pytest.mark.parametrize("name", ["evaluate", "run", "estimate"])
def test_the_api_page_lists_each_parameter_in_its_own_row(api_page: str, name: str) -> None:
    rows = parameter_rows(api_page, name)
    for option in ("data", "metrics", *SIGNATURES[name]):
        assert option in rows, (name, option, sorted(rows))
        assert len(rows[option].split()) > 2, (name, option, rows[option])  # a description
    assert "**unknown" in rows


# ------------------------------------------------------------------ the frame type kept


def test_pandas_in_pandas_out_with_the_index_columns_and_typed_details(
    server: FakeServer, tmp_path: Path
) -> None:
    data = log(4)
    scored = data.pipe(
        ragframe.evaluate,
        metrics=["faithfulness"],
        judge=judge_for(server, tmp_path),
        thresholds={"faithfulness": 0.5},
    )
    assert isinstance(scored, pd.DataFrame)
    pd.testing.assert_index_equal(scored.index, data.index)
    pd.testing.assert_frame_equal(scored[list(data.columns)], data)  # dtypes unchanged too
    added = ["faithfulness", "faithfulness_detail", "faithfulness_pass"]
    assert list(scored.columns) == [*data.columns, *added]
    assert all(isinstance(scored[c].dtype, pd.ArrowDtype) for c in added)
    assert 0 <= scored["faithfulness"].mean() <= 1
    detail = scored["faithfulness_detail"].iloc[0]
    assert isinstance(detail, dict) and isinstance(detail["claims"], list)
    assert isinstance(detail["claims"][0]["supported"], bool)
    assert scored["faithfulness_detail"].struct.field("error").isna().all()
    polars_scores = ragframe.evaluate(
        pl.from_pandas(data), ["faithfulness"], judge=judge_for(server, tmp_path)
    )["faithfulness"].to_list()
    assert scored["faithfulness"].tolist() == polars_scores


def test_a_pandas_sample_keeps_its_rows_index_labels(server: FakeServer, tmp_path: Path) -> None:
    data = log(6)
    scored = ragframe.evaluate(
        data, ["faithfulness"], judge=judge_for(server, tmp_path), sample=3, seed=1
    )
    assert isinstance(scored, pd.DataFrame) and len(scored) == 3
    positions = scored["row_index"].tolist()
    assert list(scored.index) == [data.index[p] for p in positions]
    pd.testing.assert_frame_equal(scored[list(data.columns)], data.iloc[positions])


@pytest.mark.parametrize(
    ("given", "comes_out"),
    [
        (lambda p, path: pl.from_pandas(p), pl.DataFrame),
        (lambda p, path: pl.from_pandas(p).lazy(), pl.DataFrame),  # collected: documented
        (lambda p, path: path, pl.DataFrame),
    ],
    ids=["DataFrame", "LazyFrame", "path"],
)
def test_polars_and_paths_give_a_polars_frame(
    server: FakeServer,
    tmp_path: Path,
    given: Callable[[pd.DataFrame, Path], Any],
    comes_out: type,
) -> None:
    path = tmp_path / "log.parquet"
    pl.from_pandas(log()).write_parquet(path)
    scored = ragframe.evaluate(
        given(log(), path), ["faithfulness"], judge=judge_for(server, tmp_path)
    )
    assert type(scored) is comes_out and scored.height == 3


def test_a_run_of_a_pandas_frame_gives_pandas_on_request(
    server: FakeServer, tmp_path: Path
) -> None:
    data = log()
    result = ragframe.run(data, ["faithfulness"], judge=judge_for(server, tmp_path))
    assert isinstance(result.frame, pl.DataFrame)  # the summary's and the engine's frame
    pandas = result.to_pandas()
    pd.testing.assert_index_equal(pandas.index, data.index)
    assert pandas["faithfulness"].tolist() == result.frame["faithfulness"].to_list()
    polars_run = ragframe.run(pl.from_pandas(data), ["faithfulness"], judge=result.judge)
    assert isinstance(polars_run.to_pandas()["faithfulness_detail"].dtype, pd.ArrowDtype)


def test_a_series_is_refused_in_one_line_naming_the_frame_to_pass(
    server: FakeServer, tmp_path: Path
) -> None:
    """evaluate(df["question"]) ended in an AttributeError traceback."""
    judge = judge_for(server, tmp_path)
    said = r"^cannot score a pandas Series: pass the whole DataFrame \(df, not df\['question'\]\)"
    for options in ({}, {"sample": 2}, {"output": tmp_path / "scored.parquet"}):
        with pytest.raises(InputError, match=said):
            ragframe.evaluate(log()["question"], ["faithfulness"], judge=judge, **options)
    with pytest.raises(InputError, match=said):
        ragframe.estimate(log()["question"], ["faithfulness"], judge=judge)
    assert server.count() == 0


@pytest.mark.parametrize(
    ("frame", "how"),
    [
        (lambda d: d, r"df\.rename\(columns=\{'row_index': 'original_row_index'\}\)"),
        (pl.from_pandas, r"df\.rename\(\{'row_index': 'original_row_index'\}\)"),
        (lambda d: pl.from_pandas(d).lazy(), r"df\.rename\(\{'row_index'"),
    ],
    ids=["pandas", "polars", "lazy"],
)
def test_sampling_a_frame_that_has_row_index_says_the_rename_of_its_own_library(
    server: FakeServer, tmp_path: Path, frame: Callable[[pd.DataFrame], Any], how: str
) -> None:
    """The advice was Polars' rename for a pandas frame, and draw_sample's `index_column=`,
    which evaluate does not take."""
    data = frame(log(4).assign(row_index=range(4)))
    with pytest.raises(InputError, match=how) as caught:
        ragframe.evaluate(data, ["faithfulness"], judge=judge_for(server, tmp_path), sample=2)
    assert "index_column" not in str(caught.value) and "\n" not in str(caught.value)
    assert server.count() == 0


#: In an answer, makes the fake judge fail every request that quotes it (a 500).
FAILS = "[the judge fails on this row]"
#: In an answer, makes the fake judge find no factual claim in it (null by design).
NO_CLAIMS = "[nothing to claim here]"


def judge_of_marked_rows(body: dict[str, Any]) -> Any:
    """The fake judge's answers, by the row each request quotes (whatever their order): a
    500 for a row marked `FAILS`, no claims for one marked `NO_CLAIMS`, else valid JSON."""
    text = json.dumps(body.get("messages"))
    if FAILS in text:
        return Reply(status=500)
    if NO_CLAIMS in text and task_name(body) == "answer_claims":
        return json.dumps({"claims": []})
    return auto_answer(body)


def a_log_with_rows_that_cannot_score(n: int = 4) -> pd.DataFrame:
    """`log(n)` whose rows 1 and 3 the judge fails on (`judge_of_marked_rows`): null
    faithfulness with the endpoint's error."""
    data = log(n)
    data["answer"] = [f"{a} {FAILS}" if i % 2 else a for i, a in enumerate(data["answer"])]
    return data


def test_evaluate_and_run_warn_in_one_line_of_rows_that_failed(
    server: FakeServer, tmp_path: Path
) -> None:
    """13 of 20 rows failed and evaluate said nothing: only the null scores told."""
    server.handler = judge_of_marked_rows
    judge = judge_for(server, tmp_path, max_attempts=1)
    data = a_log_with_rows_that_cannot_score()
    with pytest.warns(RowsFailedWarning) as caught:
        scored = data.pipe(ragframe.evaluate, metrics=["faithfulness"], judge=judge)
    assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line, past pipe
    line = str(caught[0].message)
    assert "\n" not in line
    assert re.match(
        r"rows failed to score, of 4: faithfulness 2 \(their scores are null\); the first "
        r"error, faithfulness row 1: \S.*; each row's reason is in \{metric\}_detail"
        r"\.error$",
        line,
    ), line
    first = scored["faithfulness_detail"].iloc[1]["error"]
    assert " ".join(first.split())[:40] in line
    with pytest.warns(RowsFailedWarning, match="of 4: faithfulness 2 "):
        ragframe.run(pl.from_pandas(data), ["faithfulness"], judge=judge)
    for call in (ragframe.aevaluate, ragframe.arun):

        async def mine(call: Callable[..., Any] = call) -> Any:  # `await` in a notebook cell
            return await call(data, ["faithfulness"], judge=judge)

        with pytest.warns(RowsFailedWarning, match="of 4: faithfulness 2 ") as caught:
            asyncio.run(mine())
        assert caught[0].filename == __file__
        # Run by asyncio's loop itself (asyncio.run of the call, or a task): still the
        # caller's line, not asyncio/events.py.
        with pytest.warns(RowsFailedWarning, match="of 4: faithfulness 2 ") as caught:
            asyncio.run(call(data, ["faithfulness"], judge=judge))
        assert [w.filename for w in caught] == [__file__]

        async def task(call: Callable[..., Any] = call) -> Any:
            return await asyncio.create_task(call(data, ["faithfulness"], judge=judge))

        with pytest.warns(RowsFailedWarning, match="of 4: faithfulness 2 ") as caught:
            asyncio.run(task())
        assert [w.filename for w in caught] == [__file__]
    with warnings.catch_warnings():  # every row scored: nothing to say
        warnings.simplefilter("error", RowsFailedWarning)
        ragframe.evaluate(log(), ["faithfulness"], judge=judge)
        ragframe.run(log(), ["faithfulness"], judge=judge)


def a_log_with_rows_null_by_design(n: int = 6) -> pd.DataFrame:
    """`log(n)` with a ground truth on all rows but the last two (missing input for the
    metrics that need it) and row 1's answer with no factual claim (`judge_of_marked_rows`):
    rows unscored by design, none of them a failure."""
    data = log(n)
    data["ground_truth"] = [f"fact of row {i}" if i < n - 2 else None for i in range(n)]
    data["answer"] = [f"{a} {NO_CLAIMS}" if i == 1 else a for i, a in enumerate(data["answer"])]
    return data


def test_rows_null_by_design_are_no_failure_and_no_warning(
    server: FakeServer, tmp_path: Path
) -> None:
    """A ground truth null on 2 of 6 rows warned "rows failed to score ... context_precision
    2 ... missing input", and an answer with no factual claim "faithfulness 1": a spurious
    RuntimeWarning on good data, an error in CI under simplefilter("error"), though exit
    status 4 does not count such rows. Only rows that were sent and failed are warned of."""
    server.handler = judge_of_marked_rows
    judge = judge_for(server, tmp_path, max_attempts=1)
    data = a_log_with_rows_null_by_design()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RowsFailedWarning)
        scored = ragframe.evaluate(data, list(CORE), judge=judge)
        result = ragframe.run(data, ["faithfulness", "context_recall"], judge=judge)
    assert result.failed_line() is None
    for name in ("context_precision", "context_recall"):  # the rows are null all the same
        errors = scored[f"{name}_detail"].struct.field("error").tolist()
        assert scored[name].isna().tolist() == [False] * 4 + [True] * 2
        assert all(str(e).startswith("missing input: 'ground_truth'") for e in errors[4:])
    assert scored["faithfulness"].isna().tolist() == [False, True, False, False, False, False]
    assert scored["faithfulness_detail"].iloc[1]["error"] == NO_CLAIM_FOUND
    # A row that failed among them is warned of, alone, with its own error first.
    data.loc[data.index[3], "answer"] += f" {FAILS}"
    with pytest.warns(RowsFailedWarning) as caught:
        ragframe.evaluate(data, ["faithfulness", "context_recall"], judge=judge)
    line = str(caught[0].message)
    assert len(caught) == 1 and "of 6: faithfulness 1 (their" in line, line
    assert "context_recall" not in line and "faithfulness row 3: " in line, line


def test_exit_4_and_the_warning_share_one_rule_for_rows_null_by_design() -> None:
    """`failed_metrics` (exit status 4) counted an answer with nothing to score as a row the
    metric could score: faithfulness whose every answer had no factual claim was "failed on
    every row" when another metric's request had failed in the run."""
    frame = pl.DataFrame(
        {
            "faithfulness": [None, None, None],
            "faithfulness_detail": [
                {"error": NO_CLAIM_FOUND},
                {"error": NO_CLAIM_FOUND},
                {"error": "missing input: 'answer' is null or empty"},
            ],
            "answer_relevancy_llm": [None, None, 0.5],
            "answer_relevancy_llm_detail": [{"error": "HTTP 500"}, {"error": "HTTP 500"}, {}],
        },
        schema_overrides={"faithfulness": pl.Float64, "answer_relevancy_llm": pl.Float64},
    )
    metrics = resolve(["faithfulness", "answer_relevancy_llm"])
    stats = RunStats(failures=Counter({"answer_relevancy_llm": 2}))
    assert failed_metrics(frame, metrics, stats) == {}
    frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("answer_relevancy_llm"))
    assert failed_metrics(frame, metrics, stats) == {"answer_relevancy_llm": "HTTP 500"}
    # The warning counts by the same rule: only answer_relevancy_llm's rows failed.
    result = RunResult(frame, metrics, judge=None, stats=stats, seconds=0.0, started="")  # type: ignore[arg-type]
    line = result.failed_line()
    assert line is not None and "of 3: answer_relevancy_llm 3 (their" in line, line
    assert "faithfulness" not in line, line


def test_every_reason_null_by_design_is_one_a_metric_writes() -> None:
    """`null_by_design` matches reasons by their text: one a metric rewords (or drops) no
    longer matches, and its rows would be warned of as failed again."""
    named = {v: k for k, v in vars(base).items() if isinstance(v, str) and k.isupper()}
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (ROOT / "ragframe" / "metrics").glob("*.py")
        if p.name != "base.py"
    )
    for reason in NOTHING_TO_SCORE:
        constant = named.get(reason)
        assert f'"{reason}"' in sources or (constant and constant in sources), reason


def test_the_warning_quotes_the_endpoints_error_and_counts_each_metric(
    tmp_path: Path,
) -> None:
    with FakeServer(faults=Faults(rate_500=1.0)) as failing:
        judge = judge_for(failing, tmp_path, max_attempts=1)
        with pytest.warns(RowsFailedWarning) as caught:
            ragframe.evaluate(log(3), ["faithfulness", "answer_relevancy_llm"], judge=judge)
    line = str(caught[0].message)
    assert (
        "of 3: faithfulness 3, answer_relevancy_llm 3 (their scores are null); the first "
        "error, faithfulness row 0:" in line
    )
    assert "500" in line and "\n" not in line


# ------------------------------------------------------------------------- provenance


def recorded(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as a Parquet file holds it (JSON)."""
    return json.loads(json.dumps(metadata, default=str))  # type: ignore[no-any-return]


def test_a_run_written_from_a_notebook_keeps_its_metadata(
    server: FakeServer, tmp_path: Path
) -> None:
    result = ragframe.run(log(), ["faithfulness"], judge=judge_for(server, tmp_path))
    result.write_parquet(tmp_path / "scored.parquet")
    assert ragframe.read_metadata(tmp_path / "scored.parquet") == recorded(result.metadata())
    # The frame after the notebook's own steps (pandas, joined with experiment columns).
    mine = result.to_pandas().assign(arm=lambda d: d["experiment"] + "/a")
    result.write_parquet(tmp_path / "joined.parquet", frame=mine)
    back = pl.read_parquet(tmp_path / "joined.parquet")
    assert back["trace_id"].to_list() == list(mine.index)  # a named index is data
    assert back["arm"].to_list() == mine["arm"].tolist()
    assert back.schema["faithfulness_detail"] == result.frame.schema["faithfulness_detail"]
    assert ragframe.read_metadata(tmp_path / "joined.parquet") == recorded(result.metadata())
    with pytest.raises(InputError, match="lacks the score column 'faithfulness'"):
        result.write_parquet(tmp_path / "cut.parquet", frame=mine.drop(columns="faithfulness"))
    with pytest.raises(ConfigError, match="exists; pass overwrite=True"):
        result.write_parquet(tmp_path / "scored.parquet")
    result.write_parquet(tmp_path / "scored.parquet", frame=mine, overwrite=True)


def test_evaluate_output_keeps_provenance_and_compare_warns_of_a_prompt_change(
    server: FakeServer, tmp_path: Path
) -> None:
    """The issue's case: `evaluate`'s frame written by hand had no metadata (`{}`), so
    compare could not warn that the prompts differ."""
    judge = judge_for(server, tmp_path)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    scored = log(4).pipe(ragframe.evaluate, metrics=["faithfulness"], judge=judge, output=a)
    ragframe.evaluate(log(4), ["faithfulness"], judge=judge, reasons=False, output=b)
    meta = ragframe.read_metadata(a)
    assert meta["metrics"]["faithfulness"]["prompt_hashes"]
    assert meta["judge"]["model"] == "fake-judge" and meta["run"]["path"] == "in-memory"
    assert pl.read_parquet(a)["faithfulness"].to_list() == scored["faithfulness"].tolist()
    found = ragframe.compare(a, b, on="question")
    assert any("faithfulness: the prompts differ" in w for w in found.warnings), found.warnings


def test_a_pandas_runs_file_keeps_its_named_index_as_the_row_id(
    server: FakeServer, tmp_path: Path
) -> None:
    """The index (the row id, usually) was lost from `output=` and `write_parquet()`, so
    `compare --on trace_id` of two notebook runs failed."""
    judge = judge_for(server, tmp_path)
    a, b, c = (tmp_path / f"{name}.parquet" for name in "abc")
    ragframe.evaluate(log(4), ["faithfulness"], judge=judge, output=a)
    ragframe.run(log(4), ["faithfulness"], judge=judge).write_parquet(b)
    sampled = ragframe.run(log(6), ["faithfulness"], judge=judge, sample=3, seed=1)
    sampled.write_parquet(c)
    for path in (a, b):
        back = pl.read_parquet(path)
        assert back.columns[0] == "trace_id" and back["trace_id"].to_list() == list(log(4).index)
    assert pl.read_parquet(c)["trace_id"].to_list() == list(sampled.to_pandas().index)
    found = ragframe.compare(a, b, on="trace_id")
    assert found.paired and found.table["n"].to_list() == [4] and found.unmatched.height == 0
    two = log(2).set_index("experiment", append=True)  # a MultiIndex: every named level
    ragframe.run(two, ["faithfulness"], judge=judge).write_parquet(tmp_path / "two.parquet")
    assert pl.read_parquet(tmp_path / "two.parquet").columns[:2] == ["trace_id", "experiment"]
    mixed = log(3).set_axis(pd.Index([1, "x", 2.5], name="id"))  # one Parquet cannot hold
    sent = server.count()
    with pytest.raises(InputError, match=r"^cannot write the pandas index \['id'\] .*astype"):
        ragframe.evaluate(mixed, ["faithfulness"], judge=judge, output=tmp_path / "m.parquet")
    assert server.count() == sent  # said before the run, not after it
    ragframe.run(mixed, ["faithfulness"], judge=judge)  # scored all the same, without output=
    assert server.count() > sent
    unnamed = log(2).rename_axis(None)  # positions pandas made up are not data
    ragframe.run(unnamed, ["faithfulness"], judge=judge).write_parquet(tmp_path / "u.parquet")
    assert pl.read_parquet(tmp_path / "u.parquet").columns[0] == "question"


def test_an_existing_output_is_refused_before_any_request(
    server: FakeServer, tmp_path: Path
) -> None:
    judge = judge_for(server, tmp_path)
    out = tmp_path / "scored.parquet"
    out.write_bytes(b"not yet scored")
    with pytest.raises(ConfigError, match=r"scored.parquet' exists; pass overwrite=True"):
        ragframe.evaluate(log(), ["faithfulness"], judge=judge, output=out)
    source = tmp_path / "log.parquet"
    pl.from_pandas(log()).write_parquet(source)
    with pytest.raises(ConfigError, match="must not be the input"):
        ragframe.evaluate(source, ["faithfulness"], judge=judge, output=source, overwrite=True)
    with pytest.raises(ConfigError, match=r"cannot write the output to 's3://bucket/x\.parquet'"):
        ragframe.evaluate(log(), ["faithfulness"], judge=judge, output="s3://bucket/x.parquet")
    assert server.count() == 0 and out.read_bytes() == b"not yet scored"
    ragframe.evaluate(log(), ["faithfulness"], judge=judge, output=out, overwrite=True)
    assert ragframe.read_metadata(out)["metrics"].keys() == {"faithfulness"}


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("{tmp}/adir", r"output '.*adir' is a directory; name a file, e\.g\. '.*scored\.parquet'"),
        ("/proc/scored.parquet", r"cannot write the output '/proc/scored\.parquet'.*not writable"),
        ("{tmp}/a.txt/scored.parquet", r"'.*a\.txt' is a file, not a directory"),
        ("{tmp}/scored.csv", r"always Parquet, but '.*scored\.csv' is named as \.csv; name it"),
    ],
    ids=["directory", "unwritable", "file-as-folder", "csv-name"],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_request(
    server: FakeServer, tmp_path: Path, output: str, said: str
) -> None:
    """These failed after every request (the scores lost) or wrote Parquet bytes under .csv."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "a.txt").write_text("a file")
    target = output.format(tmp=tmp_path)
    for call in (ragframe.evaluate, ragframe.aevaluate):
        with pytest.raises(ConfigError, match=said):
            done = call(log(), ["faithfulness"], judge=judge_for(server, tmp_path), output=target)
            if inspect.iscoroutine(done):
                asyncio.run(done)
    assert server.count() == 0 and not Path(target).is_file()
    # A folder that does not exist yet is made by the write, as before.
    deep = tmp_path / "new" / "folder" / "scored.parquet"
    ragframe.evaluate(log(), ["faithfulness"], judge=judge_for(server, tmp_path), output=deep)
    assert ragframe.read_metadata(deep)["metrics"].keys() == {"faithfulness"}


# ------------------------------------------------------------------- storage options


def test_storage_options_reach_the_reader_and_are_never_recorded(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The options of a remote path (its credentials) go to the reader with the path, and
    are not in the run's metadata; given with a frame they are refused, not dropped."""
    seen: list[dict[str, Any]] = []
    secret = {"aws_secret_access_key": "not-a-real-secret", "aws_region": "eu-west-1"}

    def reader(data: Any, columns: Any = None, **kwargs: Any) -> pl.DataFrame:
        if isinstance(data, pl.DataFrame):  # a drawn sample's rows
            return data
        seen.append({"by": "load_frame", "data": data, **kwargs})
        return pl.from_pandas(log())

    class Remote:  # what open_input gives a dry run: the schema, then chunks
        def __init__(self, data: Any, **kwargs: Any) -> None:
            kept = {k: v for k, v in kwargs.items() if k != "list_columns"}
            seen.append({"by": "open_input", "data": data, **kept})

        def schema_frame(self) -> pl.DataFrame:
            return pl.from_pandas(log()).clear()

        def chunks(self, rows: int) -> Any:
            yield pl.from_pandas(log())

    def drawer(data: Any, n: int, **kwargs: Any) -> Any:  # a remote sample, drawn streaming
        seen.append(
            {"by": "draw_sample", "data": data, "storage_options": kwargs["storage_options"]}
        )
        return draw_sample(pl.from_pandas(log()), n, seed=kwargs["seed"])

    monkeypatch.setattr(run_module, "load_frame", reader)
    monkeypatch.setattr(run_module, "open_input", Remote)
    monkeypatch.setattr(sample_module, "draw_sample", drawer)
    judge = judge_for(server, tmp_path)
    url = "s3://bucket/log.parquet"
    result = ragframe.run(url, ["faithfulness"], judge=judge, storage_options=secret)
    assert result.frame.height == 3
    assert "not-a-real-secret" not in json.dumps(recorded(result.metadata()))
    assert (
        ragframe.estimate(url, ["faithfulness"], judge=judge, storage_options=secret)["rows"] == 3
    )
    sampled = ragframe.run(url, ["faithfulness"], judge=judge, storage_options=secret, sample=2)
    assert sampled.frame.height == 2 and sampled.metadata()["sample"]["of"] == 3
    readers = ["load_frame", "open_input", "draw_sample"]  # the sample drawn while streaming
    assert seen == [{"by": by, "data": url, "storage_options": secret} for by in readers]
    with pytest.raises(ConfigError, match="storage_options applies to a path"):
        ragframe.evaluate(log(), ["faithfulness"], judge=judge, storage_options=secret)


def test_python_and_the_command_line_score_the_same_default_metrics() -> None:
    """One default set: what `evaluate` / `run` score when no metric is named is what
    `ragframe score` scores without --metrics."""
    from ragframe.cli import build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    default = next(a.default for a in subcommands["score"]._actions if a.dest == "metrics")
    assert tuple(default.split(",")) == CORE, default
    for function in (ragframe.evaluate, ragframe.aevaluate, ragframe.run, ragframe.arun):
        assert inspect.signature(function).parameters["metrics"].default == CORE, function
    assert len(CORE) == 4
