"""One run specification: every option of a run gathered once, executed by every path.

ragframe runs the same scoring several ways: in memory (`evaluate` / `run`, and `ragframe
score` with `--sample`, `--repeats` or `--jury`), streamed chunk by chunk (`ragframe score`),
on Arrow batches (`score_arrow`), on a Ray cluster (`--ray`) and through the Batch API
(`ragframe batch`). Each path executes a `RunSpec`; a path
that cannot honour an option it was given refuses it before the first request (a
`ConfigError`, exit status 2 on the command line, naming the option and the path), never
drops it. `PATHS` is the one table of what each path honours, so a new option or a new path
is a decision made here, in one place, and tested over the whole table
(`tests/test_one_run.py`).

The judge's own settings (concurrency, rate limits, timeout, temperature, the cost cap,
`retry_failed`, reasons) travel with the `Judge`, which every path hands to its sessions; the
spec records them in the output's metadata beside the run's own options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragframe.errors import ConfigError

#: Rows read, scored and written at a time by a streamed run, unless --chunk-rows says.
DEFAULT_CHUNK_ROWS = 2000

#: Each option of a run -> how the command line spells it (for messages).
FLAGS: dict[str, str] = {
    "metrics": "--metrics",
    "columns": "--columns",
    "reasons": "--no-reasons",
    "thresholds": "--threshold",
    "strict": "--strict",
    "fail_under": "--fail-under",
    "min_pass_rate": "--min-pass-rate",
    "ignore_failed": "--ignore-failed",
    "repeats": "--repeats",
    "seed": "--seed",
    "sample": "--sample",
    "chunk_rows": "--chunk-rows",
    "dry_run": "--dry-run",
    "max_cost": "--max-cost",
    "calibration": "--calibration",
    "judges": "--jury",
    "aggregate": "--jury-aggregate",
    "actors": "--actors",
    "batch_rows": "--batch-rows",
}

_EVERY = frozenset(FLAGS)

#: The most repeats a run takes: each repeat is a whole run's requests (k x the cost), and
#: the reliability figures settle long before (`ragframe.engine.repeats`).
MAX_REPEATS = 100


def check_repeats(k: Any) -> int:
    """`k` when it is a whole number from 1 to MAX_REPEATS, else a ConfigError saying what is
    accepted (checked when a run is specified, before anything is read or sent)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_REPEATS:
        raise ConfigError(
            f"repeats must be a positive integer, at most {MAX_REPEATS} (1: a single run; each "
            f"repeat sends every request of the run again), got {k!r}"
        )
    return k


