"""What leaving out the reasons saves: completion tokens per row of the four core metrics, with
and without reasons, and the requests each sends, on the project's stand-in judge.

The log is real ExpertQA rows with 3 to 5 retrieved contexts (`common.synthetic_log`, every row
distinct). The stand-in (`ragframe.testing.server.FakeServer`, in this process) answers every
request from the schema it is sent, as `auto_answer` does, but with realistic lengths:

- its verdicts are drawn from the task and the user message only (`synthesize` on the schema
  without reason fields), so both runs get the same verdicts, and their counts follow the text:
  as many claims as the answer has sentences and as many facts as the ground truth has
  (each between 3 and 10);
- claims, facts and generated questions are 10 to 16 words; a `reason` is written, 15 to 25
  words, only where the schema asks for one, so an answer without reasons really is shorter.

Tokens are the stand-in's count (characters / 4 + 1 per answer, as `FakeServer` reports
`usage`), not a real tokenizer's; the difference between the two runs is what the reasons
cost. Each metric runs alone, with no cache, so every request is sent and counted.

    python bench/bench_reasons.py
    python bench/bench_reasons.py --rows 300 --seed 1 --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORE, emit, expertqa_rows, fake_judge, machine, text_lengths

import ragframe
from ragframe.testing.server import _WORDS, FakeServer, schema_of, synthesize

#: Words per written item, by the property (or list) that holds it: (fewest, most).
WORDS = {"reason": (15, 25), "fact": (10, 16), "claims": (10, 16), "questions": (10, 16)}
#: What a list's length follows: the fenced text of the user message it is drawn from.
COUNTED_FROM = {"claims": "answer", "facts": "ground_truth"}


def log(rows: int, seed: int) -> pl.DataFrame:
    """`rows` ExpertQA rows with 3 to 5 contexts, drawn with replacement, each made distinct
    by a row tag in question, answer and ground truth."""
    base = expertqa_rows().filter(pl.col("contexts").list.len().is_between(3, 5))
    tag = pl.format("[row {}] ", pl.int_range(pl.len()))
    return base.sample(rows, with_replacement=True, seed=seed).select(
        pl.concat_str(tag, "question").alias("question"),
        pl.concat_str(tag, "answer").alias("answer"),
        "contexts",
        pl.concat_str(tag, "ground_truth").alias("ground_truth"),
    )


def sentences(user: str, tag: str) -> int:
    """Sentences of the text fenced as <tag> in a user message, between 3 and 10."""
    found = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", user, re.S)
    text = found.group(1) if found else ""
    return min(10, max(3, len(re.findall(r"[.!?](?:\s|$)", text))))


def without_reasons(schema: Any) -> Any:
    """The schema with no `reason` property: the shape of the verdicts alone."""
    if isinstance(schema, list):
        return [without_reasons(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_reasons(v) for k, v in schema.items()}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {
            k: without_reasons(v) for k, v in schema["properties"].items() if k != "reason"
        }
        out["required"] = [k for k in schema.get("required", []) if k != "reason"]
    return out


def pinned(schema: Any, user: str) -> Any:
    """Open lists given the length the text implies (`COUNTED_FROM`), within their bounds."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {}
        for name, sub in props.items():
            sub = pinned(sub, user)
            open_list = "minItems" not in sub or sub["minItems"] != sub.get("maxItems")
            if name in COUNTED_FROM and open_list:
                n = min(sentences(user, COUNTED_FROM[name]), sub.get("maxItems", 10))
                sub = {**sub, "minItems": n, "maxItems": n}
            out["properties"][name] = sub
    if isinstance(schema.get("items"), dict):
        out["items"] = pinned(schema["items"], user)
    return out


def written(value: Any, schema: Any, rng: random.Random, name: str = "") -> Any:
    """`value` with its texts rewritten at realistic length, and a reason added wherever the
    schema asks for one."""
    if isinstance(value, list):
        items = schema.get("items", {}) if isinstance(schema, dict) else {}
        return [written(v, items, rng, name) for v in value]
    if isinstance(value, dict):
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        out = {k: written(v, props.get(k, {}), rng, k) for k, v in value.items()}
        if "reason" in props:  # where the schema puts it (before the verdict it explains)
            out["reason"] = sentence(rng, WORDS["reason"])
            out = {k: out[k] for k in [*props, *out] if k in out}
        return out
    if isinstance(value, str) and name in WORDS and not schema.get("enum"):
        return sentence(rng, WORDS[name])
    return value


