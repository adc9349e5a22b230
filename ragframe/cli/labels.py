"""People's labels beside the judge's figures, on the command line: the label options
(`add_label_options`), the estimate's table and the labels-needed line (`format_table`,
`power_line`, shared by `human-estimate`, `summarize` and `compare`), and what `summarize`
and `compare` add when `--labels` is given (`summary_estimate`, `difference_line`).

Every figure printed comes with n labelled, N scored and the method, so a reader can tell an
estimate about people (ppi++) from one about the judge (judge_only)."""

from __future__ import annotations

import argparse
from typing import Any

import polars as pl

from ragframe.errors import ConfigError, InputError

__all__ = [
    "POWER_WIDTH",
    "add_label_options",
    "difference_line",
    "format_table",
    "human_columns",
    "pair_estimate",
    "power_line",
    "summary_estimate",
]

#: The target interval width of the labels-needed line `summarize` prints (+-0.05);
#: `ragframe human-estimate --width` sets another.
POWER_WIDTH = 0.1


def add_label_options(parser: Any, *, required: bool = False, pair: bool = False) -> None:
    """`--labels FILE` and `--label-column NAME` (and, for a subcommand that summarizes scores
    as well, `--label-score METRIC`; for one that compares two runs, `--labels-b FILE`)."""
    parser.add_argument(
        "--labels",
        required=required,
        metavar="FILE",
        help="the labels: a filled label sheet (CSV) or a Parquet / JSON Lines file"
        + ("" if required else "; the human estimate is printed beside the judge's"),
    )
    parser.add_argument(
        "--label-column", default="faithful", help="the label column, 0 / 1 (default: faithful)"
    )
    if required:
        return
    parser.add_argument(
        "--label-score",
        metavar="METRIC",
        help="with --labels: the score column the label is about (default: the first metric "
        "the file records)",
    )
    if pair:
        parser.add_argument(
            "--labels-b",
            metavar="FILE",
            help="with --labels: B's own labels (default: the --labels file for both runs, "
            "joined on the key)",
        )


def _labels_error(err: InputError, where: str) -> InputError:
    """A labels file's error with the option and the file named (a message from the library
    says "the labels", and `compare` may read two files)."""
    return InputError(f"{where}: {err}")


def summary_estimate(
    args: argparse.Namespace, metrics: list[str], groups: list[str]
) -> tuple[pl.DataFrame, dict[str, Any] | None]:
    """`summarize --labels`: `human_estimate` of the labelled metric (`--label-score`, else
    the first of `metrics`) per group, and the labels-needed plan (None with under 3 labels)."""
    from ragframe.decide.human import human_estimate, labelled_scores, labels_needed

    score = args.label_score or (metrics[0] if metrics else None)
    if score is None:
        raise ConfigError("--labels: the file holds no metric to set the labels beside")
    if score not in metrics:
        raise ConfigError(f"--label-score {score!r} is not a metric of the summary: {metrics}")
    try:
        table = human_estimate(
            args.scored, args.labels, score, args.label_column, args.on, groups, level=args.level
        )
        y, f, big_n = labelled_scores(
            args.scored, args.labels, score=score, label=args.label_column, on=args.on
        )
    except InputError as err:
        raise _labels_error(err, f"--labels {args.labels}") from None
    plan = None
    if y.size >= 3:
        plan = labels_needed(POWER_WIDTH, y, f, n_scored=big_n, level=args.level)
    return table, plan


def human_columns(summary: pl.DataFrame, estimate: pl.DataFrame, groups: list[str]) -> Any:
    """The summary with the ppi++ estimate on its labelled metric's rows (`human_estimate`,
    `human_ci_low`, `human_ci_high`, `human_n_labelled`, `human_n_scored`, `human_method`;
    null on the other rows): the CSV form, one table."""
    ppi = estimate.filter(pl.col("method") == "ppi++").select(
        *groups,
        "metric",
        *(pl.col(c).alias(f"human_{c}") for c in ("estimate", "ci_low", "ci_high")),
        *(pl.col(c).alias(f"human_{c}") for c in ("n_labelled", "n_scored", "method")),
    )
    return summary.join(ppi, on=[*groups, "metric"], how="left", nulls_equal=True)


def pair_estimate(args: argparse.Namespace, metrics: list[str]) -> pl.DataFrame:
    """`compare --labels`: the paired PPI++ difference b - a of the labelled metric."""
    from ragframe.decide.human import human_estimate_difference

    keys = args.on.split(",") if args.on else ["id"]
    if len(keys) != 1:
        raise ConfigError(f"--labels joins the runs on one key column; --on names {keys}")
    score = args.label_score or (metrics[0] if metrics else None)
    if score is None or score not in metrics:
        raise ConfigError(
            f"--label-score {score!r} is not a metric both runs have; they have {metrics}"
        )
    labels_b = args.labels_b or args.labels
    try:
        return human_estimate_difference(
            args.a,
            args.b,
            args.labels,
            labels_b,
            score,
            args.label_column,
            keys[0].strip(),
            level=args.level,
        )
    except InputError as err:
        where = f"--labels {args.labels}" + (f" / --labels-b {labels_b}" if args.labels_b else "")
        raise _labels_error(err, where) from None


