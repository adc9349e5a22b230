"""ragframe judge-bench: the shipped sets, the benchmark end to end against the scripted
server (through the real client), the dry run that sends nothing, and the claim-level view."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, router

from ragframe.cli import judge_bench as cli
from ragframe.decide import judge_bench as jb
from ragframe.errors import ConfigError
from ragframe.inputs.io import read_metadata
from ragframe.testing.server import auto_answer

# The shared data sits next to the project (here and in CI a sibling `shared` of the clone),
# never at one machine's absolute path.
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def parse(argv: list[str]) -> argparse.Namespace:
    """The judge-bench arguments, parsed as `ragframe` will once the subcommand is listed."""
    parser = argparse.ArgumentParser(prog="ragframe")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["judge-bench", *argv])


def bench(server: Any, *argv: str) -> int:
    args = parse(
        [
            "--model",
            "fake-judge",
            "--base-url",
            server.base_url,
            "--embedding-model",
            "fake-embedding",
            "--no-cache",
            "--no-progress",
            *argv,
        ]
    )
    return int(args.handler(args))


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


# ------------------------------------------------------------------------------ the sets


def test_the_sets_are_small_and_cut_reproducibly(tmp_path: Path) -> None:
    shipped = sorted(jb.BENCH_DIR.glob("*"))
    assert sum(p.stat().st_size for p in shipped) < 1_000_000  # well under 2 MB
    for name in ("expertqa", "begin", "halueval", "ragchecker"):
        assert (jb.BENCH_DIR / f"{name}.parquet").exists()
    for licence in ("expertqa", "begin", "halueval", "ragchecker"):
        assert (jb.BENCH_DIR / f"LICENSE-{licence}.txt").stat().st_size > 500
    if not (SHARED / "expertqa_rag.parquet").exists():
        pytest.fail(f"no {SHARED / 'expertqa_rag.parquet'}: put the shared data in ../shared")
    import importlib.util

    script = Path(__file__).resolve().parent.parent / "data" / "make_bench_sets.py"
    spec = importlib.util.spec_from_file_location("make_bench_sets", script)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.main(["make_bench_sets.py", str(SHARED), str(tmp_path)])
    for path in jb.BENCH_DIR.glob("*.parquet"):
        digest = hashlib.sha256((tmp_path / path.name).read_bytes()).hexdigest()
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest(), path.name


def test_a_prefix_of_each_set_is_a_fair_sample() -> None:
    begin = jb.load_set("begin", 10)
    assert begin["faithful"].sum() == 5 and begin.height == 10
    halu = jb.load_set("halueval", 8)
    assert halu["faithful"].sum() == 4  # both answers of 4 questions
    assert halu["question"].n_unique() == 4
    pairs = jb.load_set("ragchecker", 6)
    assert pairs.height == 12 and pairs["side"].value_counts()["count"].to_list() == [6, 6]
    expert = pl.read_parquet(jb.BENCH_DIR / "expertqa.parquet")
    assert expert.height == 146 and expert["faithful"].null_count() == 0
    claims = jb.load_set(jb.CLAIMS_SET, 5)
    supports = claims.select(
        pl.col("expert_claims").list.eval(pl.element().struct.field("support"))
    )
    assert set(supports.explode("expert_claims")["expert_claims"].drop_nulls()) <= set(
        jb.JUDGED_SUPPORT
    )
    assert claims["claims"].list.len().to_list() == claims["expert_claims"].list.len().to_list()


def test_unknown_sets_and_metrics_are_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="expertqa,begin,halueval,ragchecker"):
        jb.plan(["nope"], None)
    with pytest.raises(ConfigError, match="does not test 'context_recall'"):
        jb.plan(None, ["context_recall"])
    todo, skipped = jb.plan(["begin", "ragchecker"], ["faithfulness"])
    assert [s.name for s, _ in todo] == ["begin"]
    assert "ragchecker" in skipped


# ------------------------------------------------------------------------------ end to end


def test_dry_run_prints_the_estimate_and_sends_nothing(server: Any, capsys: Any) -> None:
    assert bench(server, "--limit", "3", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "estimate on fake-judge" in out
    for name in ("expertqa", "begin", "halueval", "ragchecker", "total"):
        assert name in out
    assert server.requests == []


def test_judge_bench_end_to_end(server: Any, tmp_path: Path, capsys: Any) -> None:
    out_path = tmp_path / "results.parquet"
    assert bench(server, "--limit", "4", "-o", str(out_path)) == 0
    out = capsys.readouterr().out
    for header in ("expertqa: 4 rows", "begin: 4 rows", "halueval: 4 rows", "ragchecker: 4 pairs"):
        assert header in out
    assert "not people" in out  # HaluEval's labels come from how it was built
    table = pl.read_parquet(out_path)
    meta = read_metadata(out_path)
    usage = pl.DataFrame(meta["judge_bench"]["usage"])
    # Every request the run reports is one the server answered, and the other way round.
    sent = server.count() + server.count("/embeddings")  # chat and embedding requests
    assert usage["requests"].sum() == sent > 0
    assert meta["judge"]["model"] == "fake-judge"
    got = set(table.select("dataset", "metric").unique().iter_rows())
    for name, spec in jb.SETS.items():
        if name != jb.CLAIMS_SET:
            assert {(name, m) for m in spec.metrics} <= got
    kinds = dict(table.select("dataset", "kind").unique().iter_rows())
    assert kinds["ragchecker"] == "pairwise"
    assert set(table.filter(pl.col("dataset") == "expertqa")["label"]) == {
        "faithful",
        "frac_cited_claims_supported",
    }


def test_an_existing_output_needs_overwrite(server: Any, tmp_path: Path) -> None:
    out_path = tmp_path / "results.parquet"
    out_path.write_bytes(b"x")
    with pytest.raises(Exception, match="--overwrite"):
        bench(server, "--limit", "2", "--sets", "begin", "-o", str(out_path))
    assert server.requests == []


def test_a_judge_that_cannot_serve_a_later_set_is_refused_before_any_request(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ragchecker's answer_correctness needs embeddings: a judge with none is refused before
    expertqa, which comes first, has sent anything."""
    from ragframe import Judge

    monkeypatch.setattr("ragframe.judge.embed_local.local_embedder_available", lambda: False)
    judge = Judge("fake-judge", base_url=server.base_url, cache=False, progress=False)
    with pytest.raises(ConfigError, match="Nothing was sent"):
        jb.run_bench(judge, ["expertqa", "ragchecker"], None, 2)
    assert server.requests == []


