"""Structured output: the body of a chat request in each mode, and when to fall back.

Three modes, strongest first: `json_schema` (the server enforces the schema), `json_object`
(JSON with the schema in the instructions) and `prompt` (the schema in the instructions only).
A run starts in the strongest mode its `Judge(structured=...)` allows; with "auto" a server
that refuses the response_format parameter moves the whole run down a mode, and a schema it
cannot take moves that one request down (see `Modes.weaker`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, cast

from ragframe.judge.config import MODES, StructuredMode
from ragframe.judge.results import Failure, RunStats
from ragframe.judge.schema import bounded
from ragframe.judge.task import Task

if TYPE_CHECKING:
    from ragframe.judge.config import JudgeConfig as Judge


#: A 400/422 that refuses the structured-output parameter itself (so every request of the run
#: would be refused), as servers word it: OpenAI ("Invalid parameter: 'response_format' of
#: type 'json_schema' is not supported with this model"), llama.cpp ("response_format type must
#: be one of "text" or "json_object", but got: json_schema"), gateways that name the field
#: ("The parameter `response_format.type` specified in the request are not valid"), Ollama
#: ("invalid format: expected "json" or a JSON schema"), and "json_schema is not supported" or
#: "does not support response_format" forms. A schema the server cannot compile (OpenAI's
#: "Invalid schema for response_format", vLLM's "The provided JSON schema contains features
#: not supported by xgrammar") is not one: that is one task's schema, not the parameter.
_REFUSES_PARAMETER = re.compile(
    r"response_format\W{0,3}(?:of )?type\b"
    r"|response_format\.type"
    r"|invalid format: expected"
    r"|\b(?:response_format|json_schema|json_object|structured outputs?)\b\W{0,3}\s"
    r"(?:is |are )?(?:not (?:supported|permitted|allowed)|unsupported)"
    r"|does not support (?:the )?\W?(?:response_format|json_schema|json_object|structured output)",
    re.IGNORECASE,
)
#: Any other 400 that may be about the schema: that one request is tried in a weaker mode.
_MAY_BE_SCHEMA = re.compile(r"schema|grammar|response_format|json_object|format", re.IGNORECASE)
#: Older llama.cpp servers refuse a response_format type with a 500, not a 400.
LLAMA_CPP_REFUSAL = re.compile(r"response_format type must be one of", re.IGNORECASE)


def weakest(*modes: StructuredMode) -> StructuredMode:
    """The weakest of `modes` (prompt < json_object < json_schema)."""
    return max(modes, key=MODES.index)


def request_body(
    judge: Judge, task: Task, messages: list[dict[str, Any]], schema: dict[str, Any], mode: str
) -> dict[str, Any]:
    """The JSON body of one chat completion request, as it goes on the wire."""
    body: dict[str, Any] = {
        "model": judge.model,
        "temperature": judge.temperature,
        "max_tokens": judge.max_tokens_for(task),
    }
    if judge.seed is not None:
        body["seed"] = judge.seed
    if task.top_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = task.top_logprobs
    if judge.output_bounds is not None:
        schema = bounded(schema, *judge.output_bounds)
    if mode != "json_schema":
        # Without a server-side schema the model must read it; say it in the instructions.
        schema_text = json.dumps(schema, separators=(",", ":"))
        messages = [
            {
                "role": "system",
                "content": f"{messages[0]['content']}\n\nReply with JSON only, matching this "
                f"JSON schema:\n{schema_text}",
            },
            *messages[1:],
        ]
    body["messages"] = messages
    if mode == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": task.name.replace(".", "_"), "schema": schema},
        }
    elif mode == "json_object":
        body["response_format"] = {"type": "json_object", "schema": schema}
    return body


class Modes:
    """The run's structured-output mode, and the steps down from it after a 400."""

    def __init__(self, structured: str, stats: RunStats) -> None:
        self.auto = structured == "auto"
        self.mode: StructuredMode = "json_schema" if self.auto else cast(StructuredMode, structured)
        self.stats = stats

    def weaker(
        self, mode: StructuredMode, failure: Failure, *, retried: bool
    ) -> StructuredMode | None:
        """The structured mode to send a request in again after `failure`, or None.

        A 400/422 refusing the structured-output parameter itself (`_REFUSES_PARAMETER`)
        in the run's mode moves the whole run to the next weaker mode, recorded in
        `RunStats.downgrades`; in a weaker mode than the run's (this request's own
        fallback), it moves this request only. Any other 400 that may be about the schema
        (it names a schema, a grammar or a format) retries this one request, once
        (`retried`: it was), in the next weaker mode and leaves the run's mode alone: one
        task's schema can be beyond a server that takes the others.
        """
        if failure.cause != "bad_request" or not self.auto or mode == "prompt":
            return None
        step = MODES[MODES.index(mode) + 1]
        text = f"{failure.message} param={failure.param or ''}"
        if _REFUSES_PARAMETER.search(text):
            # Only a refusal of the run's own mode moves the run: a request that fell back
            # for its own schema is refused in a mode the others never send.
            if mode == self.mode:
                self.stats.downgrades.append(
                    {"from": self.mode, "to": step, "reason": failure.message}
                )
                self.mode = step
                self.stats.structured_mode = step
            return weakest(step, self.mode)
        if not retried and _MAY_BE_SCHEMA.search(text):
            self.stats.retries["structured_fallback"] += 1
            return step
        return None
