"""Cached prompt tokens (issue 29): the stand-in reports them as OpenAI does, the judge counts
them in the run's stats, summary and metadata, and the cost bills them at the cached rate."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe.judge.pricing import cached_rate_of, cost, with_cached_rate
from ragframe.judge.transport import _read_completion
from ragframe.testing.server import FakeServer, Reply, auto_answer

#: A long shared text: 1,200 words of about 7 characters, some 2,100 tokens at 4 characters.
SHARED = " ".join(f"word{i}" for i in range(1200))


def _ask(server: FakeServer, text: str, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}], **extra
    )
    return reply.usage


def _cached(usage: Any) -> int:
    return usage.prompt_tokens_details.cached_tokens


def test_stand_in_caches_prefixes_of_1024_tokens_or_more_in_steps_of_128():
    with FakeServer() as server:
        first = _ask(server, "a" * 4 * 1100 + "x" * 400)
        assert _cached(first) == 0  # nothing seen before
        # 1,100 shared tokens: the cache serves 1,024 of them (8 steps of 128).
        assert _cached(_ask(server, "a" * 4 * 1100 + "y" * 400)) == 1024
        # 1,300 shared tokens: 1,280 (10 steps), whatever the rest of the prompt.
        _ask(server, "b" * 4 * 1300 + "x" * 800)
        assert _cached(_ask(server, "b" * 4 * 1300 + "z")) == 1280
        # 1,000 shared tokens: under OpenAI's 1,024-token floor, no hit at all.
        _ask(server, "c" * 4 * 1000 + "x" * 800)
        assert _cached(_ask(server, "c" * 4 * 1000 + "y" * 800)) == 0
        # The same prompt again: cached up to its last whole step, never past prompt_tokens.
        again = _ask(server, "b" * 4 * 1300 + "z")
        assert _cached(again) == 1280 <= again.prompt_tokens
        # Another model, or another response schema (a prefix of the system message at
        # OpenAI), shares nothing.
        schema = {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}
        assert _cached(_ask(server, "b" * 4 * 1300 + "z", response_format=schema)) == 0
        assert server.stats()["cached_tokens"] == 1024 + 1280 + 1280


def test_stand_in_forgets_its_oldest_prefixes_past_its_bound():
    with FakeServer() as server:
        server.PROMPT_CACHE_PREFIXES = 12  # one prompt of 11 steps, not two
        _ask(server, "a" * 4 * 1408)
        assert _cached(_ask(server, "a" * 4 * 1408)) == 1408
        _ask(server, "b" * 4 * 1408)  # pushes out the first prompt's prefixes
        assert _cached(_ask(server, "a" * 4 * 1408)) == 0


def test_stand_in_reports_nothing_when_asked_to_act_as_a_server_without_it():
    with FakeServer(prompt_cache=False) as server:
        _ask(server, SHARED)
        assert _ask(server, SHARED).prompt_tokens_details is None
        assert server.stats()["cached_tokens"] == 0


def test_requests_served_together_both_miss_as_at_a_provider():
    """Two requests with one prefix, both in their slots before either is answered: neither
    finds the other's prefix (it is known once answered); a third, after them, does."""
    arrived: list[asyncio.Event] = []

    async def hold(body: dict[str, Any]) -> str:
        event = asyncio.Event()
        arrived.append(event)
        if len(arrived) == 2:  # the second one in releases both
            for e in arrived:
                e.set()
        await event.wait()
        return "ok"

    with FakeServer(hold) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)

        async def both() -> list[Any]:
            ask = [{"role": "user", "content": SHARED}]
            return await asyncio.gather(
                *(client.chat.completions.create(model="m", messages=ask) for _ in range(2))
            )

        together = asyncio.run(both())
        assert [_cached(r.usage) for r in together] == [0, 0]
        server.handler = None
        later = _ask(server, SHARED)
        assert _cached(later) == later.prompt_tokens // 128 * 128 > 1024


