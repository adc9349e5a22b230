"""What a job says about itself: the status dict, its table, the note while it waits."""

from __future__ import annotations

from typing import Any

from ragframe.judge.batch.manifest import Manifest, Mode


def describe(m: Manifest) -> dict[str, Any]:
    """The job's state, one entry per batch, the failures (what `BatchJob.status` returns)."""
    limit = m.max_attempts
    return {
        "job": m.job,
        "state": m.state.value,
        "mode": m.mode.value,
        "stage": m.stage,
        "model": m.judge.model,
        "endpoint_host": m.judge.endpoint_host,
        "input": m.input.path,
        "rows": m.input.rows,
        "metrics": [r.name for r in m.metrics],
        "output": m.output,
        "batches": [
            {
                "id": b.id,
                "kind": b.kind.value,
                "stage": b.stage,
                "part": b.part,
                "status": str(b.status),
                "requests": len(b.custom_ids),
                "request_counts": vars(b.request_counts).copy(),
                "collected": b.collected,
                "result": None if b.result is None else vars(b.result).copy(),
            }
            for b in m.batches
        ],
        "retrying": sum(1 for f in m.failures.values() if f.attempts < limit),
        "given_up": sum(1 for f in m.failures.values() if f.attempts >= limit),
        "totals": vars(m.totals).copy(),
    }


def format_status(info: dict[str, Any]) -> str:
    """The status as a plain-text table (what `ragframe batch status` prints)."""
    lines = [
        f"job {info['job']}  state {info['state']}  stage {info['stage']}  ({info['mode']})",
        f"{', '.join(info['metrics'])} over {info['rows']} rows of {info['input']}; "
        f"model {info['model']} at {info['endpoint_host']}",
        "",
        f"{'batch':<40} {'stage':>5} {'part':>4} {'status':<11} {'requests':>8} "
        f"{'done':>6} {'failed':>6}  collected",
    ]
    for b in info["batches"]:
        c = b["request_counts"] or {}
        lines.append(
            f"{b['id'] or '(not created)':<40} {b['stage']:>5} {b['part']:>4} {b['status']:<11} "
            f"{b['requests']:>8} {c.get('completed', 0):>6} {c.get('failed', 0):>6}  "
            f"{'yes' if b['collected'] else 'no'}"
        )
    lines.append("")
    t = info["totals"]
    lines.append(
        f"requests submitted {t['requests']}, answered {t['answered']}, failed lines "
        f"{t['failed_lines']} (retrying {info['retrying']}, given up {info['given_up']}); "
        f"tokens {t['prompt_tokens']} prompt + {t['completion_tokens']} completion"
    )
    return "\n".join(lines)


def waiting_note(m: Manifest) -> str:
    """ "waiting for ...": each open batch with its progress, or the file it waits on."""
    parts = []
    for b in m.open_batches():
        if b.kind is Mode.FILE:
            parts.append(
                f"{b.id}: {len(b.custom_ids)} requests written to "
                f"{b.requests_path}, results not imported yet"
            )
            continue
        c = b.request_counts
        parts.append(f"{b.id} {b.status} {c.completed + c.failed}/{c.total}")
    return "waiting for " + "; ".join(parts)