def comma_names(text: str) -> tuple[str, ...]:
    """`"a, b,,c"` -> `("a", "b", "c")`: names separated by commas, blanks dropped; the one
    split of every comma-separated option (`--metrics`, `--by`, `--strict`...)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def metric_names(metrics: Any) -> tuple[Any, ...] | str:
    """A run's metrics as a tuple, "all" kept as is: a single string is one metric name or a
    comma-separated list of them, as `--metrics` takes it (never its characters). A name that
    must be built instead (`g_eval`: G-Eval needs your criteria) is refused with how to build
    it, where "unknown metric" would say nothing of criteria."""
    from ragframe.metrics import refuse_built_by_name

    names = _split_names(metrics)
    if not isinstance(names, str):
        refuse_built_by_name(names)
    return names


def _split_names(metrics: Any) -> tuple[Any, ...] | str:
    """`metric_names` without its refusal."""
    if isinstance(metrics, str):
        if metrics.strip().lower() == "all":
            return metrics
        return comma_names(metrics)
    return tuple(metrics)


#: What each path honours. Anything else it is given is refused before the first request.
#: "streamed" hands --sample, --repeats and --jury to "in-memory" (the command line routes
#: them); "in-memory" scores the frame in one piece (no --chunk-rows); --actors and
#: --batch-rows size a Ray run alone; "batch" (`ragframe batch`, the OpenAI Batch API) takes
#: metrics and columns, and the judge's own options; its parser refuses every other option
#: before anything is sent, and the scored file it writes is summarised, gated and compared
#: like any other;
#: "ray" scores partitions with actors of one judge: no sample, no repeats, no dry run, and
#: its batches are sized by --batch-rows; "arrow" scores the batches a caller hands it, so
#: the gates, sampling and repeats are the caller's.
_RAY_ONLY = frozenset({"actors", "batch_rows"})
PATHS: dict[str, frozenset[str]] = {
    "in-memory": _EVERY - {"chunk_rows"} - _RAY_ONLY,
    "streamed": _EVERY - {"sample", "repeats", "judges", "aggregate"} - _RAY_ONLY,
    "ray": _EVERY
    - {"sample", "repeats", "dry_run", "chunk_rows", "calibration", "judges", "aggregate"},
    "arrow": frozenset({"metrics", "columns", "reasons", "thresholds", "strict"}),
    "batch": frozenset({"metrics", "columns"}),
}

#: What a path says instead, where another way exists.
_INSTEAD = {
    "ray": "run it without --ray on one partition (ragframe score FILE.parquet ...)",
    "arrow": "apply it to the scored batches (ragframe.check_gates, ragframe.run(...))",
    "streamed": "ragframe score routes it to the in-memory path",
    "in-memory": "--sample, --repeats and --jury score the rows in memory, in one piece: drop it",
    "batch": "apply it to the file the job writes (ragframe gate / summarize / report)",
}


@dataclass(frozen=True)
class RunSpec:
    """What a run is asked to do. Defaults are "not given"; `given()` lists the rest."""

    #: Metric names or instances, or "all".
    metrics: tuple[Any, ...] | str = ()
    columns: Mapping[str, str] | None = None
    #: False: no written reason per verdict; None: the judge's setting.
    reasons: bool | None = None
    thresholds: Mapping[str, float] = field(default_factory=dict)
    strict: tuple[str, ...] = ()
    fail_under: Mapping[str, float] = field(default_factory=dict)
    min_pass_rate: Mapping[str, float] = field(default_factory=dict)
    ignore_failed: bool = False
    repeats: int = 1
    seed: int = 0
    sample: int | None = None
    #: None: the path's default (2,000 rows a chunk when streamed).
    chunk_rows: int | None = None
    dry_run: bool = False
    max_cost: float | None = None
    #: Calibrations (files or `Calibration`s) whose `{metric}_p_human` columns the run adds.
    calibration: tuple[Any, ...] = ()
    #: A jury's judges (`ragframe.engine.jury`): every metric scored by each, then combined.
    judges: tuple[Any, ...] = ()
    #: How a jury combines scores where the judges do not vote on shared items.
    aggregate: str = "mean"
    #: A Ray run's actors and rows per batch (`ragframe score --ray`); no other path has them.
    actors: int | None = None
    batch_rows: int | None = None

    def __post_init__(self) -> None:
        # Split, not checked: a spec also records a run's metrics by the names its instances
        # bear (a GEval is "g_eval" unless named), which `metric_names` would refuse.
        object.__setattr__(self, "metrics", _split_names(self.metrics))
        check_repeats(self.repeats)

    @classmethod
    def of(cls, metrics: Any, **options: Any) -> RunSpec:
        """A spec from an API call's arguments: metric names or instances (or "all"), the
        thresholds as a mapping, strict as names; None for an option means its default."""
        given = {k: v for k, v in options.items() if v is not None}
        for name in ("thresholds", "fail_under", "min_pass_rate"):
            given[name] = dict(given.get(name) or {})
        given["strict"] = tuple(given.get("strict") or ())
        calibration = given.get("calibration") or ()
        single = isinstance(calibration, str | Path) or hasattr(calibration, "predict")
        given["calibration"] = (calibration,) if single else tuple(calibration)
        given["judges"] = tuple(given.get("judges") or ())
        return cls(metrics=metrics, **given)  # names read once, by __post_init__

    def given(self) -> list[str]:
        """The options set away from their defaults (metrics and columns always count)."""
        default = RunSpec()
        return [
            name
            for name in FLAGS
            if name in ("metrics", "columns") or getattr(self, name) != getattr(default, name)
        ]

    @property
    def gated(self) -> bool:
        """Whether the run ends with a gate (the exit status then depends on the scores)."""
        return bool(self.fail_under or self.min_pass_rate)

    def gate_options(self) -> dict[str, Any]:
        """The keyword arguments of `ragframe.check_gates` this run asks for."""
        return {
            "fail_under": dict(self.fail_under),
            "min_pass_rate": dict(self.min_pass_rate),
            "thresholds": dict(self.thresholds),
            "strict": list(self.strict),
            "ignore_failed": self.ignore_failed,
        }

    def metadata(self, path: str, judge: Any = None) -> dict[str, Any]:
        """What the output's metadata records under "run": every option, the path that ran
        it, and the judge's limits (never a key or a URL)."""
        record: dict[str, Any] = {
            "path": path,
            "metrics": self.metrics
            if isinstance(self.metrics, str)
            else [m if isinstance(m, str) else m.name for m in self.metrics],
            "columns": dict(self.columns or {}),
            "reasons": self.reasons,
            "thresholds": dict(self.thresholds),
            "strict": sorted(self.strict),
            "gates": {
                "fail_under": dict(self.fail_under),
                "min_pass_rate": dict(self.min_pass_rate),
                "ignore_failed": self.ignore_failed,
            },
            "repeats": self.repeats,
            "seed": self.seed,
            "sample": self.sample,
            "chunk_rows": self.chunk_rows,
            "max_cost": self.max_cost,
            "calibration": [
                str(c) if isinstance(c, str | Path) else f"{c.metric} ({c.method}, n={c.n})"
                for c in self.calibration
            ],
            "judges": [str(j.model) for j in self.judges],
            "aggregate": self.aggregate,
        }
        if judge is not None:
            record["limits"] = {
                "concurrency": judge.concurrency,
                "requests_per_minute": judge.requests_per_minute,
                "tokens_per_minute": judge.tokens_per_minute,
                "timeout": judge.timeout,
                "max_cost": judge.max_cost,
                "retry_failed": judge.retry_failed,
                "reasons": judge.reasons,
                "temperature": judge.temperature,
            }
        return record


def refuse_unsupported(spec: RunSpec, path: str) -> None:
    """Raise a ConfigError naming the first option `path` cannot honour (before any request)."""
    if path not in PATHS:
        raise ConfigError(f"unknown run path {path!r}; one of {sorted(PATHS)}")
    dropped = [name for name in spec.given() if name not in PATHS[path]]
    if dropped:
        flags = ", ".join(FLAGS[name] for name in dropped)
        instead = _INSTEAD.get(path, "")
        if set(dropped) <= _RAY_ONLY:
            instead = "they size a Ray run: add --ray, or drop them"
        raise ConfigError(
            f"{flags} {'is' if len(dropped) == 1 else 'are'} not available on the {path} "
            f"path{' (--ray)' if path == 'ray' else ''}; nothing was sent"
            + (f". Instead: {instead}" if instead else "")
        )
