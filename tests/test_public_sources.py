"""User-facing text names public sources, never the project's internal labels.

Every metric's `source` (what `ragframe metrics`, `ragframe.catalog()` and the generated metric
pages show) names a public reference by its address: the ragas or deepeval documentation,
NVIDIA's metrics as ragas documents them, llm4s, or a paper. And no docstring, message or
documentation page cites the internal labels a user cannot look up ("seed 003", "(000)", "the
guide", the shared seed folder).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ragframe

ROOT = Path(__file__).resolve().parent.parent
#: Internal labels: the shared seed documents by number, the design guide, their folder.
INTERNAL = re.compile(
    r"seed 00\d|\(00\d\)|\bthe guide\b|guide's|design guide|shared/seeds|seed documents", re.I
)


def user_facing_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "ragframe").rglob("*.py")) + sorted((ROOT / "ragframe").rglob("*.md"))
    files += [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "docs" / "hooks.py"]
    return [f for f in files if "__pycache__" not in f.parts]


@pytest.mark.parametrize("row", ragframe.catalog().to_dicts(), ids=lambda r: r["name"])
def test_every_metric_source_names_a_public_reference(row: dict) -> None:
    source = row["source"]
    assert re.search(r"https://\S+", source), f"{row['name']}: no address in {source!r}"
    assert not INTERNAL.search(source), f"{row['name']}: internal label in {source!r}"


def test_no_internal_labels_in_user_facing_text() -> None:
    found = []
    for path in user_facing_files():
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if INTERNAL.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "internal labels where a user needs a public source:\n" + "\n".join(found)
