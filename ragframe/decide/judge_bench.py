"""The judge benchmark: how well each metric agrees with people, on the judge a user has.

Four human-labelled sets ship inside the package (`ragframe/data/bench/`, cut by
`data/make_bench_sets.py`; sources, licences and what each label means in `data/README.md`).
`run_bench(judge)` scores each set with the metrics the set can test and measures their
agreement with its labels (`ragframe.agreement`), with what the run cost:

- expertqa (domain experts): faithfulness, response_groundedness and hallucination against
  `faithful` (binary) and `frac_cited_claims_supported` (ordinal).
- expertqa-claims (domain experts, per claim): faithfulness verifying the experts' own claims,
  against each claim's `support` (binary, per claim) and against `faithful`.
- begin (crowd workers): faithfulness and response_groundedness against `faithful` (binary).
- halueval (how the data was built, not people): hallucination and faithfulness against
  `faithful` (binary).
- ragchecker (two annotators per pair): answer_correctness and answer_accuracy of both answers
  against `correctness_pref` (pairwise).

expertqa-claims gives faithfulness a `claims` column (the experts' claims that cite a passage
and were judged Complete, Partial or Incomplete: "bring your own claims"), so its verdict on
each claim can be set beside the expert's: `supported` vs support == Complete. The experts
judged a claim against the passage it cites; faithfulness judges it against all the row's
passages, so it can find support the expert did not look for. Claims of one answer are not
independent: their interval is too narrow (`ragframe.agreement`'s docstring).

For ragchecker the answers of a pair are scored as rows of one run (identical answers are sent
once) and compared: a pair is right when the answer the judge scores higher is the one people
preferred (the sum of the two annotators' preferences). The table also gives annotator 1 vs
annotator 2 on the same pairs (`people`), a ceiling no judge is expected to pass.

Rows whose label is null are left out before scoring; `n_dropped` then counts rows the judge
could not score (a request that failed, an answer with no claims).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import polars.selectors as cs

from ragframe.decide.agreement import Kind, agreement
from ragframe.errors import ConfigError

__all__ = [
    "BENCH_DIR",
    "SETS",
    "BenchResult",
    "BenchSet",
    "claims_supported",
    "estimate_bench",
    "format_bench",
    "format_estimate",
    "load_set",
    "run_bench",
]

#: Where the sets live: inside the package, so an installed ragframe finds them.
BENCH_DIR = Path(__file__).resolve().parent.parent / "data" / "bench"
#: ExpertQA support labels of claims the experts judged against a cited passage.
JUDGED_SUPPORT = ("Complete", "Partial", "Incomplete")
CLAIMS_SET = "expertqa-claims"


@dataclass(frozen=True)
class BenchSet:
    """One benchmark set: its file, the metrics it tests, and their (label, kind) targets."""

    name: str
    file: str
    metrics: tuple[str, ...]
    targets: tuple[tuple[str, Kind], ...]
    labelled_by: str
    unit: str = "row"

    @property
    def path(self) -> Path:
        return BENCH_DIR / self.file


SETS: dict[str, BenchSet] = {
    s.name: s
    for s in (
        BenchSet(
            "expertqa",
            "expertqa.parquet",
            ("faithfulness", "response_groundedness", "hallucination"),
            (("faithful", "binary"), ("frac_cited_claims_supported", "ordinal")),
            "domain experts (ExpertQA, MIT)",
        ),
        BenchSet(
            CLAIMS_SET,
            "expertqa.parquet",
            ("faithfulness",),
            (("faithful", "binary"),),
            "domain experts, per claim (ExpertQA, MIT)",
        ),
        BenchSet(
            "begin",
            "begin.parquet",
            ("faithfulness", "response_groundedness"),
            (("faithful", "binary"),),
            "crowd workers (BEGIN, CC BY 4.0)",
        ),
        BenchSet(
            "halueval",
            "halueval.parquet",
            ("hallucination", "faithfulness"),
            (("faithful", "binary"),),
            "how the data was built, not people (HaluEval QA, MIT)",
        ),
        BenchSet(
            "ragchecker",
            "ragchecker.parquet",
            ("answer_correctness", "answer_accuracy"),
            (("correctness_pref", "pairwise"),),
            "two annotators per pair, preferences summed (RAGChecker, Apache-2.0)",
            unit="pair",
        ),
    )
}
#: The names `--sets` takes: expertqa brings expertqa-claims along (when faithfulness runs).
SET_NAMES = ("expertqa", "begin", "halueval", "ragchecker")


@dataclass
class BenchResult:
    """`table`: the agreement figures (`dataset`, `unit`, then `ragframe.agreement`'s columns);
    `usage`: per set, rows, requests, tokens, cost and seconds; `scored`: each set's scored
    frame; `skipped`: sets or parts not run, with why; `judge`: what the judge was."""

    table: pl.DataFrame
    usage: pl.DataFrame
    scored: dict[str, pl.DataFrame]
    judge: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)
    local: bool = False

    def metadata(self) -> dict[str, Any]:
        """What `-o results.parquet` records beside the table."""
        import datetime as dt

        from ragframe._version import __version__

        return {
            "ragframe_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "judge": self.judge,
            "judge_bench": {
                "usage": self.usage.to_dicts(),
                "skipped": self.skipped,
            },
        }


def load_set(name: str, limit: int | None = None) -> pl.DataFrame:
    """A set's rows (the first `limit`: the files are ordered so a prefix is a fair sample),
    as the metrics read them: ragchecker's pairs stacked as one row per answer (`side` a / b),
    expertqa-claims with the experts' judged claims in `claims`."""
    spec = _spec(name)
    frame = pl.read_parquet(spec.path)
    if limit is not None:
        frame = frame.head(limit)
    if spec.name == "ragchecker":
        return pl.concat(
            [
                frame.select(
                    "id", "question", "ground_truth", pl.col(col).alias("answer"), side=pl.lit(s)
                )
                for col, s in (("answer_1", "a"), ("answer_2", "b"))
            ]
        )
    if spec.name == CLAIMS_SET:
        judged = pl.col("expert_claims").list.eval(
            pl.element().filter(pl.element().struct.field("support").is_in(JUDGED_SUPPORT))
        )
        claim_text = pl.col("expert_claims").list.eval(pl.element().struct.field("claim"))
        return frame.with_columns(judged).with_columns(claim_text.alias("claims"))
    return frame


def _spec(name: str) -> BenchSet:
    if name not in SETS:
        raise ConfigError(f"no benchmark set {name!r}; the sets are {list(SET_NAMES)}")
    return SETS[name]


def _labels(name: str, limit: int | None) -> pl.DataFrame:
    frame = pl.read_parquet(_spec(name).path)
    return frame.head(limit) if limit is not None else frame


def supports_given_claims() -> bool:
    """Whether faithfulness verifies a `claims` column's claims ("bring your own claims")."""
    from ragframe.metrics import Faithfulness

    return "claims" in getattr(Faithfulness(), "optional", ())


def plan(
    sets: Sequence[str] | None, metrics: Sequence[str] | None
) -> tuple[list[tuple[BenchSet, list[str]]], dict[str, str]]:
    """The sets to run with their metrics, and the skipped ones with why. Unknown set or
    metric names are refused, naming the ones there are."""
    chosen = list(sets or SET_NAMES)
    for name in chosen:
        if name not in SET_NAMES:
            raise ConfigError(f"no benchmark set {name!r}; --sets takes {','.join(SET_NAMES)}")
    known = sorted({m for s in SETS.values() for m in s.metrics})
    for m in metrics or ():
        if m not in known:
            raise ConfigError(f"judge-bench does not test {m!r}; its metrics are {known}")
    if "expertqa" in chosen:
        chosen.insert(chosen.index("expertqa") + 1, CLAIMS_SET)
    todo: list[tuple[BenchSet, list[str]]] = []
    skipped: dict[str, str] = {}
    for name in chosen:
        spec = SETS[name]
        wanted = [m for m in spec.metrics if not metrics or m in metrics]
        if not wanted:
            skipped[name] = f"none of its metrics ({', '.join(spec.metrics)}) was asked for"
        elif name == CLAIMS_SET and not supports_given_claims():
            skipped[name] = "this ragframe's faithfulness does not take a `claims` column yet"
        else:
            todo.append((spec, wanted))
    return todo, skipped


def estimate_bench(
    judge: Any,
    sets: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    limit: int | None = None,
    pairwise: bool = True,
) -> pl.DataFrame:
    """What `run_bench` would send, per set (`ragframe.estimate`: nothing is sent); the pairs'
    row counts the pairwise judge's two requests a pair too."""
    from ragframe.engine.run import estimate

    todo, _ = plan(sets, metrics)
    rows = []
    for spec, wanted in todo:
        guess = estimate(load_set(spec.name, limit), wanted, judge=judge)
        if spec.unit == "pair" and pairwise:
            from ragframe.decide.pairwise import estimate_pairwise_bench

            extra = estimate_pairwise_bench(judge, limit)
            for key in ("requests", "prompt_tokens", "completion_tokens"):
                guess[key] += extra.get(key, 0)
            guess["cost_usd"] = _priced(judge, guess)
        rows.append(
            {
                "dataset": spec.name,
                "rows": guess["rows"],
                "requests": guess["requests"],
                "prompt_tokens": guess["prompt_tokens"],
                "completion_tokens": guess["completion_tokens"],
                "cost_usd": guess["cost_usd"],
            }
        )
    return pl.DataFrame(rows, schema=_USAGE_SCHEMA, orient="row").drop("seconds", "cache_hits")


def _priced(judge: Any, guess: dict[str, Any]) -> float | None:
    from ragframe.judge.pricing import cost

    dollars = cost(judge.price, guess["prompt_tokens"], guess["completion_tokens"])
    return None if dollars is None else round(dollars, 6)


_USAGE_SCHEMA: dict[str, Any] = {
    "dataset": pl.String,
    "rows": pl.Int64,
    "requests": pl.Int64,
    "cache_hits": pl.Int64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost_usd": pl.Float64,
    "seconds": pl.Float64,
}


def run_bench(
    judge: Any,
    sets: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    limit: int | None = None,
    *,
    level: float = 0.95,
    seed: int = 0,
    folds: int = 5,
    pairwise: bool = True,
) -> BenchResult:
    """Score the sets on `judge` and measure each metric's agreement with their labels; on
    the pairs (RAGChecker), with `pairwise`, also the judge asked which answer is better in
    both orders (`ragframe.decide.pairwise.pairwise_bench`), beside the score-difference rows."""
    from ragframe.engine.prepare import check_judge
    from ragframe.engine.run import run
    from ragframe.metrics import resolve

    todo, skipped = plan(sets, metrics)
    for _, wanted in todo:  # every set's needs (an embedding model) before any set is paid for
        check_judge(judge, resolve(wanted))
    tables, usage, scored = [], [], {}
    options = {"level": level, "seed": seed, "folds": folds}
    for spec, wanted in todo:
        result = run(load_set(spec.name, limit), wanted, judge=judge)
        frame = result.frame
        scored[spec.name] = frame
        summary = result.summary()
        usage.append({**{k: summary.get(k) for k in _USAGE_SCHEMA}, "dataset": spec.name})
        usage[-1]["rows"] = _labels(spec.name, limit).height
        if spec.name == CLAIMS_SET and not frame.select(given_claims_used(frame).any()).item():
            skipped[CLAIMS_SET] = (
                "faithfulness verified the given claims on no row (its detail's claims_given "
                "is never true): no claim-level figure"
            )
        tables.append(_set_agreement(spec, frame, wanted, limit, options))
        if spec.unit == "pair" and pairwise:  # the judge asked "which is better", both orders
            tables.append(_pairwise_judge(judge, spec, limit, usage[-1], level, seed))
    table = pl.concat(tables, how="diagonal_relaxed") if tables else _empty_table()
    usage_frame = pl.DataFrame(usage, schema=_USAGE_SCHEMA, orient="row")
    return BenchResult(table, usage_frame, scored, judge.describe(), skipped, bool(judge.local))


def _pairwise_judge(
    judge: Any, spec: BenchSet, limit: int | None, usage: dict[str, Any], level: float, seed: int
) -> pl.DataFrame:
    """The pairwise judge's agreement with people on the set's pairs; its requests and
    tokens are added to the set's usage row."""
    from ragframe.decide.pairwise import pairwise_bench

    table, _, stats = pairwise_bench(judge, limit, level=level, seed=seed)
    counts = stats.as_dict()
    for key in ("requests", "cache_hits", "prompt_tokens", "completion_tokens"):
        usage[key] = (usage.get(key) or 0) + (counts.get(key) or 0)
    if counts.get("cost_usd") is not None:
        usage["cost_usd"] = (usage.get("cost_usd") or 0.0) + counts["cost_usd"]
    return _tagged(table, spec, str(table["metric"][0]))


def _empty_table() -> pl.DataFrame:
    return (
        agreement(pl.DataFrame({"s": [0.5], "y": [True]}), "s", "y", resamples=1)
        .clear()
        .select(
            pl.lit(None, pl.String).alias("dataset"),
            pl.lit(None, pl.String).alias("unit"),
            pl.all(),
        )
    )


def _set_agreement(
    spec: BenchSet, frame: pl.DataFrame, metrics: list[str], limit: int | None, options: Any
) -> pl.DataFrame:
    """The set's agreement table: each metric against each target, plus the extra views
    (claim verdicts for expertqa-claims; annotator vs annotator for ragchecker)."""
    if spec.unit == "pair":
        return _pair_agreement(spec, frame, metrics, _labels(spec.name, limit), options)
    if spec.name == CLAIMS_SET:
        # Only rows whose given claims were verified count: the others are dropped.
        frame = frame.with_columns(pl.when(given_claims_used(frame)).then(pl.col("faithfulness")))
    parts = []
    for m in metrics:
        for label, kind in spec.targets:
            labelled = frame.filter(pl.col(label).is_not_null())
            parts.append(_tagged(agreement(labelled, m, label, kind, **options), spec, m))
    if spec.name == CLAIMS_SET:
        claims = claims_supported(frame)
        table = agreement(
            claims, "supported", "expert_complete", "binary", direction="higher", **options
        )
        parts.append(_tagged(table, spec, "faithfulness", unit="claim"))
    return pl.concat(parts, how="diagonal_relaxed")


def _pair_agreement(
    spec: BenchSet, frame: pl.DataFrame, metrics: list[str], labels: pl.DataFrame, options: Any
) -> pl.DataFrame:
    pairs = _pairs(frame, metrics, labels)
    parts = []
    for m in metrics:
        for label, kind in spec.targets:
            table = agreement(
                pairs, f"{m}_a", label, kind, score_b=f"{m}_b", direction=_direction(m), **options
            )
            parts.append(_tagged(table, spec, m))
    parts.append(_people(pairs, spec, options))
    return pl.concat(parts, how="diagonal_relaxed")


def given_claims_used(scored: pl.DataFrame) -> pl.Expr:
    """True where faithfulness verified the row's given claims (its detail's `claims_given`);
    False everywhere for a faithfulness that does not report it."""
    detail = scored.schema.get("faithfulness_detail")
    if not isinstance(detail, pl.Struct) or "claims_given" not in {f.name for f in detail.fields}:
        return pl.lit(False)
    return pl.col("faithfulness_detail").struct.field("claims_given").fill_null(False)


def _tagged(
    table: pl.DataFrame,
    spec: BenchSet,
    metric: str,
    *,
    unit: str | None = None,
) -> pl.DataFrame:
    """`table` with the set's name and unit in front, and `metric` named as given (the
    pairwise table names its two score columns)."""
    return table.with_columns(pl.lit(metric).alias("metric")).select(
        pl.lit(spec.name).alias("dataset"), pl.lit(unit or spec.unit).alias("unit"), pl.all()
    )


def _direction(metric: str) -> Any:
    from ragframe.metrics import REGISTRY

    return REGISTRY[metric].direction


def _pairs(frame: pl.DataFrame, metrics: list[str], labels: pl.DataFrame) -> pl.DataFrame:
    """One row per pair: each metric's score of answer_1 (`{m}_a`) and answer_2 (`{m}_b`),
    with the pair's preference labels."""
    wide = frame.select("id", "side", *metrics).pivot(on="side", index="id", values=metrics)
    renamed = {}
    for m in metrics:
        for side in ("a", "b"):
            source = f"{m}_{side}" if len(metrics) > 1 else side
            renamed[source] = f"{m}_{side}"
    wide = wide.rename(renamed)
    return labels.select("id", cs.starts_with("correctness_pref")).join(
        wide, on="id", how="left", maintain_order="left"
    )


def _people(pairs: pl.DataFrame, spec: BenchSet, options: Any) -> pl.DataFrame:
    """Annotator 1's preference read as a judge of annotator 2's: the ceiling of the set.
    Only its sign counts (b over a, a over b, a tie), so it enters as scores in [0, 1], as
    `agreement` requires: side a 0.5, side b 1 / 0.5 / 0."""
    people = pairs.select(
        pl.lit(0.5).alias("side_a"),
        ((pl.col("correctness_pref_1").cast(pl.Float64).sign() + 1) / 2).alias("side_b"),
        "correctness_pref_2",
    )
    table = agreement(
        people,
        "side_a",
        "correctness_pref_2",
        "pairwise",
        score_b="side_b",
        direction="higher",
        **options,
    )
    return _tagged(table, spec, "people: annotator 1 vs annotator 2")


def claims_supported(scored: pl.DataFrame) -> pl.DataFrame:
    """One row per judged expert claim: faithfulness's verdict (`supported`, 1.0 / 0.0) beside
    the expert's (`expert_complete`: support == Complete), matched by position (the detail
    keeps given claims in order). The verdict is null where the row failed, or where its
    detail does not hold exactly the given claims (they were not used): such claims drop out
    of the agreement and are counted in its n_dropped."""
    used = given_claims_used(scored) & (
        pl.col("faithfulness_detail").struct.field("claims").list.len()
        == pl.col("claims").list.len()
    )
    experts = (
        scored.select("id", pl.col("expert_claims").alias("c"))
        .explode("c")
        .filter(pl.col("c").is_not_null())
        .with_columns(pl.int_range(pl.len()).over("id").alias("k"))
        .select(
            "id",
            "k",
            pl.col("c").struct.field("claim"),
            (pl.col("c").struct.field("support") == "Complete").alias("expert_complete"),
        )
    )
    verdicts = (
        scored.filter(used.fill_null(False))
        .select("id", pl.col("faithfulness_detail").struct.field("claims").alias("v"))
        .explode("v")
        .filter(pl.col("v").is_not_null())
        .with_columns(pl.int_range(pl.len()).over("id").alias("k"))
        .select(
            "id", "k", pl.col("v").struct.field("supported").cast(pl.Float64).alias("supported")
        )
    )
    return experts.join(verdicts, on=["id", "k"], how="left", maintain_order="left")


# ------------------------------------------------------------------------------ text


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def format_bench(result: BenchResult, level: float = 0.95) -> str:
    """Per set: who labelled it and what the run cost, then one line per metric, label and
    figure with its interval, n and rows dropped."""
    lines: list[str] = []
    usage = {row["dataset"]: row for row in result.usage.to_dicts()}
    head = (
        f"  {'metric':<36} {'label':<28} {'figure':<19} {'value':>7} "
        f"{f'{level:.0%} interval':>17} {'n':>5} {'dropped':>7}"
    )
    for name, part in result.table.group_by("dataset", maintain_order=True):
        spec = SETS[str(name[0])]
        use = usage.get(spec.name, {})
        lines.append(f"{spec.name}: {use.get('rows')} {spec.unit}s, labels by {spec.labelled_by}")
        lines.append("  " + _usage_line(use))
        lines.append(head)
        for row in part.iter_rows(named=True):
            interval = (
                "" if row["ci_low"] is None else f"[{_num(row['ci_low'])}, {_num(row['ci_high'])}]"
            )
            metric = (
                row["metric"]
                if row["unit"] == spec.unit
                else f"{row['metric']} (per {row['unit']})"
            )
            lines.append(
                f"  {metric:<36} {row['label']:<28} {row['figure']:<19} {_num(row['value']):>7} "
                f"{interval:>17} {row['n']:>5} {row['n_dropped']:>7}"
            )
        lines.append("")
    for name, why in result.skipped.items():
        lines.append(f"skipped {name}: {why}")
    lines.append("total: " + _usage_line(_total(result.usage)))
    return "\n".join(lines)


def _usage_line(use: dict[str, Any]) -> str:
    cost = use.get("cost_usd")
    money = "unknown price" if cost is None else f"${cost:.4f}"
    seconds = use.get("seconds")
    took = "" if seconds is None else f", {seconds:.1f} s"
    hits = use.get("cache_hits")
    cached = "" if not hits else f" (cache hits {hits})"
    return (
        f"requests {use.get('requests')}{cached}, tokens {use.get('prompt_tokens')} prompt + "
        f"{use.get('completion_tokens')} completion, {money}{took}"
    )


def _total(usage: pl.DataFrame) -> dict[str, Any]:
    sums = {c: usage.get_column(c).sum() for c in usage.columns if c not in ("dataset",)}
    if usage.get_column("cost_usd").null_count():
        sums["cost_usd"] = None
    return sums


def format_estimate(table: pl.DataFrame, model: str) -> str:
    """The dry run's figures per set and in total."""
    lines = [f"estimate on {model} (nothing sent; cached answers are free and not counted):"]
    for row in table.iter_rows(named=True):
        lines.append(f"  {row['dataset']:<16} {row['rows']:>4} rows: " + _usage_line(row))
    lines.append(
        f"  {'total':<16} {table.get_column('rows').sum():>4} rows: " + _usage_line(_total(table))
    )
    return "\n".join(lines)


def write_results(result: BenchResult, path: str | Path, *, overwrite: bool = False) -> None:
    """The agreement table as Parquet, with the judge and the usage in its metadata."""
    from ragframe.inputs.io import write_parquet

    write_parquet(result.table, path, result.metadata(), overwrite=overwrite)
