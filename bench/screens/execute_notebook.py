"""Execute a notebook top to bottom in a real Jupyter kernel (nbclient, as
tests/test_notebooks.py does) and save it with its outputs and widget state.

    python bench/screens/execute_notebook.py IN.ipynb OUT.ipynb WORKING_DIR

No endpoint is configured (OPENAI_* and RAGFRAME_MODEL are removed), so the shipped notebooks
start ragframe's scripted test server; set RAGFRAME_CACHE to a fresh file for a cold run."""

import os
import sys

import nbclient
import nbformat

source, target, cwd = sys.argv[1], sys.argv[2], sys.argv[3]
for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
    os.environ.pop(name, None)
notebook = nbformat.read(source, as_version=4)
client = nbclient.NotebookClient(
    notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": cwd}}
)
client.execute()
nbformat.write(notebook, target)
