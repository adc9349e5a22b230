"""Chat requests and prompt tokens per row of the four core metrics, on answers of 6 to 12
claims: what faithfulness's verification batching costs.

The judge is `FakeServer` in this process (answers valid for every schema), except that the
claims stage returns 6 to 12 claims per row (6 + row number mod 7; `--claims 20 40` for
another range), each a sentence of the row's answer, so verification has real claims to batch.
Rows are ExpertQA rows with their real contexts (`common.synthetic_log`: every row distinct, no
deduplication flatters a figure).

`python bench/verify_batching.py --rows 70` prints one JSON object: chat requests and prompt
tokens per row for the four core metrics together, the same for faithfulness's verification
alone, and the mean number of claims per row. `--batch-size 5` forces the old fixed batches.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORE, fake_judge, synthetic_log

from ragframe.testing.server import FakeServer, auto_answer

_ROW_TAG = re.compile(r"\[row (\d+)\]")


CLAIMS_RANGE = [6, 12]


def claims_for(body: dict[str, Any]) -> list[str]:
    """6 to 12 claims (`CLAIMS_RANGE`) for the row named in the prompt: its answer's
    sentences, cycled."""
    user = body["messages"][-1]["content"]
    row = int(_ROW_TAG.search(user).group(1))  # type: ignore[union-attr]
    answer = user.split("<answer>", 1)[1].split("</answer>", 1)[0]
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", answer) if len(s.strip()) > 10]
    sentences = sentences or [answer.strip()[:200]]
    low, high = CLAIMS_RANGE
    count = low + row % (high - low + 1)
    return [f"{sentences[k % len(sentences)][:300]} ({k + 1})" for k in range(count)]


def handler(body: dict[str, Any]) -> str:
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    if name == "answer_claims":
        return json.dumps({"claims": claims_for(body)})
    return auto_answer(body)


def measure(rows: int, batch_size: int | None) -> dict[str, Any]:
    import ragframe
    from ragframe import Faithfulness

    frame = synthetic_log(rows)
    faithfulness = Faithfulness() if batch_size is None else Faithfulness(batch_size=batch_size)
    metrics: list[Any] = [faithfulness, *CORE[1:]]
    with FakeServer(handler=handler) as server, tempfile.TemporaryDirectory() as tmp:
        judge = fake_judge(server.base_url, Path(tmp) / "cache.sqlite3")
        result = ragframe.run(frame, metrics, judge=judge)
        bodies = server.chat_requests
        tasks = Counter(
            ((b.get("response_format") or {}).get("json_schema") or {}).get("name", "")
            for b in bodies
        )
        verify_chars = sum(
            len(m["content"])
            for b in bodies
            if "faithfulness_verify" in json.dumps(b.get("response_format") or {})
            for m in b["messages"]
        )
    claims = result.frame["faithfulness_detail"].struct.field("claims").list.len()
    return {
        "rows": rows,
        "batch_size": batch_size,
        "claims_per_row": round(float(claims.mean()), 2),  # type: ignore[arg-type]
        "failed_rows": int(result.frame["faithfulness"].null_count()),
        "chat_requests_per_row": round(sum(tasks.values()) / rows, 3),
        "prompt_tokens_per_row": round(result.stats.prompt_tokens / rows, 1),
        "verify_requests_per_row": round(tasks["faithfulness_verify"] / rows, 3),
        "verify_prompt_tokens_per_row": round(verify_chars / 4 / rows, 1),
        "requests_by_task_per_row": {k: round(v / rows, 3) for k, v in sorted(tasks.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=70)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--claims", type=int, nargs=2, default=CLAIMS_RANGE, metavar=("MIN", "MAX"))
    args = parser.parse_args()
    CLAIMS_RANGE[:] = args.claims
    print(json.dumps(measure(args.rows, args.batch_size), indent=2))


if __name__ == "__main__":
    main()
