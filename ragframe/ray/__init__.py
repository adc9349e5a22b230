"""Scoring on Ray Data: the same metrics, output and cache as one process, across a cluster.

`evaluate(ds, metrics, judge, actors=N)` maps `ragframe.score_arrow` over a `ray.data.Dataset`
with `map_batches` and a callable class: each of the N actors opens one judge session, once,
on an event loop of its own (`ArrowSession`), and scores batch after batch with it. Ray does
the rest: placement, data movement, restarting an actor that dies (`max_restarts=-1`) and
sending its batch again (`max_task_retries=-1`). A batch scored twice costs nothing twice:
answers are committed to the answer cache as they arrive.

How the cluster shares one endpoint. The judge's `concurrency`, `requests_per_minute`,
`tokens_per_minute` and `max_cost` are the cluster's: each actor gets its share of the
concurrency (split so the shares add up to the whole) and of the budget (divided by N).
The rates are shared one of two ways (`limits=`): "actor" (the default), one limiter actor
holds the cluster's buckets and every actor asks it when its requests may go (the asks
waiting at once travel in one call), or "divided", each actor keeps rate / N to itself (no
messages, no extra actor, but an actor without work, or not started yet, leaves its share
unused: measured in `bench/bench_ray.py`, 61-89 % of a binding rate reached against 94-103 %
with the limiter actor (the start's one-second burst counted), at one call per 15-30
requests). No limiter actor is started without a rate. Either
way each actor's pool still halves its limit on a 429 and pauses (AIMD), so every actor
backs off when the endpoint says so. With several endpoints (`Judge(base_url=[...])`) actor
i sends to endpoint i mod their number.

The answer cache. Each actor writes a SQLite file of its own in `cache_dir` and reads every
file there (`SharedAnswerCache`): never one SQLite file written by several processes, which a
network filesystem cannot keep safe. Identical prompts in different batches are sent once per
actor at most; two actors may each send one once, when neither had answered it yet.

`score_partitions` (behind `ragframe score DIR -o OUT --ray`) scores a directory of Parquet
partitions into one output file per input file, with a single-process run's metadata, and
skips a partition already scored with the same metrics, judge, settings and input.

The modules, one idea each: `limits` (the actors' shares, the limiter actor), `actors` (the
scoring actors and what a batch cost), `dataset` (`evaluate` on a Ray Dataset),
`partitions` (the input files and their rows as a dataset), `outputs` (each partition's
file and the run's result), `partitioned` (`score_partitions`). This module checks that Ray
is installed before any of them is imported.

Layer: above `report`; imports `engine`, `decide`, `judge`, `metrics`, `inputs`, `stats`.
"""

from __future__ import annotations

from ragframe.errors import ConfigError

#: What to install for this module.
EXTRA = "pip install 'ragframe[ray]'"


class RayNotInstalled(ConfigError, ImportError):
    """Ray Data is not installed: the error names the extra that installs it."""


try:
    import ray
    import ray.data  # noqa: F401  (the check itself: every module here imports it)
except ImportError as _missing:
    raise RayNotInstalled(
        f"scoring on Ray needs Ray Data, which is not installed ({_missing}); install it with "
        f"{EXTRA}, or score without --ray in one process"
    ) from _missing

from ragframe.ray.actors import RayScorer, scorer_actors  # noqa: E402
from ragframe.ray.dataset import batch_rows, default_cache_dir, evaluate  # noqa: E402
from ragframe.ray.limits import LIMITS, Limits, RemoteRate, actor_judge, limiter_counts  # noqa: E402
from ragframe.ray.outputs import PartitionsResult  # noqa: E402
from ragframe.ray.partitioned import score_partitions  # noqa: E402
from ragframe.ray.partitions import Partition  # noqa: E402

__all__ = [
    "EXTRA",
    "LIMITS",
    "Limits",
    "Partition",
    "PartitionsResult",
    "RayNotInstalled",
    "RayScorer",
    "RemoteRate",
    "actor_judge",
    "batch_rows",
    "default_cache_dir",
    "evaluate",
    "limiter_counts",
    "score_partitions",
    "scorer_actors",
]
