"""What every subcommand shares: the exit statuses, the argument parsers, the run summary and
the one-line error that names the endpoint. Subcommand modules import this module, never each
other nor names from the package's `__init__`, so no import cycle can form."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragframe.engine.prepare import EXIT_METRIC_FAILED
from ragframe.engine.spec import comma_names
from ragframe.engine.summary import LOCAL_WARNING, cut_line, format_summary
from ragframe.errors import ConfigError, EndpointError, InputError, JudgeError, RagframeError
from ragframe.inputs.io import refuse_non_parquet_output
from ragframe.metrics import CORE

EXIT_OK = 0
"""Done: scored, or this batch step done."""
EXIT_ERROR = 2
"""A configuration, input or endpoint error; one line on stderr says what to fix."""
EXIT_STOPPED_WAITING = 3
"""`batch run` stopped waiting before the job finished; `batch collect` resumes it."""
# EXIT_METRIC_FAILED (4, from ragframe.evaluate): some metric failed on every row that had its
# inputs; the output is written all the same.
EXIT_SOFTWARE = 70
"""An unexpected error: a bug in ragframe (sysexits' EX_SOFTWARE), never read as a failed gate;
one line names it and where to report it, the traceback only with --debug."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C); with a cache the answers received are in it, so the same command
resumes; without one (`--no-cache`, a command that sends nothing) it starts over."""
EXIT_BROKEN_PIPE = 141
"""stdout was closed before everything was written (`ragframe metrics | head -1`): 128 + SIGPIPE,
what a shell reports for a tool stopped by a closed pipe; quiet."""
EXIT_TERMINATED = 143
"""Terminated (SIGTERM: 128 + 15) and stopped as Ctrl-C stops: the same command resumes from
the cache, as after Ctrl-C."""

__all__ = [
    "CORE_METRICS",
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_METRIC_FAILED",
    "EXIT_OK",
    "EXIT_SOFTWARE",
    "EXIT_STOPPED_WAITING",
    "EXIT_TERMINATED",
    "LOCAL_WARNING",
    "confidence_level",
    "dollars",
    "endpoint_error",
    "endpoint_named",
    "format_summary",
    "int_at_least",
    "non_negative_float",
    "non_negative_int",
    "one_line",
    "parse_columns",
    "parse_metrics",
    "positive_float",
    "positive_int",
    "print_summary",
    "refuse_input_as_output",
    "refuse_non_parquet_output",
    "refuse_over_budget",
    "report_failed_metrics",
]

CORE_METRICS = ",".join(CORE)


# Numeric option types. argparse calls them while parsing, so a bad value stops the command with
# exit status 2 and `ragframe X: error: argument --timeout: must be ...` before any file is read
# or any request sent (`--timeout 0` used to retry every request six times, then write nulls).
# Each carries `rule` (what it accepts, for the message and the docs) and `rejects` (values it
# refuses, which the table-driven test feeds to every option that uses it).


def _number(text: str, kind: type, rule: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
    return value


MAX_COUNT = 1_000_000_000
"""The largest count an option takes (rows, requests in flight, repeats, attempts): more than
any run can use, and far below what the libraries underneath overflow on (pyarrow refused
`--chunk-rows 99999999999999999999` with an OverflowError and a traceback)."""
MAX_SEED = 2**32 - 1
"""The largest seed: NumPy's classic seed range, with room under the 64-bit integers that
judges and Polars take for `seed + repeat`."""


def int_at_least(minimum: int, maximum: int = MAX_COUNT) -> Any:
    """An argparse type: a whole number from `minimum` to `maximum`."""
    rule = f"a whole number from {minimum} to {maximum}"

    def check(text: str) -> int:
        value = int(_number(text, int, rule))
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
        return value

    check.__name__ = f"int_at_least_{minimum}"
    check.rule = rule  # type: ignore[attr-defined]
    check.rejects = (  # type: ignore[attr-defined]
        str(minimum - 1), str(maximum + 1), "99999999999999999999", "1.5", "x"
    )  # fmt: skip
    return check


positive_int = int_at_least(1)
"""An argparse type: a whole number 1 to MAX_COUNT (counts: concurrency, rows, repeats,
attempts)."""
non_negative_int = int_at_least(0, MAX_SEED)
"""An argparse type: a whole number 0 to MAX_SEED (seeds; rows shown, where 0 shows none)."""


def _float_type(name: str, rule: str, accepts: Any, rejects: tuple[str, ...]) -> Any:
    def check(text: str) -> float:
        value = float(_number(text, float, rule))
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
        return value

    check.__name__ = name
    check.rule = rule  # type: ignore[attr-defined]
    check.rejects = rejects  # type: ignore[attr-defined]
    return check


positive_float = _float_type(
    "positive_float", "a finite number above 0", lambda v: v > 0, ("0", "-1", "nan", "inf")
)
"""An argparse type: a finite number > 0 (seconds, rates)."""
non_negative_float = _float_type(
    "non_negative_float", "a finite number 0 or more", lambda v: v >= 0, ("-1", "nan", "inf")
)
"""An argparse type: a finite number >= 0 (dollars, temperature, seconds to wait)."""
confidence_level = _float_type(
    "confidence_level",
    "a confidence level strictly between 0 and 1, e.g. 0.95",
    lambda v: 0 < v < 1,
    ("0", "1", "95", "-0.5", "nan"),
)
"""An argparse type: a confidence level, 0 < level < 1 (95 is refused, not read as 95 %)."""


def parse_columns(text: str | Mapping[str, str] | None) -> dict[str, str] | None:
    """`question=prompt,answer=output` -> {"question": "prompt", "answer": "output"}; a
    mapping (ragframe.toml's `columns` table, checked there) as it is."""
    if not text:
        return None
    if isinstance(text, Mapping):
        return dict(text)
    mapping: dict[str, str] = {}
    for part in text.split(","):
        canonical, sep, source = part.partition("=")
        if not sep or not canonical.strip() or not source.strip():
            raise RagframeError(
                f"--columns expects canonical=source pairs like question=prompt, got {part!r}"
            )
        mapping[canonical.strip()] = source.strip()
    return mapping


def parse_metrics(text: str) -> list[str]:
    """`faithfulness, context_recall` -> ["faithfulness", "context_recall"] (blanks dropped),
    split as a run's metrics are (`comma_names`); "all" is a name here, not every metric."""
    return list(comma_names(text))


#: Suffixes of the other formats ragframe reads: an output named so would hold Parquet.
def refuse_input_as_output(source: str, *outputs: str | None) -> None:
    """The input is never written: refuse an output path that resolves to it."""
    for out in outputs:
        if out and Path(out).resolve() == Path(source).resolve():
            raise ConfigError("the output must not be the input file; the input is never written")


def refuse_existing_output(overwrite: bool, *outputs: str | None) -> None:
    """An output is replaced only when asked: refuse one that exists without --overwrite."""
    for out in outputs:
        if out and Path(out).exists() and not overwrite:
            raise InputError(f"output {out!r} exists; add --overwrite to replace it")


def one_line(text: str) -> str:
    """An error message as one line (servers' messages may hold newlines)."""
    return " ".join(str(text).split())


def endpoint_error(err: JudgeError, judge: Any) -> JudgeError:
    """The error that stopped the run, on one line naming the endpoint, the model and the fix
    (an error already raised by the client says what failed, not always where or what to do)."""
    said = one_line(str(err))
    lowered = said.lower()
    fix = ""
    if "fix:" not in lowered and "check " not in lowered:
        if re.search(r"\b40[13]\b", said) or "api key" in lowered:
            fix = "check the API key ($OPENAI_API_KEY) is valid for this endpoint"
        elif re.search(r"\b404\b", said) or "no model" in lowered:
            fix = "check --model ($RAGFRAME_MODEL) names a model this endpoint serves"
        elif isinstance(err, EndpointError):
            fix = "check --base-url ($OPENAI_BASE_URL) and that the server is up"
    message = said
    if judge.endpoint_host not in said or judge.model not in said:
        message = f"{judge.public_base_url} (model {judge.model!r}): {said}"
    if fix:
        message = f"{message}; fix: {fix}"
    return EndpointError(message) if isinstance(err, EndpointError) else JudgeError(message)


@contextmanager
def endpoint_named(judge: Any) -> Iterator[None]:
    """Re-raise a judge error that stops a subcommand with the endpoint and the fix named."""
    try:
        yield
    except JudgeError as err:
        raise endpoint_error(err, judge) from None


def print_summary(summary: dict[str, Any], local: bool) -> None:
    """The run summary on stdout; texts cut before judging said on stderr too, where a
    pipeline's log shows it."""
    print(format_summary(summary, local))
    cut = cut_line(summary)
    if cut:
        print(f"ragframe: warning: {cut}", file=sys.stderr)


#: What a run on the embedded judge costs, where a priced judge's dollars are printed.
NO_CHARGE = "no charge (the embedded judge runs here)"


def dollars(value: float | None, *, local: bool = False) -> str:
    """Dollars, or why there are none: the embedded judge has no price because it costs
    nothing; any other judge without one has a price ragframe does not know."""
    if value is None:
        return NO_CHARGE if local else "unknown price"
    return f"${value:.4f}"


def refuse_over_budget(estimate: float | None, max_cost: float | None) -> None:
    """`--max-cost`: a run whose dry-run estimate exceeds it is refused before anything is
    sent (an unknown price estimates nothing: the judge then stops a run that spends it)."""
    if estimate is not None and max_cost is not None and estimate > max_cost:
        raise RagframeError(
            f"the estimate ${estimate:.4f} exceeds --max-cost ${max_cost:.4f}; nothing was sent"
        )


def report_failed_metrics(failed: dict[str, str], output: str | None) -> int:
    """Say which metrics failed on every row (and the first error); the exit status."""
    if not failed:
        return EXIT_OK
    for name, error in failed.items():
        print(
            f"ragframe: error: {name} failed on every row that had its inputs; first error: "
            f"{one_line(error)[:500]}",
            file=sys.stderr,
        )
    written = f"{output} was written with these metrics null" if output else "no output written"
    print(f"ragframe: {written} (exit status {EXIT_METRIC_FAILED})", file=sys.stderr)
    return EXIT_METRIC_FAILED
