"""`ragframe generate CORPUS -o testset.parquet -n N`: a checked test set from documents
(`ragframe.engine.generate`), with the rejected candidates and why (`--rejected`), a dry run
(`--dry-run`) and a cost cap (`--max-cost`) as `ragframe score` has them."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from ragframe.cli import common, options
from ragframe.errors import ConfigError

EXIT_STATUSES = (
    "exit status: 0 generated (also when fewer than N rows survived the checks: the summary "
    "says how many and why, and --rejected keeps each rejected row with its reason), or a "
    "--dry-run estimate printed; 2 a configuration, input or endpoint error (one line says "
    "what to fix: no text column, an empty folder, an unknown question type or query style, "
    "N < 1, a bad weight, a missing or empty --personas file, an existing output without "
    "--overwrite, an estimate over --max-cost; each "
    "before any request); 130 interrupted (rerun to resume from the cache)"
)
HELP = "generate a checked test set (questions, ground truths, contexts) from documents"
DESCRIPTION = (
    "Cut the corpus into chunks, ask the judge for question / ground-truth pairs per chunk "
    "(or per pair of neighbouring chunks), check each (its ground truth supported by its "
    "contexts, the question self-contained and answerable, no near-duplicate), and write the "
    "N rows that pass. Every stage goes through one pool of requests with the answer cache: a "
    "rerun with the same options sends nothing."
)
#: The judge options generation honours: all of score's (the [judge] table of ragframe.toml
#: gives each of them a default).
JUDGE_HELPS = {
    "embedding-model": "embedding model for multi_hop neighbours and the duplicate check "
    "(default $RAGFRAME_EMBEDDING_MODEL, else text-embedding-3-small on OpenAI, else the local "
    "MiniLM embedder when installed)",
    "max-text-chars": "cut every text the checks judge longer than N characters (default: "
    f"{options.MAX_TEXT_CHARS}); chunks are sized by --chunk-tokens",
}
#: The library options the command line passes on under their own names.
ENGINE_OPTIONS = (
    "types",
    "seed",
    "questions_per_request",
    "oversample",
    "text_column",
    "id_column",
    "chunk_tokens",
    "overlap_tokens",
    "duplicate_threshold",
    "styles",
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `generate` to the `ragframe` parser's subparsers."""
    from ragframe.engine.generate import DEFAULT_TYPES, QUESTION_TYPES, STYLES

    parser = options.subcommand(
        subparsers, "generate", cmd_generate, HELP, EXIT_STATUSES, description=DESCRIPTION
    )
    parser.add_argument(
        "corpus",
        help="documents: a folder of .txt / .md files (the file path as the document id), or "
        "a Parquet / JSON Lines / CSV file with a text column (other columns are carried to "
        "the rows they produce)",
    )
    options.add_output(
        parser,
        "the test set's Parquet file (not needed with --dry-run, which writes nothing)",
        required=False,
        overwrite="replace an existing -o or --rejected file (without it either is refused "
        "before anything is sent)",
    )
    parser.add_argument(
        "-n",
        dest="n",
        type=common.positive_int,
        required=True,
        metavar="N",
        help="rows asked for (at least 1); fewer are written when fewer survive the checks",
    )
    parser.add_argument(
        "--types",
        default=DEFAULT_TYPES,
        help=f"question types, equal weights ({DEFAULT_TYPES!r}, the default) or weighted "
        f"('single_hop:2,unanswerable:1'); the types: {', '.join(QUESTION_TYPES)}",
    )
    parser.add_argument(
        "--styles",
        help="query styles of the questions, equal weights ('plain,keywords') or weighted "
        "('plain:2,misspelled:1'), one drawn per generation request and recorded in "
        f"generation_detail.query_style; the styles: {', '.join(STYLES)} (default: plain only)",
    )
    parser.add_argument(
        "--personas",
        metavar="FILE",
        help="a text file of short descriptions of who asks, one per line (blank lines "
        "skipped); each generation request gets one in turn, recorded in "
        "generation_detail.persona (default: none)",
    )
    options.add_seed(parser, "the seed of the chunks chosen and of the order kept (default: 0)")
    parser.add_argument(
        "--oversample",
        type=common.positive_float,
        default=1.5,
        help="candidates proposed per row asked for, at least 1 (default: 1.5); more trades "
        "cost for yield when checks reject many",
    )
    parser.add_argument(
        "--questions-per-request",
        type=common.positive_int,
        default=3,
        metavar="K",
        help="question / ground-truth pairs one generation request proposes (default: 3)",
    )
    parser.add_argument(
        "--duplicate-threshold",
        type=common.positive_float,
        default=0.92,
        metavar="COSINE",
        help="a question whose embedding's cosine with an earlier-kept one is at least this "
        "is rejected as a near-duplicate, in (0, 1] (default: 0.92)",
    )
    parser.add_argument(
        "--text-column", default="text", help="the corpus file's text column (default: text)"
    )
    parser.add_argument(
        "--id-column",
        help="the corpus file's document id column (default: the row number; a folder's ids "
        "are its file paths)",
    )
    parser.add_argument(
        "--chunk-tokens",
        type=common.positive_int,
        default=384,
        metavar="T",
        help="target chunk size in estimated tokens (default: 384; headings and paragraphs "
        "are cut first)",
    )
    parser.add_argument(
        "--overlap-tokens",
        type=common.non_negative_int,
        default=48,
        metavar="T",
        help="tokens a chunk shares with the previous one (default: 48)",
    )
    parser.add_argument(
        "--rejected",
        metavar="FILE",
        help="also write the rejected candidates to this Parquet file, with rejected_by (the "
        "check that failed first) and reason",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate requests, tokens and cost by stage (generation per type, the grounded "
        "check's claims and verification, the check, embeddings) as if every candidate "
        "passed, without sending or writing anything, then stop (no -o needed)",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="not available yet: the Batch API path does not take generation; refused (exit "
        "2) before anything is read or sent",
    )
    options.add_judge_options(parser.add_argument_group("the judge"), helps=JUDGE_HELPS)
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    """`ragframe generate`: every check that needs no request (options, outputs, the corpus,
    the judge's embeddings, the estimate against --max-cost) before the first one."""
    from ragframe.engine.generate import estimate_generate, generate_run

    if args.batch:
        raise ConfigError(
            "--batch: the Batch API path does not take generation yet; run without it (the "
            "live run caches every answer, so an interrupted one resumes where it stopped)"
        )
    if args.output is None and not args.dry_run:
        raise ConfigError(
            "-o/--output is required: name the Parquet file to write (e.g. -o "
            "testset.parquet), or add --dry-run to estimate the run without writing anything"
        )
    outputs = [out for out in (args.output, args.rejected) if out is not None]
    _refuse_outputs(args, outputs)
    judge = options.judge_from_args(args)
    kwargs = {"n": args.n, **options.pick(args, *ENGINE_OPTIONS)}
    kwargs["personas"] = read_personas(args.personas) if args.personas is not None else None
    with common.endpoint_named(judge):
        if args.dry_run or args.max_cost is not None:
            guess = estimate_generate(args.corpus, judge=judge, **kwargs)
            _print_estimate(guess, local=judge.local)
            if args.dry_run:
                return common.EXIT_OK
            common.refuse_over_budget(guess["cost_usd"], args.max_cost)
        result = generate_run(args.corpus, judge=judge, **kwargs)
    metadata = _metadata(args, judge, result, kwargs["personas"])
    from ragframe.inputs.io import write_parquet

    write_parquet(result.frame, args.output, metadata, overwrite=args.overwrite)
    if args.rejected is not None:
        write_parquet(result.rejected, args.rejected, metadata, overwrite=args.overwrite)
    print(result.summary())
    print(f"  cost: {common.dollars(result.stats.cost, local=judge.local)}")
    print(f"wrote {args.output}" + (f" and {args.rejected}" if args.rejected else ""))
    return common.EXIT_OK


def read_personas(path: str) -> list[str]:
    """The personas of a text file: one per line, blank lines skipped; a missing or empty
    file is a ConfigError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--personas {path!r} cannot be read: {error}") from None
    personas = [line.strip() for line in text.splitlines() if line.strip()]
    if not personas:
        raise ConfigError(
            f"--personas {path!r} names no persona: write one short description of who asks "
            "per line"
        )
    return personas


def _refuse_outputs(args: argparse.Namespace, outputs: list[str]) -> None:
    """-o and --rejected, before the corpus is read: local Parquet paths, not the corpus,
    not each other, not existing files without --overwrite (a dry run writes nothing, so an
    existing one is left alone, but a path the run would refuse is said now)."""
    from ragframe.inputs.io import refuse_remote_output

    for out in outputs:
        refuse_remote_output(out)
        common.refuse_non_parquet_output(out)
    common.refuse_input_as_output(args.corpus, *outputs)
    if len(outputs) == 2 and Path(outputs[0]).resolve() == Path(outputs[1]).resolve():
        raise ConfigError("-o and --rejected name the same file; give --rejected another name")
    if not args.dry_run:
        common.refuse_existing_output(args.overwrite, *outputs)


def _print_estimate(guess: dict[str, Any], *, local: bool) -> None:
    """The dry-run estimate: the totals, then one line per stage."""
    print(
        f"estimate: {guess['requests']} requests ({guess['embedding_requests']} of them "
        f"embeddings), {guess['prompt_tokens']} prompt + {guess['completion_tokens']} "
        f"completion tokens, {common.dollars(guess['cost_usd'], local=local)} for "
        f"{guess['candidates']} candidates ({guess['rows']} rows asked for) on "
        f"{guess['model']}, as if every candidate passed every check (cached answers are free "
        "and not counted)"
    )
    width = max(len(stage["stage"]) for stage in guess["stages"])
    for stage in guess["stages"]:
        tasks = ", ".join(f"{k} {v}" for k, v in stage["requests_by_task"].items() if v)
        tasks = f" ({tasks})" if tasks else ""
        tokens = (
            f"{stage['prompt_tokens']} tokens (not priced)"
            if stage["stage"].startswith("embeddings")
            else f"{stage['prompt_tokens']} prompt + {stage['completion_tokens']} completion "
            f"tokens, {common.dollars(stage['cost_usd'], local=local)}"
        )
        noun = "request" if stage["requests"] == 1 else "requests"
        print(f"  {stage['stage']:<{width}}  {stage['requests']:>5} {noun}{tasks}; {tokens}")


def _metadata(
    args: argparse.Namespace, judge: Any, result: Any, personas: list[str] | None
) -> dict[str, Any]:
    """What the written files record: version, time, judge (no key), the options, the
    request figures."""
    from ragframe._version import __version__

    return {
        "ragframe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "judge": judge.describe(),
        "generate": {
            "corpus": str(args.corpus),
            "n": args.n,
            **options.pick(args, *ENGINE_OPTIONS),
            "personas": personas,
            "kept": result.frame.height,
            "rejected": result.rejected.height,
            "surplus": result.surplus.height,
            "requests": result.requests,
            "proposed": result.proposed,
            "summary": result.stats.as_dict(),
        },
    }
