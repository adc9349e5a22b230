"""A jury of runs scored apart (`ragframe jury claims` / `ragframe jury combine`): three judges
each scored through the Batch API on the fake server, combined into the same jury as one run
with `judges=[...]` makes; runs of other rows refused; items that are not the same items
never voted on together."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for, reply, task_name
from test_batch import batch_inputs
from test_jury import CLAIMS, jury, rows, scripted

import ragframe
from ragframe.cli import main
from ragframe.decide.jury_of_runs import claims_for_others, combine_runs
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import read_metadata
from ragframe.testing.server import FakeServer

KEY = "sk-test-not-a-real-key"
METRICS = ["faithfulness", "context_precision", "context_recall"]
MODELS = ("honest-a", "honest-b", "liar-c")


def batch_run(server: FakeServer, source: Path, out: Path, model: str, tmp: Path) -> None:
    """One judge's run through the Batch API (`ragframe batch run`), with its own cache."""
    rc = main(
        [
            "batch", "run", str(source), "-o", str(out), "--manifest", str(tmp / f"{model}.json"),
            "--metrics", ",".join(METRICS), "--model", model, "--base-url", server.base_url,
            "--cache", str(tmp / f"{model}-batch.sqlite3"), "--poll-interval", "0.05",
            "--wait", "60",
        ]
    )  # fmt: skip
    assert rc == 0, f"batch run for {model} failed"


