"""One figure, one value: the same scores give the same mean and interval, printed with the
same decimals, wherever ragframe prints them: the run summary (in memory, and streamed chunk
by chunk through `Tally`), `ragframe.summarize`, the `ragframe summarize` command, the gates
(`ragframe.check_gates` and the `ragframe gate` command) and the report's tables, whatever the
row order and the chunking."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.cli.summarize import format_table
from ragframe.decide.gates import check_gates
from ragframe.engine.summary import Tally, format_summary, metric_summary
from ragframe.inputs.io import write_parquet
from ragframe.report import _data, _source
from ragframe.report._page import interval_text

#: "0.947 [0.789, 1.000]": a mean and its interval as text.
FIGURE = re.compile(r"(\d\.\d+)\s+(\[\d\.\d+, \d\.\d+\])")

RUN = {
    "rows": 0,
    "requests": 0,
    "cache_hits": 0,
    "deduplicated": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "seconds": 0.0,
}


def _scores(n: int, seed: int) -> np.ndarray:
    """Verdict fractions (k of 1..7 statements), as faithfulness gives, mostly high."""
    rng = np.random.default_rng(seed)
    statements = rng.integers(1, 8, n)
    return np.minimum(rng.binomial(statements, 0.85) / statements, 1.0)


def _printed(text: str) -> str:
    found = FIGURE.findall(text)
    assert len(found) == 1, text
    return " ".join(found[0])


def _run_summary_text(line: dict) -> str:
    return _printed(format_summary({**RUN, "metrics": {"faithfulness": line}}, local=False))


def _streamed(values: np.ndarray, chunks: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tally = Tally("higher")
    for part in np.array_split(rng.permutation(values), chunks):
        tally.add(pl.Series(part, dtype=pl.Float64))
    return tally.summary()


def _scored_file(values: np.ndarray, path: Path, seed: int) -> Path:
    shuffled = np.random.default_rng(seed).permutation(values)
    frame = pl.DataFrame({"faithfulness": shuffled}).with_columns(
        pl.struct(error=pl.lit(None, pl.String)).alias("faithfulness_detail")
    )
    write_parquet(frame, path, {"metrics": {"faithfulness": {"direction": "higher"}}})
    return path


@pytest.mark.parametrize("n", [3, 20, 240])
def test_every_place_prints_the_same_interval(
    n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = _scores(n, seed=n)
    expected = _run_summary_text(metric_summary(pl.Series(values), "higher"))
    # The run summary on the scores in another order, and streamed in chunks of any size.
    reordered = np.random.default_rng(1).permutation(values)
    assert _run_summary_text(metric_summary(pl.Series(reordered), "higher")) == expected
    for chunks in (1, 2, 7):
        assert _run_summary_text(_streamed(values, min(chunks, n), seed=chunks)) == expected
    # The file the run wrote, its rows shuffled: ragframe.summarize, the command, the report.
    path = _scored_file(values, tmp_path / "scored.parquet", seed=2)
    table = ragframe.summarize(str(path))
    assert _printed(format_table(table)) == expected
    assert main(["summarize", str(path)]) == 0
    assert _printed(capsys.readouterr().out) == expected
    # The gates, passing and failing: "mean 0.947 ≥ 0.000 (n=20; 95% interval [0.789, 1.000])".
    mean, interval = expected.split(" ", 1)
    gated = str(check_gates(str(path), fail_under={"faithfulness": 0.0}))
    assert f"mean {mean} ≥ 0.000 (n={n}; 95% interval {interval})" in gated
    below = values.mean() < 1 - 1e-9  # all 1.0 (it happens at n = 3) meets the gate
    assert main(["gate", str(path), "--fail-under", "faithfulness=1"]) == (1 if below else 0)
    assert f"mean {mean} " in (out := capsys.readouterr().out)
    assert f"(n={n}; 95% interval {interval})" in out
    source = _source.load(str(path))
    light = _data.light_frame(source, ["faithfulness"], [], {})
    row = _data.group_means(light, ["faithfulness"], {"faithfulness": "higher"}, 0.95).row(
        0, named=True
    )
    report_text = f"{row['mean']:.3f} {interval_text(row['ci_low'], row['ci_high'])}"
    assert report_text == expected


def test_a_small_group_gets_the_same_interval_as_the_same_scores_alone() -> None:
    """`summarize --by human_label` on a 3-row group prints what the run summary prints for
    those three scores, whatever the other groups hold."""
    frame = pl.DataFrame(
        {
            "human_label": ["yes", "no", "yes", "no", "no", "yes", "no"],
            "faithfulness": [0.5, 0.2, 1.0, 0.4, 0.9, 0.75, 0.1],
        }
    )
    table = ragframe.summarize(frame, metrics=["faithfulness"], by="human_label")
    row = table.filter(pl.col("human_label") == "yes").row(0, named=True)
    alone = metric_summary(pl.Series([0.75, 1.0, 0.5]), "higher")
    assert (row["mean"], row["ci_low"], row["ci_high"]) == (
        alone["mean"],
        alone["ci_low"],
        alone["ci_high"],
    )


def test_streamed_and_in_memory_agree_to_the_bit_past_five_thousand_scores() -> None:
    """Past the old bootstrap limit the streamed run folded a float sum chunk by chunk, the
    in-memory one summed in another order: the same scores gave different last bits."""
    values = np.random.default_rng(3).beta(2, 5, 12_345)
    whole = metric_summary(pl.Series(values), "higher")
    for chunks in (3, 10, 97):
        streamed = _streamed(values, chunks, seed=chunks)
        for key in ("mean", "ci_low", "ci_high", "interval_method", "scored"):
            assert streamed[key] == whole[key], (chunks, key)