def test_pairs_are_read_the_right_way_round(server: Any, capsys: Any) -> None:
    """A judge that rates the answer people preferred 4 and the other 0: accuracy 1.0, so
    answer_1 is side a and answer_2 side b, as the preference's sign says."""
    pairs = pl.read_parquet(jb.BENCH_DIR / "ragchecker.parquet").head(30)
    better = {
        (row["answer_2"] if row["correctness_pref"] > 0 else row["answer_1"]).strip()
        for row in pairs.iter_rows(named=True)
        if row["correctness_pref"] != 0
    }

    def rate(body: dict[str, Any]) -> str:
        texts = {t.strip() for t in fenced(body, "response") + fenced(body, "reference")}
        return reply({"rating": 4 if texts & better else 0})

    server.handler = router(
        answer_accuracy_answer_vs_reference=rate, answer_accuracy_reference_vs_answer=rate
    )
    judge = jb_judge(server)
    result = jb.run_bench(judge, ["ragchecker"], ["answer_accuracy"], 30)
    rows = result.table.filter(pl.col("metric") == "answer_accuracy")
    accuracy = rows.filter(pl.col("figure") == "accuracy").row(0, named=True)
    assert accuracy["value"] == 1.0
    assert accuracy["n"] == int((pairs["correctness_pref"] != 0).sum()) - accuracy["n_dropped"]
    people = result.table.filter(pl.col("metric").str.starts_with("people"))
    assert people.height == 4  # annotator 1 against annotator 2, the set's ceiling


def jb_judge(server: Any) -> Any:
    from ragframe import Judge

    return Judge(
        "fake-judge",
        base_url=server.base_url,
        api_key="sk-test-not-a-real-key",
        embedding_model="fake-embedding",
        cache=False,
        progress=False,
    )


# ------------------------------------------------------------------------------ claims


