"""Bring your own claims: faithfulness verifies a `claims` column's claims, as given, in order,
instead of extracting its own (requests counted at the scripted server)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, router, task_name

import ragframe
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.columns import ALIASES, CANONICAL, canonical_names, list_columns, select_inputs
from ragframe.metrics import AnswerRelevancyLLM, Faithfulness

EXTRACTED = ["The extracted claim is supported."]
LIST = pl.List(pl.String)


def verify_by_text(body: dict[str, Any]) -> str:
    """One verdict per claim, in the prompt's numbering: supported when the claim says
    "supported" (and not "unsupported"), with the claim's own text as the reason."""
    claims = fenced(body, "claim")
    return reply(
        {
            "verdicts": [
                {"index": k, "reason": c, "supported": " supported" in f" {c}"}
                for k, c in enumerate(claims, start=1)
            ]
        }
    )


def frame(claims: list[Any], dtype: pl.DataType = LIST) -> pl.DataFrame:
    n = len(claims)
    return pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(n)],
            "answer": [f"Answer {i}." for i in range(n)],
            "contexts": [[f"Context {i}."] for i in range(n)],
            "claims": claims,
        },
        schema_overrides={"contexts": pl.List(pl.String), "claims": dtype},
    )


def requests(server: Any, task: str) -> list[dict[str, Any]]:
    return [b for b in server.chat_requests if task_name(b) == task]


@pytest.fixture
def scripted(server: Any) -> Any:
    server.handler = router(
        answer_claims=reply({"claims": EXTRACTED}), faithfulness_verify=verify_by_text
    )
    return server


def test_given_claims_are_verified_as_given_without_extraction(scripted, judge):
    given = [
        ["Paris is supported.", "Rome is unsupported.", "Oslo is supported.", "Bern unsupported."],
        None,  # no claims known for this row: extracted
        ["Only this one is supported."],
    ]
    out = ragframe.evaluate(frame(given), [Faithfulness()], judge=judge)

    extractions = requests(scripted, "answer_claims")
    assert len(extractions) == 1  # row 1 only
    assert "Answer 1." in extractions[0]["messages"][-1]["content"]
    verified = sorted(fenced(b, "claim") for b in requests(scripted, "faithfulness_verify"))
    assert verified == sorted([given[0], EXTRACTED, given[2]])  # exactly the claims, in order

    assert out["faithfulness"].to_list() == [0.5, 1.0, 1.0]
    detail = out["faithfulness_detail"]
    assert [c["claim"] for c in detail[0]["claims"]] == given[0]
    assert [c["supported"] for c in detail[0]["claims"]] == [True, False, True, False]
    assert [c["reason"] for c in detail[0]["claims"]] == given[0]  # each verdict on its claim
    assert detail.struct.field("claims_given").to_list() == [True, False, True]
    assert detail.struct.field("truncated").to_list() == [False, False, False]
    assert [c["claim"] for c in detail[1]["claims"]] == EXTRACTED


@pytest.mark.parametrize("claims", [[], ["", "   \n"]], ids=["empty", "blank"])
def test_empty_given_claims_are_null_with_a_reason_and_no_request(scripted, judge, claims):
    out = ragframe.evaluate(frame([claims]), [Faithfulness()], judge=judge)
    assert out["faithfulness"].to_list() == [None]  # never 1.0
    assert out["faithfulness_detail"][0]["error"].startswith("no claims given")
    assert scripted.count() == 0


def test_blank_given_claim_keeps_its_place_unjudged(scripted, judge):
    given = ["First is supported.", "  ", "Third is unsupported."]
    out = ragframe.evaluate(frame([given]), [Faithfulness()], judge=judge)
    (verify,) = requests(scripted, "faithfulness_verify")
    assert fenced(verify, "claim") == [given[0], given[2]]
    items = out["faithfulness_detail"][0]["claims"]
    assert [c["claim"] for c in items] == given  # item i is input claim i
    assert [c["supported"] for c in items] == [True, None, False]
    assert out["faithfulness"][0] == 0.5