def sentence(rng: random.Random, bounds: tuple[int, int]) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(*bounds))]
    return " ".join(words).capitalize() + "."


def realistic_answer(body: dict[str, Any]) -> str:
    """An answer to any request, drawn from its schema, the same verdicts with or without
    reasons (see the module docstring)."""
    schema = schema_of(body) or {}
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    seed = hashlib.sha256(f"{name}\n{user}".encode()).digest()
    shape = synthesize(pinned(without_reasons(schema), user), random.Random(seed[:8]))
    return json.dumps(written(shape, schema, random.Random(seed[8:16])))


def reason_words(detail: pl.Series) -> list[int]:
    """Words of every non-null `reason` in a detail column."""

    def walk(value: Any) -> list[str]:
        if isinstance(value, list):
            return [r for v in value for r in walk(v)]
        if isinstance(value, dict):
            own = [v for k, v in value.items() if k == "reason" and v is not None]
            return own + [r for k, v in value.items() if k != "reason" for r in walk(v)]
        return []

    return [len(r.split()) for r in walk(detail.to_list())]


def measure(
    frame: pl.DataFrame, metric: str, reasons: bool, server: FakeServer
) -> tuple[dict[str, Any], list[float | None]]:
    """One metric over the log, no cache: tokens per row and requests sent; the scores."""
    server.reset()
    judge = fake_judge(server.base_url, cache=False)  # type: ignore[arg-type]
    out = ragframe.run(frame, [metric], judge=judge, reasons=reasons).frame
    detail = out[f"{metric}_detail"]
    words = reason_words(detail)
    return {
        "chat_requests": server.count("/chat/completions"),
        "embedding_requests": server.count("/embeddings"),
        "completion_tokens_per_row": round(
            detail.struct.field("completion_tokens").mean(),  # type: ignore[arg-type]
            1,
        ),
        "prompt_tokens_per_row": round(
            detail.struct.field("prompt_tokens").mean(),  # type: ignore[arg-type]
            1,
        ),
        "failed_rows": int(detail.struct.field("error").is_not_null().sum()),
        "reasons_per_row": round(len(words) / frame.height, 2),
        "words_per_reason": round(sum(words) / len(words), 1) if words else None,
    }, out[metric].to_list()


def table(results: dict[str, dict[str, dict[str, Any]]], rows: int) -> str:
    lines = [
        f"| metric ({rows} rows) | completion tokens / row, with reasons | without | saved "
        "| prompt tokens / row, with | without | chat requests, with | without "
        "| reasons / row (words each) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    totals = {"on": [0.0, 0.0], "off": [0.0, 0.0]}
    for metric, r in results.items():
        on, off = r["with"], r["without"]
        saved = 1 - off["completion_tokens_per_row"] / on["completion_tokens_per_row"]
        lines.append(
            f"| {metric} | {on['completion_tokens_per_row']} | "
            f"{off['completion_tokens_per_row']} | {saved:.0%} | {on['prompt_tokens_per_row']} "
            f"| {off['prompt_tokens_per_row']} | {on['chat_requests']} | "
            f"{off['chat_requests']} | {on['reasons_per_row']} ({on['words_per_reason']}) |"
        )
        for key, res in (("on", on), ("off", off)):
            totals[key][0] += res["completion_tokens_per_row"]
            totals[key][1] += res["prompt_tokens_per_row"]
    (c_on, p_on), (c_off, p_off) = totals["on"], totals["off"]
    lines.append(
        f"| four together | {c_on:.1f} | {c_off:.1f} | {1 - c_off / c_on:.0%} | {p_on:.1f} "
        f"| {p_off:.1f} | | | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    frame = log(args.rows, args.seed)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with FakeServer(realistic_answer) as server:
        for metric in CORE:
            (on, on_scores), (off, off_scores) = (
                measure(frame, metric, reasons, server) for reasons in (True, False)
            )
            # The stand-in gives the same verdicts either way: the scores must agree.
            results[metric] = {"with": on, "without": off, "same_scores": on_scores == off_scores}
    print(table(results, args.rows), file=sys.stderr)
    emit(
        {
            "rows": args.rows,
            "seed": args.seed,
            "inputs": text_lengths(frame),
            "metrics": results,
            "machine": machine(),
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
