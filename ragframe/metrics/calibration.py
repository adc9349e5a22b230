"""A metric's score as a probability that a person labels the row true: the fitted monotone
map (`Calibration`), its file, and the check that scores come from the judge and prompts it was
fitted for. The engine applies it (`{metric}_p_human`); `ragframe.decide.calibration` fits it
and judges its held-out quality."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ragframe.errors import ConfigError, InputError

#: The calibration file's format tag (a file without it is refused).
FORMAT = "ragframe-calibration/1"
#: Equal-width bins of the held-out probability over which the expected calibration error is
#: taken (recorded in a calibration's quality table).
ECE_BINS = 10


class CalibrationWarning(UserWarning):
    """A calibration applied to scores from a judge or prompt it was not fitted for."""


def predict_with(params: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    if params["method"] == "isotonic":
        return np.interp(x, np.asarray(params["x"]), np.asarray(params["p"]))
    return 1.0 / (1.0 + np.exp(-(params["intercept"] + params["slope"] * x)))


@dataclass
class Calibration:
    """A fitted monotone map from `metric`'s score to P(`label` is true), with its held-out
    quality and provenance (module docstring). `save` / `load` as JSON; `predict` on scores
    (in the metric's own units: a lower-is-better score is turned around inside)."""

    metric: str
    label: str
    direction: str
    params: dict[str, Any]
    n: int
    n_positive: int
    folds: int
    level: float
    seed: int
    brier: float
    brier_ci: tuple[float, float]
    brier_base: float
    ece: float
    ece_ci: tuple[float, float]
    reliability: list[dict[str, Any]]
    judge: Any = None
    prompt_hashes: Any = None
    n_dropped: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return str(self.params["method"])

    @property
    def column(self) -> str:
        """The column `apply` adds: `{metric}_p_human`."""
        return f"{self.metric}_p_human"

    def predict(self, scores: Any) -> np.ndarray:
        """P(label true) for each score (NaN where the score is null or NaN)."""
        x = np.asarray(scores, dtype=np.float64)
        if self.direction == "lower":
            x = 1.0 - x
        out = predict_with(self.params, np.nan_to_num(x, nan=0.0))
        return np.where(np.isnan(x), np.nan, out)

    def curve(self, points: int = 101) -> pl.DataFrame:
        """The fitted map on an even grid of scores over [0, 1] (for the reliability diagram)."""
        grid = np.linspace(0.0, 1.0, points)
        return pl.DataFrame({"score": grid, "p_human": self.predict(grid)})

    def reliability_table(self) -> pl.DataFrame:
        """The binned observed rates with their Wilson intervals and the fitted values."""
        return pl.DataFrame(self.reliability)

    def quality(self) -> pl.DataFrame:
        """Held-out Brier score and ECE, each with n and interval, as a table."""
        return pl.DataFrame(
            {
                "metric": [self.metric] * 2,
                "figure": ["brier", "ece"],
                "value": [self.brier, self.ece],
                "ci_low": [self.brier_ci[0], self.ece_ci[0]],
                "ci_high": [self.brier_ci[1], self.ece_ci[1]],
                "level": [self.level] * 2,
                "n": [self.n] * 2,
                "method": [self.method] * 2,
                "note": [
                    f"cross-fitted over {self.folds} folds; base-rate Brier {self.brier_base:.4f}",
                    f"{ECE_BINS} equal-width bins of the held-out probability",
                ],
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    def save(self, path: str | Path) -> Path:
        """Write the map as JSON (small: knots or two coefficients, figures, provenance)."""
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return target

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        source = Path(path)
        try:
            blob = json.loads(source.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read a calibration from {str(source)!r}: {exc}") from exc
        if not isinstance(blob, dict) or blob.get("format") != FORMAT:
            raise InputError(
                f"{str(source)!r} is not a ragframe calibration file (no format {FORMAT!r}); "
                "make one with `ragframe calibrate`"
            )
        blob.pop("format")
        blob["brier_ci"] = tuple(blob["brier_ci"])
        blob["ece_ci"] = tuple(blob["ece_ci"])
        return cls(**blob)

    def check_provenance(self, meta: Mapping[str, Any], where: str = "the scores") -> list[str]:
        """What differs between the scores' judge / prompts and those fitted for (a warning
        each, also returned)."""
        said = []
        judge = meta.get("judge")
        if self.judge is not None and judge is not None and judge != self.judge:
            said.append(
                f"{where} come from judge {judge!r}; the calibration was fitted for {self.judge!r}"
            )
        hashes = ((meta.get("metrics") or {}).get(self.metric) or {}).get("prompt_hashes")
        if self.prompt_hashes is not None and hashes is not None and hashes != self.prompt_hashes:
            said.append(
                f"{where} were scored with other {self.metric} prompts than the calibration "
                "was fitted for (prompt hashes differ)"
            )
        for message in said:
            warnings.warn(
                message + ": its probabilities may not hold; refit with `ragframe calibrate`",
                CalibrationWarning,
                stacklevel=3,
            )
        return said


def run_calibrations(given: Any, metrics: Any, judge: Any) -> list[Calibration]:
    """The calibrations a run applies (`calibration=` / `--calibration`: a Calibration, a
    file, or a list of them), each checked before any request: its metric is one the run
    scores (else a ConfigError), and its judge and prompts are this run's (else a warning)."""

    items = (
        []
        if given is None
        else [given]
        if isinstance(given, str | Path | Calibration)
        else list(given)
    )
    loaded = [item if isinstance(item, Calibration) else Calibration.load(item) for item in items]
    scorers = {m.name: m for m in metrics if hasattr(m, "tasks")}
    for cal in loaded:
        if cal.metric not in scorers:
            raise ConfigError(
                f"the calibration is for {cal.metric!r}, which this run does not score; its "
                f"metrics are {sorted(scorers)}"
            )
        hashes = {t.name: t.prompt_hash for t in scorers[cal.metric].tasks()}
        meta = {"judge": judge.describe(), "metrics": {cal.metric: {"prompt_hashes": hashes}}}
        cal.check_provenance(json.loads(json.dumps(meta, default=str)), "this run's scores")
    return loaded


def add_p_human(frame: pl.DataFrame, calibrations: list[Calibration]) -> pl.DataFrame:
    """`frame` with `{metric}_p_human` per calibration (null where the score is null)."""
    for cal in calibrations:
        values = cal.predict(frame.get_column(cal.metric).cast(pl.Float64).to_numpy())
        frame = frame.with_columns(pl.Series(cal.column, values, dtype=pl.Float64).fill_nan(None))
    return frame


def describe(calibrations: list[Calibration]) -> list[dict[str, Any]]:
    """What a run's metadata records of the calibrations it applied."""
    return [
        {"metric": c.metric, "label": c.label, "method": c.method, "n": c.n, "column": c.column}
        for c in calibrations
    ]