def scored_claims(given: list[bool], verdicts: list[list[bool] | None]) -> pl.DataFrame:
    """A frame as faithfulness scores expertqa-claims: the experts' claims, the claims sent,
    and the detail's verdicts (None: the row failed)."""
    experts = [
        [{"claim": "c1", "support": "Complete"}, {"claim": "c2", "support": "Partial"}],
        [{"claim": "c3", "support": "Complete"}],
        [{"claim": "c4", "support": "Incomplete"}, {"claim": "c5", "support": "Complete"}],
    ]
    details = [
        None
        if v is None
        else {
            "claims": [{"claim": "x", "supported": s, "reason": None} for s in v],
            "claims_given": g,
        }
        for v, g in zip(verdicts, given, strict=True)
    ]
    return pl.DataFrame(
        {
            "id": ["r1", "r2", "r3"],
            "expert_claims": experts,
            "claims": [[c["claim"] for c in e] for e in experts],
            "faithfulness_detail": details,
        }
    )


def test_claim_verdicts_are_matched_by_position_and_only_when_the_claims_were_used() -> None:
    frame = scored_claims([True, True, False], [[True, False], [True], [False, True]])
    got = jb.claims_supported(frame)
    assert got["claim"].to_list() == ["c1", "c2", "c3", "c4", "c5"]
    assert got["expert_complete"].to_list() == [True, False, True, False, True]
    # r3's verdicts were not given claims' (claims_given false): null, dropped downstream.
    assert got["supported"].to_list() == [1.0, 0.0, 1.0, None, None]
    mismatched = scored_claims([True, True, True], [[True], None, [False, True]])
    got = jb.claims_supported(mismatched)
    assert got["supported"].to_list() == [None, None, None, 0.0, 1.0]


def test_claim_level_agreement_with_a_judge_that_agrees_with_the_experts(
    server: Any, capsys: Any
) -> None:
    rows = jb.load_set(jb.CLAIMS_SET, 12)
    complete = {
        c["claim"].strip()
        for claims in rows["expert_claims"].to_list()
        for c in claims
        if c["support"] == "Complete"
    }

    def verify(body: dict[str, Any]) -> str:
        claims = fenced(body, "claim")
        verdicts = [
            {"index": k, "reason": "r", "supported": c.strip() in complete}
            for k, c in enumerate(claims, start=1)
        ]
        return reply({"verdicts": verdicts})

    server.handler = router(faithfulness_verify=verify)
    result = jb.run_bench(jb_judge(server), ["expertqa"], ["faithfulness"], 12)
    # Faithfulness takes the given claims: the claims set must run, not be skipped.
    assert jb.CLAIMS_SET not in result.skipped, result.skipped
    claims = result.table.filter((pl.col("unit") == "claim") & (pl.col("figure") == "kappa"))
    assert claims["value"].item() == 1.0
    assert claims["n"].item() == sum(len(c) for c in rows["expert_claims"].to_list())


def test_the_pairwise_judge_beside_the_score_difference(server: Any) -> None:
    """On the RAGChecker pairs judge-bench also asks the judge which answer is better, in both
    orders (2 requests a pair), and reports its accuracy against people beside the
    score-difference rows; a judge that always prefers the answer people preferred scores 1.0,
    and the dry run counts those requests."""
    from conftest import task_name

    pairs = pl.read_parquet(jb.BENCH_DIR / "ragchecker.parquet").head(8)
    people = {
        row["answer_2"].strip(): row["correctness_pref"] for row in pairs.iter_rows(named=True)
    }

    def prefer(body: dict[str, Any]) -> Any:
        if task_name(body) != "pairwise_verdict":
            return auto_answer(body)
        first, second = fenced(body, "answer")
        pref = people.get(second.strip(), people.get(first.strip(), 0) * -1)
        verdict = "tie" if pref == 0 else "second" if pref > 0 else "first"
        return reply({"reason": "people's choice", "verdict": verdict})

    server.handler = prefer
    judge = jb_judge(server)
    guess = jb.estimate_bench(judge, ["ragchecker"], ["answer_accuracy"], 8)
    without = jb.estimate_bench(judge, ["ragchecker"], ["answer_accuracy"], 8, pairwise=False)
    assert guess["requests"][0] == without["requests"][0] + 2 * 8 and server.count() == 0
    result = jb.run_bench(judge, ["ragchecker"], ["answer_accuracy"], 8)
    both = result.table.filter(pl.col("metric").str.ends_with("(both orders)"))
    accuracy = both.filter(pl.col("figure") == "accuracy").row(0, named=True)
    assert accuracy["value"] == 1.0 and accuracy["n"] > 0
    pairwise_requests = sum(task_name(b) == "pairwise_verdict" for b in server.chat_requests)
    assert pairwise_requests == 2 * 8
