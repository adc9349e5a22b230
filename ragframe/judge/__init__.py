"""The only code that talks to an LLM. `Judge` configures it (`config` holds the settings every
part reads; `client` adds `session()`); a `JudgeSession` runs it from parts: the transport,
the answer store and cache, the backends (live, Batch API, dry run), the parser, embeddings
(remote and the local MiniLM), prices, the Batch API's wire parts (`batch`) and the embedded
local judge.

Layer: above `inputs`; imports `stats` and the ground only.
"""

from ragframe.judge.client import Answer, Judge, JudgeSession, RunStats
from ragframe.judge.task import Task

__all__ = ["Answer", "Judge", "JudgeSession", "RunStats", "Task"]