def test_many_given_claims_are_all_verified_uncapped_in_order(scripted, judge):
    """60 claims (above max_claims, 40, and above one request's 47 verdicts): two requests,
    every claim verified once, the detail in input order."""
    given = [f"Claim {i} is {'supported' if i % 3 else 'unsupported'}." for i in range(60)]
    out = ragframe.evaluate(frame([given]), [Faithfulness()], judge=judge)
    verifies = requests(scripted, "faithfulness_verify")
    assert len(verifies) == 2
    assert sorted(c for b in verifies for c in fenced(b, "claim")) == sorted(given)
    assert [c["claim"] for c in out["faithfulness_detail"][0]["claims"]] == given
    assert out["faithfulness"][0] == pytest.approx(40 / 60)
    assert not requests(scripted, "answer_claims")


@pytest.mark.parametrize(
    ("claims", "dtype", "fix"),
    [
        (["a claim"], pl.String(), r"pl.concat_list\(pl.col\('claims'\)\)"),
        (
            [[{"claim": "a claim", "support": "Complete"}]],
            pl.List(pl.Struct({"claim": pl.String, "support": pl.String})),
            r"pl.element\(\).struct.field\('claim'\)",
        ),
    ],
    ids=["string", "expertqa-records"],
)
def test_mistyped_claims_is_an_input_error_before_any_request(scripted, judge, claims, dtype, fix):
    with pytest.raises(InputError, match=rf"'claims'.*List\(String\).*{fix}.*given_claims=False"):
        ragframe.evaluate(frame(claims, dtype), [Faithfulness()], judge=judge)
    assert scripted.count() == 0


def test_given_claims_false_extracts_and_ignores_the_column(scripted, judge):
    df = frame(["not a list"], pl.String())  # a wrongly typed column is not even looked at
    out = ragframe.evaluate(df, [Faithfulness(given_claims=False)], judge=judge)
    assert len(requests(scripted, "answer_claims")) == 1
    assert out["faithfulness_detail"][0]["claims_given"] is False
    assert out["faithfulness"][0] == 1.0


def test_a_claims_column_is_ignored_by_metrics_that_do_not_read_it(scripted, judge):
    """Only faithfulness reads `claims`: another metric on a frame with an unrelated,
    differently typed `claims` column runs as before."""
    out = ragframe.evaluate(frame(["not a list"], pl.String()), [AnswerRelevancyLLM()], judge=judge)
    assert out["answer_relevancy_llm"].is_not_null().all()


def test_claims_by_another_name_and_from_csv(scripted, judge, tmp_path):
    df = frame([["Mapped is supported."]]).rename({"claims": "my_claims"})
    out = ragframe.evaluate(df, [Faithfulness()], judge=judge, columns={"claims": "my_claims"})
    assert out["faithfulness_detail"][0]["claims_given"] is True
    assert not requests(scripted, "answer_claims")
    # In a CSV file, a claims cell is a JSON list, like contexts.
    path = tmp_path / "log.csv"
    row = {"question": "Q?", "answer": "A.", "contexts": ["C."], "claims": ["CSV is supported."]}
    cells = {k: [json.dumps(v) if isinstance(v, list) else v] for k, v in row.items()}
    pl.DataFrame(cells).write_csv(path)
    out = ragframe.evaluate(str(path), [Faithfulness()], judge=judge)
    assert [c["claim"] for c in out["faithfulness_detail"][0]["claims"]] == row["claims"]


def test_claims_is_a_new_name():
    """`claims` clashes with no other input or alias, and is read as a list input."""
    assert "claims" not in ALIASES and "claims" not in ALIASES.values()
    assert CANONICAL["claims"] == pl.List(pl.String)
    assert "claims" in list_columns()
    assert canonical_names(["question", "claims"]) == {"question": "question", "claims": "claims"}
    # Required inputs never pull it in; only an optional use does.
    df = frame([["x"]])
    assert "claims" not in select_inputs(df, {"faithfulness": ["contexts"]}).columns
    assert "claims" in select_inputs(df, {"f": ["contexts"]}, optional={"f": ["claims"]}).columns


def test_given_claims_setting_is_checked_and_recorded():
    with pytest.raises(ConfigError, match="given_claims"):
        Faithfulness(given_claims="yes")  # type: ignore[arg-type]
    assert Faithfulness().config()["given_claims"] is True
    assert Faithfulness(given_claims=False).optional == ()
