"""A notebook of the README's "In a notebook" example, one cell per step as a user types it,
with the judge swapped for ragframe's scripted test server (no key needed) and the scoring
cell run twice (the second time every answer is in the cache).

    python bench/screens/readme_notebook.py README.md OUT.ipynb"""

import re
import sys
from pathlib import Path

import nbformat

readme, target = sys.argv[1], sys.argv[2]
block = re.search(r"## In a notebook\s+```python\n(.*?)```", Path(readme).read_text(), re.S)[1]
imports, setup, looks = block.split("\n\n")[:3]
read_line, _judge_line, *scoring = setup.split("\n")
fake_judge = (
    "from ragframe.testing.server import FakeServer\n\nserver = FakeServer().start()\n"
    'judge = Judge("fake-judge", base_url=server.base_url, api_key="none", '
    'embedding_model="fake-embedding")'
)
score = "\n".join(scoring)
cells = [imports, read_line, fake_judge, score, "# run again: every answer is cached\n" + score]
cells += looks.strip().split("\n")
notebook = nbformat.v4.new_notebook(
    cells=[nbformat.v4.new_markdown_cell("The README's notebook example, step by step")]
    + [nbformat.v4.new_code_cell(cell) for cell in cells]
)
nbformat.write(notebook, target)
