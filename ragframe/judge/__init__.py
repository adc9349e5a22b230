"""The only code that talks to an LLM. `Judge` configures it; a `JudgeSession` (client.py)
runs it from parts: the transport, the answer store and cache, the backends (live, Batch API,
dry run), the parser, and the embedded local judge."""

from ragframe.judge.client import Answer, Judge, JudgeSession, RunStats
from ragframe.judge.task import Task

__all__ = ["Answer", "Judge", "JudgeSession", "RunStats", "Task"]