def difference_line(table: pl.DataFrame) -> str:
    """The paired estimate as one sentence: which run people would prefer, with the interval,
    n labelled, N scored and the method (ppi++; judge_only beside it)."""
    rows = {r["method"]: r for r in table.iter_rows(named=True)}
    ppi, judge = rows.get("ppi++"), rows.get("judge_only")
    if ppi is None or ppi["estimate"] is None:
        note = f" ({ppi['note']})" if ppi and ppi["note"] else ""
        return f"human estimate b - a: too few labels on both sides to estimate{note}"
    low, high = ppi["ci_low"], ppi["ci_high"]
    if low > 0:
        verdict = "people would prefer b"
    elif high < 0:
        verdict = "people would prefer a"
    else:
        verdict = "people would prefer neither clearly (the interval holds 0)"
    said = (
        f"human estimate of {ppi['label']}, {ppi['metric']}: {ppi['estimate']:+.3f} "
        f"[{low:+.3f}, {high:+.3f}] ({ppi['level']:.0%}, ppi++, n labelled {ppi['n_labelled']}, "
        f"N scored {ppi['n_scored']}): {verdict}"
    )
    if judge is not None and judge["estimate"] is not None:
        said += f"; the judge alone says {judge['estimate']:+.3f} (judge_only)"
    if ppi["note"]:
        said += f"; note: {ppi['note']}"
    return said


def power_line(plan: dict[str, Any]) -> str:
    """The labels-needed figure as one sentence, with what it rests on."""
    width = plan["width"]
    rests = (
        f"from the judge's correlation with the labels, {plan['correlation']:.2f} on "
        f"{plan['n_batch']} labelled rows"
    )
    if plan["n_needed"] is None:
        return (
            f"labels for a {plan['level']:.0%} interval of width {width:g}: out of reach with "
            f"N = {plan['n_scored']} scored rows, which cannot reach that width however many "
            f"are labelled, or would all need labels ({rests})"
        )
    return (
        f"labels for a {plan['level']:.0%} interval of width {width:g} (+-{width / 2:g}): about "
        f"{plan['n_needed']} with the judge's scores, {plan['n_labels_only']} from labels alone "
        f"({rests}; a planning figure)"
    )


def _notes(table: pl.DataFrame, groups: list[str]) -> list[str]:
    """What the estimates rest on: ppi++'s worth in labels, the judge's measured bias."""
    out = []
    for r in table.iter_rows(named=True):
        where = " ".join(str(r[g]) for g in groups)
        prefix = f"{where}: " if where else ""
        if r["method"] == "ppi++" and r["effective_n"] is not None:
            out.append(
                f"{prefix}ppi++ (lam {r['lam']:.2f}): the judge's scores are worth "
                f"{r['effective_n']:.0f} labels for {r['n_labelled']} labelled"
            )
        if r["method"] == "judge_only" and r["bias"] is not None:
            out.append(
                f"{prefix}judge bias on the labelled rows: {r['bias']:+.3f} "
                f"[{r['bias_ci_low']:+.3f}, {r['bias_ci_high']:+.3f}] (judge - label)"
            )
    return out


def format_table(table: pl.DataFrame, groups: list[str] | None = None) -> str:
    """The estimates for a terminal: one line per (group and) method, then what they rest on."""
    groups = list(groups or [])
    level = table["level"][0] if table.height else 0.95
    headers = [*groups, "method", "estimate", f"{level:.0%} interval", "n labelled", "N scored"]
    rows = []
    for r in table.iter_rows(named=True):
        interval = "-" if r["ci_low"] is None else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        rows.append(
            [
                *("(null)" if r[g] is None else str(r[g]) for g in groups),
                r["method"],
                "-" if r["estimate"] is None else f"{r['estimate']:.3f}",
                interval,
                str(r["n_labelled"]),
                str(r["n_scored"]),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in [headers, ["-" * w for w in widths], *rows]
    ]
    out += _notes(table, groups)
    notes = sorted({n for n in table["note"].to_list() if n})
    out.extend(f"note: {n}" for n in notes)
    out.append(
        f"metric {table['metric'][0]}, label {table['label'][0]}; quote ppi++ (see "
        "ragframe.decide.human)"
        if table.height
        else "no rows"
    )
    return "\n".join(out)
