"""What every subcommand shares: the exit statuses, the argument parsers, the run summary and
the one-line error that names the endpoint. Subcommand modules import this module, never each
other nor names from the package's `__init__`, so no import cycle can form."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragframe.errors import ConfigError, EndpointError, JudgeError, RagframeError
from ragframe.evaluate import EXIT_METRIC_FAILED
from ragframe.summary import LOCAL_WARNING, format_summary

EXIT_OK = 0
"""Done: scored, or this batch step done."""
EXIT_ERROR = 2
"""A configuration, input or endpoint error; one line on stderr says what to fix."""
EXIT_STOPPED_WAITING = 3
"""`batch run` stopped waiting before the job finished; `batch collect` resumes it."""
# EXIT_METRIC_FAILED (4, from ragframe.evaluate): some metric failed on every row that had its
# inputs; the output is written all the same.
EXIT_INTERRUPTED = 130
"""Interrupted; the answers received are in the cache, so the same command resumes."""

__all__ = [
    "CORE_METRICS",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_METRIC_FAILED",
    "EXIT_OK",
    "EXIT_STOPPED_WAITING",
    "LOCAL_WARNING",
    "endpoint_error",
    "endpoint_named",
    "format_summary",
    "one_line",
    "parse_columns",
    "parse_metrics",
    "refuse_input_as_output",
    "refuse_non_parquet_output",
    "report_failed_metrics",
]

CORE_METRICS = "faithfulness,answer_relevancy,context_precision,context_recall"


def parse_columns(text: str | None) -> dict[str, str] | None:
    """`question=prompt,answer=output` -> {"question": "prompt", "answer": "output"}."""
    if not text:
        return None
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
    """`faithfulness, context_recall` -> ["faithfulness", "context_recall"] (blanks dropped)."""
    return [name.strip() for name in text.split(",") if name.strip()]


#: Suffixes of the other formats ragframe reads: an output named so would hold Parquet.
_NOT_PARQUET = (".csv", ".jsonl", ".ndjson", ".json")


def refuse_input_as_output(source: str, *outputs: str | None) -> None:
    """The input is never written: refuse an output path that resolves to it."""
    for out in outputs:
        if out and Path(out).resolve() == Path(source).resolve():
            raise ConfigError("the output must not be the input file; the input is never written")


def refuse_non_parquet_output(output: str | None) -> None:
    """The scored output is always Parquet: refuse a name that says another format."""
    suffix = Path(output).suffix.lower() if output else ""
    if suffix in _NOT_PARQUET:
        raise ConfigError(
            f"the output is always Parquet, but {output!r} is named as {suffix}; "
            f"name it {Path(str(output)).stem}.parquet"
        )


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