def test_a_jury_of_batch_runs_equals_the_jury_of_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    data = pl.concat([rows(3), rows(2, first=100)])
    source = tmp_path / "in.parquet"
    data.write_parquet(source)
    with FakeServer(handler=scripted) as server:
        one_run = ragframe.run(data, METRICS, judges=jury(server, tmp_path)).frame
        server.reset()
        a, shared = tmp_path / "a.parquet", tmp_path / "shared.parquet"
        batch_run(server, source, a, MODELS[0], tmp_path)
        assert main(["jury", "claims", str(a), "-o", str(shared)]) == 0
        others = [tmp_path / f"{m}.parquet" for m in MODELS[1:]]
        for model, out in zip(MODELS[1:], others, strict=True):
            batch_run(server, shared, out, model, tmp_path)
        lines = [line for _, sent in batch_inputs(server) for line in sent]
        capsys.readouterr()
        out = tmp_path / "jury.parquet"
        assert main(["jury", "combine", str(a), *map(str, others), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    combined = pl.read_parquet(out)
    # The claims were extracted once per row, by the lead; the others verified the same ones.
    extractions = [x for x in lines if task_name(x["body"]) == "answer_claims"]
    verifications = [x for x in lines if task_name(x["body"]) == "faithfulness_verify"]
    assert len(extractions) == data.height  # by the lead alone
    assert Counter(x["body"]["model"] for x in verifications) == dict.fromkeys(MODELS, data.height)
    for metric in METRICS:
        assert combined[metric].to_list() == pytest.approx(one_run[metric].to_list())
        for model in MODELS:
            own = f"{metric}@{model}"
            assert combined[own].to_list() == pytest.approx(one_run[own].to_list())
    votes = combined["faithfulness_detail"].struct.field("claims").to_list()
    assert votes == one_run["faithfulness_detail"].struct.field("claims").to_list()
    assert [c["votes"] for c in votes[0]] == [[True, True, False], [True, True, False],
                                              [False, False, True]]  # fmt: skip
    assert combined["faithfulness_detail"].struct.field("error").null_count() == data.height
    assert combined.select(data.columns).equals(data)  # the input, untouched, in order
    meta = read_metadata(out)
    assert meta["run"]["jury"] == list(MODELS)
    sent = [read_metadata(p)["summary"] for p in (a, *others)]
    paid = sum(s["requests"] + s["batch"]["requests_submitted"] for s in sent)
    assert meta["summary"]["requests"] == paid == len(lines)  # every judge's lines counted
    assert "jury of 3: honest-a, honest-b, liar-c" in printed
    assert "faithfulness: agreement alpha over rows" in printed
    summarized = ragframe.summarize(out).filter(pl.col("metric") == "faithfulness")
    assert summarized["mean"].item() == pytest.approx(combined["faithfulness"].mean(), abs=5e-4)


def two_runs(
    tmp_path: Path, handler: Any, models: tuple[str, str] = ("first", "second")
) -> list[Path]:
    """The same rows scored by two judges, each run written as `ragframe score` writes it."""
    paths = []
    with FakeServer(handler=handler) as server:
        for model in models:
            judge = judge_for(server, tmp_path, model)
            result = ragframe.run(rows(3), ["faithfulness"], judge=judge)
            path = tmp_path / f"{model}.parquet"
            result.write_parquet(path)
            paths.append(path)
    return paths


def own_claims(body: dict[str, Any]) -> Any:
    """Each judge extracts three claims of its own wording: same count, other items."""
    if task_name(body) == "answer_claims":
        return reply({"claims": [f"{body['model']}: {c}" for c in CLAIMS]})
    return scripted(body)


def test_items_that_differ_are_never_voted_on_together(tmp_path: Path) -> None:
    first, second = two_runs(tmp_path, own_claims)
    jury_of = combine_runs([first, second])
    detail = jury_of.frame["faithfulness_detail"]
    # Three claims each, but not the same claims: the mean of the scores, said per row.
    assert (
        detail.struct.field("error").to_list()
        == ["the judges judged different claims: the mean of their scores"] * 3
    )
    assert jury_of.frame["faithfulness"].to_list() == pytest.approx([2 / 3] * 3)
    assert jury_of.summary["jury"]["metrics"]["faithfulness"]["items"]["n"] == 0


def test_a_tie_between_runs_is_not_a_majority(tmp_path: Path) -> None:
    """An honest run and a liar's over the same claims: every claim's vote is a tie, so no
    claim is shown to hold and the jury's score is 0, not 1."""
    honest, liar = two_runs(tmp_path, scripted, ("honest-x", "liar-y"))
    frame = combine_runs([honest, liar]).frame
    assert frame["faithfulness@honest-x"].to_list() == pytest.approx([2 / 3] * 3)
    assert frame["faithfulness"].to_list() == [0.0] * 3
    claims = frame["faithfulness_detail"][0]["claims"]
    assert [c["votes"] for c in claims] == [[True, False], [True, False], [False, True]]
    assert [c["supported"] for c in claims] == [False] * 3


def test_runs_of_other_rows_are_refused(tmp_path: Path) -> None:
    first, second = two_runs(tmp_path, scripted)
    shuffled = tmp_path / "shuffled.parquet"
    pl.read_parquet(second).reverse().write_parquet(shuffled)
    with pytest.raises(InputError, match=r"differ in column 'question' at row 0 \(2 rows"):
        combine_runs([first, shuffled])
    shorter = tmp_path / "shorter.parquet"
    pl.read_parquet(second).head(2).write_parquet(shorter)
    with pytest.raises(InputError, match="has 2 rows"):
        combine_runs([first, shorter])
    with pytest.raises(ConfigError, match="at least 2 runs"):
        combine_runs([first])
    with pytest.raises(ConfigError, match="2 distinct non-empty names"):
        combine_runs([first, second], names=["x", "x"])
    jury_file = tmp_path / "jury.parquet"
    combine_runs([first, second]).write_parquet(jury_file)
    with pytest.raises(InputError, match="a jury's output already"):
        combine_runs([jury_file, first])
    with pytest.raises(InputError, match="holds no faithfulness"):
        claims_for_others(pl.DataFrame({"question": ["q"], "answer": ["a"]}))


def test_the_jury_of_runs_takes_names_thresholds_and_the_median(tmp_path: Path) -> None:
    first, second = two_runs(tmp_path, own_claims)
    jury_of = combine_runs(
        [first, second], names=["x", "y"], aggregate="median", thresholds={"faithfulness": 0.6}
    )
    frame = jury_of.frame
    assert {"faithfulness@x", "faithfulness@y", "faithfulness_pass"} <= set(frame.columns)
    assert frame["faithfulness_pass"].to_list() == [True] * 3  # 2/3 >= 0.6
    assert jury_of.summary["metrics"]["faithfulness"]["scored"] == 3
    assert jury_of.metadata["run"]["aggregate"] == "median"
