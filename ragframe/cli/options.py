"""The options several subcommands share, declared once so a name, a type, a default or a help
text cannot drift apart between them: the judge's (`add_judge_options`, turned into a Judge by
`judge_from_args`), the opening every subcommand has (`subcommand`), and the small options of
the subcommands that read scored files (`add_level`, `add_seed`, `add_output`, `add_format`).

A subcommand picks the judge options it honours by name; `judge_from_args` passes the Judge
only what the parser declared, so an option a subcommand lacks keeps the Judge's default.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ragframe.cli import common
from ragframe.errors import RagframeError

if TYPE_CHECKING:
    from ragframe.judge.pricing import Price

__all__ = [
    "JUDGE_OPTIONS",
    "SCORED_HELP",
    "add_format",
    "add_judge_options",
    "add_level",
    "add_output",
    "add_seed",
    "add_shown",
    "judge_from_args",
    "parse_price",
    "pick",
    "subcommand",
]

SCORED_HELP = "a scored file (Parquet, or JSON Lines / CSV)"
LEVEL_HELP = "confidence level (default: 0.95)"

#: `--max-text-chars`'s default: the Judge's own (`Judge(max_text_chars=)`), written here so
#: that building a parser imports no judge code; a test holds the two together.
MAX_TEXT_CHARS = 50_000

#: Each judge option's `add_argument` keywords. `{cache}` in a help text is the default cache
#: path, read from the environment when a parser is built.
_JUDGE_SPECS: dict[str, dict[str, Any]] = {
    "model": {
        "help": "judge model (default $RAGFRAME_MODEL, else gpt-4o-mini when $OPENAI_API_KEY "
        "is set). With no --model, --base-url, $RAGFRAME_MODEL or API key, the embedded local "
        "judge runs; 'local' asks for it by name. A model named with no API key and no "
        "--base-url is refused (exit 2)"
    },
    "base-url": {"help": "OpenAI-compatible endpoint (default $OPENAI_BASE_URL)"},
    "embedding-model": {
        "help": "embedding model for answer_relevancy (default $RAGFRAME_EMBEDDING_MODEL, "
        "else text-embedding-3-small on OpenAI, else the local MiniLM embedder when installed)"
    },
    "concurrency": {
        "type": common.positive_int,
        "default": 16,
        "help": "HTTP requests in flight (default: 16; the embedded judge: one per CPU, its "
        "servers)",
    },
    "temperature": {
        "type": common.non_negative_float,
        "default": 0.0,
        "help": "the judge's sampling temperature (default: 0; above 0 with --repeats, to "
        "measure sampling noise)",
    },
    "requests-per-minute": {
        "type": common.positive_float,
        "help": "most requests sent per minute (default: no limit; with --ray, for the cluster)",
    },
    "tokens-per-minute": {
        "type": common.positive_float,
        "help": "most prompt and completion tokens per minute, estimated before each "
        "request (default: no limit; with --ray, for the cluster)",
    },
    "timeout": {
        "type": common.positive_float,
        "default": 120.0,
        "help": "seconds per request (default: 120)",
    },
    "no-cache": {"action": "store_true", "help": "do not read or write the cache"},
    "cache": {
        "help": "cache file (default: {cache}; from $RAGFRAME_CACHE or $XDG_CACHE_HOME when set)"
    },
    "retry-failed": {
        "action": "store_true",
        "help": "send again the requests the cache remembers as failed for good (answers cut "
        "off at max_tokens); by default a rerun does not pay for them (every other failure, a "
        "garbled answer included, is sent again by a plain rerun)",
    },
    "no-reasons": {
        "action": "store_true",
        "help": "do not ask the judge for a reason per verdict (fewer completion tokens; "
        "the detail's reason fields are null). Default: reasons on, off for the embedded "
        "judge",
    },
    "fail-fast": {"action": "store_true", "help": "stop at the first failed request"},
    "no-progress": {"action": "store_true", "help": "hide the progress bar"},
    "max-cost": {
        "type": common.non_negative_float,
        "help": "dollars: refuse a run whose estimate exceeds it, and stop one that spends "
        "it (default: no limit)",
    },
    "price": {
        "metavar": "IN,OUT[,CACHED]",
        "help": "prompt,completion[,cached prompt] dollars per million tokens (default: "
        "ragframe.pricing; without a cached rate, cached prompt tokens are billed in full)",
    },
    "max-text-chars": {
        "type": common.positive_int,
        "default": MAX_TEXT_CHARS,
        "metavar": "N",
        "help": f"cut every input text (and list item) longer than N characters before judging "
        f"(default: {MAX_TEXT_CHARS}, about 12k tokens); a cut row says so in "
        "{metric}_detail.inputs_cut, and the run counts them",
    },
}


JUDGE_OPTIONS = tuple(_JUDGE_SPECS)
"""Every judge option's name, in the order `ragframe score --help` lists them."""


