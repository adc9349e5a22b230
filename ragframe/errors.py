"""Every error ragframe raises, as one tree.

    RagframeError
    ├── ConfigError        the judge or a metric is configured wrongly (raised before any request)
    ├── InputError         the input frame lacks a column or has one of the wrong type
    ├── BudgetExceeded     a run would cost more than `max_cost`
    └── JudgeError         a request failed for good (only raised with fail_fast=True;
        │                  otherwise the failure becomes that row's `_detail.error`)
        └── EndpointError  the endpoint cannot serve the run at all (refused connections,
                           a rejected API key, an unknown model): the run stops at once

Row-level problems (a missing value, an answer that never validated) are not exceptions:
they become a null score with the reason in `{metric}_detail.error`.

Beside the tree, `Terminated` is not an error but a stop: SIGTERM, raised as a
KeyboardInterrupt (see `ragframe._sync`), so every cleanup written for Ctrl-C runs for it too.
"""

from __future__ import annotations


class RagframeError(Exception):
    """Base of every ragframe error."""


class ConfigError(RagframeError):
    """The judge, a metric or the command line is configured wrongly."""


class InputError(RagframeError):
    """The input frame cannot be scored as given; the message says which column and the fix."""


class BudgetExceeded(RagframeError):
    """The run's estimated or spent cost passed `max_cost`."""


class JudgeError(RagframeError):
    """A request to the judge failed after its retries (raised only with fail_fast=True)."""


class EndpointError(JudgeError):
    """The endpoint cannot serve this run at all: it refuses connections, rejects the API key,
    or has no such model. Raised at once (no retries), whatever fail_fast says."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what CI runners and Kubernetes send to stop a job), raised as Ctrl-C is: the
    run stops sending, keeps its cached answers and removes its temporary output."""