def _rows(n: int) -> pl.DataFrame:
    """Rows asking one question over one long context (a knowledge base's FAQ, say)."""
    return pl.DataFrame(
        {
            "question": ["What do the words list?"] * n,
            "answer": [f"answer {i}" for i in range(n)],
            "contexts": [[SHARED]] * n,
            "ground_truth": [f"truth {i}" for i in range(n)],
        }
    )


METRICS = ["faithfulness", "context_precision", "context_recall"]


def test_a_run_counts_cached_tokens_in_stats_summary_and_metadata(server, make_judge, tmp_path):
    judge = make_judge(model="gpt-4o-mini")
    result = ragframe.run(_rows(4), METRICS, judge=judge)
    cached = result.stats.cached_prompt_tokens
    # What the provider reported, request by request, added up: whatever the order.
    assert cached == server.stats()["cached_tokens"] > 0
    assert cached < result.stats.prompt_tokens
    summary = result.summary()
    assert summary["cached_prompt_tokens"] == cached
    text = str(result)
    assert f"{cached} of the prompt cached by the provider" in text
    assert "at the cached rate saved $" in text
    path = tmp_path / "scored.parquet"
    result.write_parquet(path)
    assert ragframe.read_metadata(path)["summary"]["cached_prompt_tokens"] == cached


def _billed(summary: dict[str, Any]) -> tuple[int, int, int]:
    """A run summary's prompt, completion and cached prompt tokens."""
    return summary["prompt_tokens"], summary["completion_tokens"], summary["cached_prompt_tokens"]


def test_cost_bills_cached_tokens_at_the_cached_rate(server, make_judge):
    result = ragframe.run(_rows(3), METRICS, judge=make_judge(model="gpt-4o-mini"))
    s = result.summary()
    prompt, completion, cached = _billed(s)
    assert cached > 0
    expected = ((prompt - cached) * 0.15 + cached * 0.075 + completion * 0.60) / 1e6
    assert s["cost_usd"] == pytest.approx(expected, abs=1e-6)
    full = (prompt * 0.15 + completion * 0.60) / 1e6
    assert s["cost_usd"] < full  # billing cached tokens in full fails here
    assert s["cached_saving_usd"] == pytest.approx(cached * 0.075 / 1e6, abs=1e-6)


def test_a_price_without_a_cached_rate_bills_in_full_and_says_so(server, make_judge):
    result = ragframe.run(_rows(3), METRICS, judge=make_judge(price=(1.0, 2.0)))
    s = result.summary()
    assert s["cached_prompt_tokens"] > 0
    assert s["cost_usd"] == pytest.approx(
        (s["prompt_tokens"] * 1.0 + s["completion_tokens"] * 2.0) / 1e6, abs=1e-6
    )
    assert s["cached_saving_usd"] is None
    assert "billed at the full prompt rate" in str(result)
    assert "the saving is not counted" in str(result)


def test_a_provider_that_sends_no_details_gives_zero(tmp_path: Path):
    with FakeServer(prompt_cache=False) as server:
        judge = judge_for(server, tmp_path, model="gpt-4o-mini")
        result = ragframe.run(_rows(3), METRICS, judge=judge)
    s = result.summary()
    assert s["cached_prompt_tokens"] == 0 and s["cached_saving_usd"] == 0.0
    assert "cached" not in str(result)
    assert s["cost_usd"] == pytest.approx(
        (s["prompt_tokens"] * 0.15 + s["completion_tokens"] * 0.60) / 1e6, abs=1e-6
    )


