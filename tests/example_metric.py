"""A worked example: a new LLM metric is one short file (the README's "Writing a metric").

Everything below this docstring is the README's code block, word for word;
tests/test_writing_a_metric.py runs it through the whole engine and checks the two agree.
"""

from typing import ClassVar

import polars as pl

from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import boolean, indexed_verdict
from ragframe.judge.task import Task
from ragframe.metrics import Context, Metric, MetricInfo
from ragframe.metrics.base import ERROR, fence, fence_items, prompt
from ragframe.metrics.verdicts import ask_about_contexts, per_context, verdict_task
from ragframe.prompts import DATA_RULE

PROMPT = f"""You check which retrieved contexts an answer draws on.

For each numbered context, write one verdict: the context's `index`, [[reason: a one-sentence
`reason`, ]]then `used`: true when the answer states something that it can only have taken
from that context, false when the answer does not rely on it.

{DATA_RULE}"""

# One verdict per context, naming it by number: the JSON Schema the judge sees and the
# Polars type of the detail both come from this one definition.
USED = indexed_verdict(used=boolean())
TASK = verdict_task("context_use.verdicts", PROMPT, USED, max_tokens=1024)
# The detail of one context: its input position, then the judge's verdict.
CONTEXT = USED.struct("context_index", "used", "reason", context_index=pl.Int32())


class ContextUse(Metric):
    """Share of the retrieved contexts that the answer draws on (higher is better)."""

    name = "context_use"
    requires: ClassVar[tuple[str, ...]] = ("answer", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"contexts": pl.List(CONTEXT)}
    info = MetricInfo(
        formula="used contexts / contexts",
        requests_per_row="1",
        empty_input="null: missing answer or contexts",
        source="ragframe's worked example",
    )

    def tasks(self) -> list[Task]:
        return [TASK]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        # One request per row, all its contexts numbered in the prompt; the schema pins
        # the number of verdicts to the number of contexts.
        judged = await ask_about_contexts(
            ctx,
            TASK,
            rows,
            prompt(fence_items("context", pl.col("contexts")), fence("answer", pl.col("answer"))),
        )
        # Verdicts matched to contexts by their index; context_index is the input position.
        per_row = per_context(judged, ("used", "reason"), "contexts")
        used = pl.col("contexts").list.eval(pl.element().struct.field("used").cast(pl.Float64))
        return judged.select(ROW_ID, ERROR).join(
            per_row.with_columns(used.list.mean().alias("score")),
            on=ROW_ID,
            how="left",
            maintain_order="left",
        )
