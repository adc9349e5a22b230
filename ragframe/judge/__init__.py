"""The only code that talks to an LLM: client, pool, cache, parsing, the embedded local judge."""

from ragframe.judge.client import Answer, Judge, JudgeSession, RunStats
from ragframe.judge.task import Task

__all__ = ["Answer", "Judge", "JudgeSession", "RunStats", "Task"]
