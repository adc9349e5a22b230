"""A rerun the answer cache answers whole imports neither openai nor pandas.

Both cost start-up time a warm `ragframe score` does not need (about 0.6 s and 0.3 s of CPU
here): openai's client is made at the first request, and the input's empty frame is built
without pyarrow's pandas-importing `Schema.empty_table`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl

from ragframe.testing.server import FakeServer

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample.parquet"
CORE = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]

# Runs `ragframe score` in this interpreter, then prints which of the two it imported.
RERUN = """
import sys
from ragframe.cli import main
status = main(sys.argv[1:])
print(sorted(name for name in ("openai", "pandas") if name in sys.modules), status)
"""


def test_a_warm_rerun_imports_neither_openai_nor_pandas(tmp_path: Path):
    source = tmp_path / "log.parquet"
    pl.read_parquet(SAMPLE).head(4).write_parquet(source)
    with FakeServer() as server:
        cache = tmp_path / "answers.sqlite3"
        args = ["score", str(source), "-o", str(tmp_path / "scored.parquet"), "--overwrite"]
        args += ["--metrics", ",".join(CORE), "--model", "fake-judge"]
        args += ["--base-url", server.base_url, "--embedding-model", "fake-embedding"]
        args += ["--cache", str(cache), "--no-progress"]
        env = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "PATH": ""}
        cold = subprocess.run(
            [sys.executable, "-c", RERUN, *args], capture_output=True, text=True, env=env
        )
        assert cold.returncode == 0, cold.stderr
        assert cold.stdout.strip().splitlines()[-1] == "['openai'] 0"  # the cold run asked
        asked = server.stats()["requests"].get("/v1/chat/completions", 0)
        assert asked > 0
        warm = subprocess.run(
            [sys.executable, "-c", RERUN, *args], capture_output=True, text=True, env=env
        )
        assert warm.returncode == 0, warm.stderr
        assert server.stats()["requests"].get("/v1/chat/completions", 0) == asked
        assert warm.stdout.strip().splitlines()[-1] == "[] 0"
