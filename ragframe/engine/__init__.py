"""The engine: one run, every path. `spec` (the run specification every path executes, and the
table of what each path honours), `prepare` (what every path does before and around the
requests: choose and check the metrics, score one frame with a judge session), `run` (in
memory: `evaluate`, `run`, `estimate`), `stream` (chunk by chunk), `arrow` (Arrow batches,
for Ray), `repeats` (k runs at k seeds), `batch` (the Batch API job), `result` and `summary`
(the run's result and the table it prints).

Layer: above `metrics`; imports `metrics`, `judge`, `inputs`, `stats` and the ground.
"""

from ragframe.engine.spec import PATHS, RunSpec, refuse_unsupported

__all__ = ["PATHS", "RunSpec", "refuse_unsupported"]