def test_usage_is_read_from_raw_replies_whatever_the_provider_sends():
    def reply(usage: Any) -> bytes:
        body = {"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}]}
        return json.dumps({**body, "usage": usage}).encode()

    assert _read_completion(reply({"prompt_tokens": 9, "completion_tokens": 2}))[2] == (9, 2, 0)
    details = {"prompt_tokens": 2048, "completion_tokens": 5}
    for given, read in (
        (None, 0),
        ({}, 0),
        ({"cached_tokens": None}, 0),
        ({"cached_tokens": 1920}, 1920),
    ):
        usage = {**details, "prompt_tokens_details": given}
        assert _read_completion(reply(usage))[2] == (2048, 5, read)
    # A count past the prompt is cut to it (never billed twice).
    usage = {**details, "prompt_tokens_details": {"cached_tokens": 9999}}
    assert _read_completion(reply(usage))[2] == (2048, 5, 2048)
    assert _read_completion(reply(None))[2] == (0, 0, 0)


def test_prices_with_and_without_a_cached_rate():
    assert cached_rate_of("gpt-4o-mini") == cached_rate_of("gpt-4o-mini-2024-07-18") == 0.075
    assert cached_rate_of("my-own-model") is None
    listed = with_cached_rate((0.15, 0.60), "gpt-4o-mini")
    assert listed == (0.15, 0.60, 0.075)
    assert with_cached_rate((1.0, 2.0), "gpt-4o-mini") == (1.0, 2.0)  # one's own terms
    assert with_cached_rate((1.0, 2.0, 0.1), "my-own-model") == (1.0, 2.0, 0.1)
    assert with_cached_rate(None, "gpt-4o-mini") is None
    # 1M prompt tokens of which 400k cached, no completion: 600k x 0.15 + 400k x 0.075.
    assert cost(listed, 1_000_000, 0, 400_000) == pytest.approx(0.12)
    assert cost((0.15, 0.60), 1_000_000, 0, 400_000) == pytest.approx(0.15)
    assert cost(listed, 1_000, 0, 5_000) == pytest.approx(1_000 * 0.075 / 1e6)


def test_scripted_cached_tokens_are_reported_as_given():
    with FakeServer(lambda body: Reply(content="ok", prompt_tokens=3000, cached_tokens=2048)) as s:
        assert _cached(_ask(s, "short")) == 2048


def test_a_price_of_ones_own_with_a_cached_rate_bills_cached_tokens_at_it(server, make_judge):
    """`Judge(price=(in, out, cached))`: refused before; now the cached part at its rate."""
    result = ragframe.run(_rows(3), METRICS, judge=make_judge(price=(1.0, 2.0, 0.25)))
    s = result.summary()
    prompt, completion, cached = _billed(s)
    assert cached > 0
    expected = ((prompt - cached) * 1.0 + cached * 0.25 + completion * 2.0) / 1e6
    assert s["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert s["cached_saving_usd"] == pytest.approx(cached * 0.75 / 1e6, abs=1e-6)
    assert "the saving is not counted" not in str(result)


@pytest.mark.parametrize(
    ("price", "why"),
    [
        ((1.0,), "got (1.0,)"),
        ((1.0, 2.0, 0.5, 0.1), "got (1.0, 2.0, 0.5, 0.1)"),
        ("1,2", "got '1,2'"),
        ((1.0, 2.0, 3.0), "the cached prompt rate (third) is a discount"),
        ((1.0, 2.0, -0.5), "price must be 0 or more"),
    ],
)
def test_a_price_judge_cannot_use_is_refused_in_one_line(server, make_judge, price, why):
    with pytest.raises(ragframe.ConfigError) as err:
        make_judge(price=price)
    message = str(err.value)
    assert why in message and "\n" not in message
    if "got" in why:
        assert "(prompt, completion, cached prompt)" in message


def test_the_command_line_price_takes_a_cached_rate():
    from ragframe.cli.options import parse_price
    from ragframe.errors import RagframeError

    assert parse_price("0.15,0.60") == (0.15, 0.6)
    assert parse_price("0.15,0.60,0.075") == (0.15, 0.6, 0.075)
    assert parse_price(None) is None
    for text in ("1", "1,2,3,4", "a,b", "1,nan", "1,2,-1", "1,2,3"):
        with pytest.raises(RagframeError, match=r"prompt,completion\[,cached prompt\]") as err:
            parse_price(text)
        assert "0.15,0.60,0.075" in str(err.value) and repr(text) in str(err.value)


def test_the_config_files_price_takes_a_cached_rate(server, tmp_path, monkeypatch):
    from ragframe.cli import build_parser
    from ragframe.cli import config as cfg
    from ragframe.cli.options import judge_from_args

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    table = f'[judge]\nmodel = "m"\nbase_url = "{server.base_url}"\n'
    line = ["score", "log.parquet", "-o", "o.parquet"]
    (tmp_path / "ragframe.toml").write_text(table + "price = [1.0, 2.0, 0.25]\n")
    parser = build_parser()
    judge = judge_from_args(cfg.apply(parser, parser.parse_args(line), line))
    assert judge.price == (1.0, 2.0, 0.25)
    for bad in ("[1.0, 2.0, 3.0]", "[1.0, 2.0, 0.1, 0.1]"):
        (tmp_path / "ragframe.toml").write_text(table + f"price = {bad}\n")
        with pytest.raises(ragframe.ConfigError, match=r"\[prompt, completion, cached prompt\]"):
            cfg.apply(parser, parser.parse_args(line), line)


def test_a_rows_later_verify_requests_find_its_first_one_cached(tmp_path: Path):
    """Faithfulness sends a row's first verification before its others, which repeat its
    contexts: at a provider they then start with a prefix it has answered. Sent all at once
    (as before), each of them missed. Every row's contexts differ from the first token, so
    no row shares a prefix with another."""
    rows = pl.DataFrame(
        {
            "question": ["What do the words list?"] * 3,
            "answer": ["a"] * 3,
            "contexts": [[f"row {i}: {SHARED}"] for i in range(3)],
            "ground_truth": ["t"] * 3,
            "claims": [[f"claim {k} of row {i}" for k in range(6)] for i in range(3)],
        }
    )
    with FakeServer(latency=0.05) as server:
        judge = judge_for(server, tmp_path, concurrency=32)
        metric = ragframe.Faithfulness(batch_size=2, given_claims=True)
        result = ragframe.run(rows, [metric], judge=judge)
        assert result.frame["faithfulness"].null_count() == 0
        assert result.stats.requests == 9  # three verifications a row, nothing else
        # The six later requests each reuse their row's first, answered, prefix.
        assert result.stats.cached_prompt_tokens == server.stats()["cached_tokens"]
        assert result.stats.cached_prompt_tokens >= 6 * 1024


def test_a_later_verification_equal_to_a_first_one_is_not_asked_again(tmp_path: Path):
    """Sending a row's first verification before its others must not undo deduplication: a
    later prompt equal to another row's first (same contexts, same claim) takes its answer,
    failure included, as one ask of the whole column gave it (found by review: a failed
    first answer was asked again, with its repairs)."""
    asked = Counter()

    def handler(body: dict[str, Any]) -> Any:
        text = json.dumps(body["messages"])
        if "XCLAIM" in text:
            asked["x"] += 1
            return "not json at all"
        return auto_answer(body)

    rows = pl.DataFrame(
        {
            "question": ["q", "q"],
            "answer": ["a", "b"],
            "contexts": [["C ctx"], ["C ctx"]],
            "claims": [["XCLAIM"], ["YCLAIM", "XCLAIM"]],
        }
    )
    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path)
        result = ragframe.run(rows, [ragframe.Faithfulness(batch_size=1)], judge=judge)
        # XCLAIM's request and its one repair, sent once for both rows; YCLAIM's once.
        assert (server.count(), asked["x"]) == (3, 2)
        assert result.stats.deduplicated == 1
        errors = result.frame["faithfulness_detail"].struct.field("error")
        assert errors.str.contains("unusable answer").all()