def add_judge_options(
    parser: Any, which: Iterable[str] = JUDGE_OPTIONS, *, helps: Mapping[str, str] | None = None
) -> None:
    """Add the judge options named in `which` (names from JUDGE_OPTIONS, without the dashes)
    to `parser` (a parser or an argument group); `helps` replaces a help text where a
    subcommand has more to say (where its default comes from, what it is used for)."""
    from ragframe.judge.cache import default_cache_path

    for name in which:
        spec = dict(_JUDGE_SPECS[name])
        spec["help"] = (helps or {}).get(name, spec["help"])
        if "{cache}" in spec["help"]:
            spec["help"] = spec["help"].replace("{cache}", str(default_cache_path()))
        parser.add_argument(f"--{name}", **spec)


def parse_price(text: str | None) -> Price | None:
    """`0.15,0.60` -> (0.15, 0.6): dollars per million prompt and completion tokens;
    `0.15,0.60,0.075` adds the cached prompt rate (what the provider bills a prompt token it
    took from its prompt cache)."""
    if not text:
        return None
    say = (
        "--price expects prompt,completion[,cached prompt] dollars per million tokens, finite "
        "and 0 or more, the cached rate at most the prompt rate, like 0.15,0.60 or "
        f"0.15,0.60,0.075; got {text!r}"
    )
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise RagframeError(say) from None
    ok = len(parts) in (2, 3) and all(math.isfinite(x) and x >= 0 for x in parts)
    if not ok or (len(parts) == 3 and parts[2] > parts[0]):
        raise RagframeError(say)
    if len(parts) == 2:
        return parts[0], parts[1]
    return parts[0], parts[1], parts[2]


#: Judge keywords read from the option of the same name, as given.
_AS_GIVEN = (
    "base_url",
    "embedding_model",
    "concurrency",
    "temperature",
    "requests_per_minute",
    "tokens_per_minute",
    "timeout",
    "fail_fast",
    "max_cost",
    "retry_failed",
    "max_text_chars",
)


def judge_from_args(args: argparse.Namespace, **given: Any) -> Any:
    """The Judge the judge options describe. Only the options the subcommand declared are
    passed (the others keep the Judge's defaults); `given` overrides them (e.g. what a batch
    manifest recorded). The configuration file's judge keys that have no flag (api_key_env's
    key, seed, max_attempts) come in under `given`."""
    from ragframe.cli.config import judge_extras
    from ragframe.judge import Judge

    seen = vars(args)
    kwargs: dict[str, Any] = {name: seen[name] for name in _AS_GIVEN if name in seen}
    if "cache" in seen:
        kwargs["cache"] = False if seen.get("no_cache") else (seen["cache"] or True)
    if "no_progress" in seen:
        kwargs["progress"] = not seen["no_progress"]
    if "price" in seen:
        kwargs["price"] = parse_price(seen["price"])
    if "no_reasons" in seen:
        kwargs["reasons"] = False if seen["no_reasons"] else None
    kwargs.update(judge_extras(args))
    kwargs.update(given)
    model = kwargs.pop("model", seen.get("model"))
    return Judge(model, **kwargs)


def subcommand(
    subparsers: Any,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help: str,
    epilog: str,
    *,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand's parser: the line `ragframe --help` shows for it, its epilog (the exit
    statuses) and the handler that runs it; its inputs and options are the module's to add."""
    parser = subparsers.add_parser(name, help=help, epilog=epilog, description=description)
    parser.set_defaults(handler=handler)
    return parser


def add_level(parser: Any, help: str = LEVEL_HELP) -> None:
    """`--level`: the intervals' confidence level, 0 < level < 1 (default 0.95)."""
    parser.add_argument("--level", type=common.confidence_level, default=0.95, help=help)


def add_seed(parser: Any, help: str) -> None:
    """`--seed`: a whole number from 0 to MAX_SEED (default 0); `help` says what it seeds, and
    the range, which argparse enforces, is said after it."""
    parser.add_argument(
        "--seed",
        type=common.non_negative_int,
        default=0,
        help=f"{help}; {common.non_negative_int.rule}",
    )


def add_shown(parser: Any, flag: str, default: int, help: str) -> None:
    """A count of rows shown (the worst, the most changed): a whole number 0 or more, where 0
    shows none."""
    parser.add_argument(flag, type=common.non_negative_int, default=default, metavar="N", help=help)


def pick(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The named options' values, as keywords for the library function that takes them
    under the same names."""
    return {name: getattr(args, name) for name in names}


def add_output(
    parser: Any,
    help: str,
    *,
    required: bool = True,
    overwrite: str | None = "replace an existing output",
) -> None:
    """`-o/--output` and, unless `overwrite` is None, `--overwrite` (its help)."""
    parser.add_argument("-o", "--output", required=required, help=help)
    if overwrite is not None:
        parser.add_argument("--overwrite", action="store_true", help=overwrite)


def add_format(parser: Any, *, json: str, csv: str) -> None:
    """`--json` or `--csv` (not both): what the subcommand prints instead of its table."""
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help=json)
    form.add_argument("--csv", action="store_true", help=csv)
