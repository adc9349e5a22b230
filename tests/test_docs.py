"""Every example in README.md, CONTRIBUTING.md and docs/ runs as written, against the local
server (`ragframe.testing`), so no example can rot.

Each page runs in a fresh directory holding `data/` (the shipped sample) and `logs.parquet` (a
copy of it, the name the docs give "your log"), with the environment pointed at the fake server
as a user would point it at OpenAI. A page's blocks run in order, its ```python blocks sharing
one namespace; each line of a ```bash / ```console block is a `ragframe ...` command run through
`ragframe.cli.main`. A ```toml block whose first line is `# ragframe.toml` (or
`# pyproject.toml`) is written to that file in the page's directory when the page reaches it,
so the commands after it read it as a user's would (`ragframe score` then exits 1 when a gate of
that file fails, as it would with the gate on its command line). A block that must not run
carries `<!-- no-run: why -->` on the line above.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from conftest import router

from ragframe.cli import main
from ragframe.testing.server import auto_answer

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"

FENCE = re.compile(
    r"^(?:<!-- no-run: (?P<why>[^\n]+?) -->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.S | re.M,
)
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<start>\d*)(?::(?P<end>\d*))?)?"$', re.M)
RUN = {"python", "bash", "console", "sh", "shell"}
#: Pages whose blocks talk to Phoenix's server (the `phoenix` fixture of conftest.py).
NEEDS_PHOENIX = {Path("docs/traces/phoenix.md")}
#: Commands whose documented outcome includes exit status 1: a gate that fails.
GATE_OPTIONS = ("--fail-under", "--min-pass-rate", "--fail-if-worse")
#: A ```toml block written to a file: its first line names the file (`# ragframe.toml`).
CONFIG_FILE = re.compile(r"#\s*(?P<name>ragframe\.toml|pyproject\.toml)\b")


@dataclass(frozen=True)
class Block:
    number: int  # 1-based, counting every fenced block of the page
    lang: str
    body: str
    no_run: str | None


def blocks(markdown: str) -> list[Block]:
    return [
        Block(i, m["lang"], expand_snippets(m["body"]), m["why"])
        for i, m in enumerate(FENCE.finditer(markdown), 1)
    ]


def expand_snippets(body: str) -> str:
    """`--8<-- "path:start:end"` lines (pymdownx.snippets, paths from the repository root)."""

    def include(m: re.Match[str]) -> str:
        lines = (ROOT / m["path"]).read_text().splitlines()
        start = int(m["start"]) if m["start"] else 1
        end = int(m["end"]) if m["end"] else len(lines)
        return "\n".join(lines[start - 1 : end])

    return SNIPPET.sub(include, body)


def python_blocks(markdown: str) -> list[str]:
    return [b.body for b in blocks(markdown) if b.lang == "python" and b.no_run is None]


def commands(body: str) -> list[str]:
    """The shell lines of a block, continuation lines joined."""
    return [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def run_command(line: str, where: str, gated: frozenset[str] = frozenset()) -> None:
    """Run one `ragframe ...` line; it must exit 0, or 1 where a gate may fail: a gate option
    on the line, `ragframe gate`, or a subcommand in `gated` (those the page's configuration
    file gives gates)."""
    args = shlex.split(line, comments=True)
    if not args:
        return
    assert args[0] == "ragframe", f"{where}: `{line}` is not a ragframe command; mark it no-run"
    try:
        status = main(args[1:])
    except SystemExit as exit_:  # argparse: --help, --version, a usage error
        status = exit_.code if isinstance(exit_.code, int) else 2
    gates = any(o in args for o in GATE_OPTIONS) or args[1:2] == ["gate"]
    gates = gates or (len(args) > 1 and args[1] in gated and "--no-config" not in args)
    allowed = {0, 1} if gates else {0}
    assert status in allowed, f"{where}: `{line}` exited {status}"


def config_file(block: Block) -> str | None:
    """The file a ```toml block stands for (`ragframe.toml`, `pyproject.toml`), named by its
    first line; None for any other block."""
    first = block.body.lstrip("\n").partition("\n")[0]
    found = CONFIG_FILE.match(first) if block.lang == "toml" else None
    return found["name"] if found else None


def gated_by(text: str, name: str) -> frozenset[str]:
    """The subcommands a configuration file gives gates: `score` and `gate` for [gate]
    fail_under / min_pass_rate, `compare` for [compare] fail_if_worse."""
    data = tomllib.loads(text)
    if name == "pyproject.toml":
        data = data.get("tool", {}).get("ragframe", {})
    gate, compare = data.get("gate", {}), data.get("compare", {})
    found = {"score", "gate"} if gate.get("fail_under") or gate.get("min_pass_rate") else set()
    return frozenset(found | ({"compare"} if compare.get("fail_if_worse") else set()))


def run_page(path: Path) -> dict:
    """Run a page's blocks in order; the Python namespace they shared."""
    name = str(path.relative_to(ROOT))
    namespace: dict = {"__name__": f"docs:{name}"}
    gated: frozenset[str] = frozenset()
    for block in blocks(path.read_text()):
        config = config_file(block) if block.no_run is None else None
        if config is not None:  # the page's configuration, in the directory it runs in
            Path(config).write_text(block.body)
            gated = gated_by(block.body, config)
        if block.no_run is not None or block.lang not in RUN:
            continue
        where = f"{name}, block {block.number} ({block.lang})"
        if block.lang == "python":
            try:
                exec(compile(block.body, where, "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"{where} failed: {err!r}") from err
        else:
            for line in commands(block.body):
                run_command(line, where, gated)
    return namespace


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if p.exists()]


@pytest.fixture
def judge_env(server, monkeypatch, tmp_path):
    """Point the environment at the local server, as a user would point it at OpenAI, and work
    in a fresh directory holding the sample data."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
    monkeypatch.setenv("RAGFRAME_MODEL", "fake-judge")
    monkeypatch.setenv("RAGFRAME_EMBEDDING_MODEL", "fake-embedding")
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache.sqlite3"))
    work = tmp_path / "work"
    shutil.copytree(DATA, work / "data")
    shutil.copy(DATA / "sample.parquet", work / "logs.parquet")
    monkeypatch.chdir(work)
    return server


def test_readme_examples_run(judge_env):
    readme = ROOT / "README.md"
    assert len(python_blocks(readme.read_text())) >= 1
    scored = run_page(readme)["scored"]
    assert {"faithfulness", "faithfulness_detail", "context_recall"} <= set(scored.columns)
    assert judge_env.count() > 0


@pytest.mark.parametrize(
    "page", [p for p in pages() if p.name != "README.md"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_page_examples_run(judge_env, page, request, monkeypatch):
    if page.relative_to(ROOT) in NEEDS_PHOENIX:
        # Phoenix's own server for the page; its tracer and client read this variable
        monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", request.getfixturevalue("phoenix").url)
    run_page(page)


def test_every_page_is_collected():
    """The runner sees the pages and their blocks (a broken pattern would run nothing)."""
    names = {str(p.relative_to(ROOT)) for p in pages()}
    assert {"README.md", "CONTRIBUTING.md", "docs/getting-started.md"} <= names
    found = [b for p in pages() for b in blocks(p.read_text()) if b.lang in RUN]
    assert sum(b.lang == "python" and b.no_run is None for b in found) >= 8
    assert sum(b.lang == "bash" and b.no_run is None for b in found) >= 8
    assert all(b.no_run.strip() for b in found if b.no_run is not None)


def test_the_worked_example_is_the_file():
    """Writing a metric shows tests/example_metric.py after its docstring, whole."""
    page = (ROOT / "docs" / "writing-a-metric.md").read_text()
    source = (ROOT / "tests" / "example_metric.py").read_text()
    body = source.split('"""', 2)[2].strip("\n")
    assert any(b.body.strip("\n") == body for b in blocks(page))


def test_a_failing_block_names_its_page_and_number(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nraise ValueError('rot')\n```\n")
    monkeypatch.setattr("test_docs.ROOT", tmp_path)  # names relative to the page's own root
    with pytest.raises(AssertionError, match=r"page.md, block 2 \(python\) failed: ValueError"):
        run_page(page)


def _unsupported(body: dict) -> str:
    """The fake judge's answer with every claim unsupported: faithfulness 0, a gate fails."""
    answer = json.loads(auto_answer(body))
    for verdict in answer["verdicts"]:
        verdict["supported"] = False
    return json.dumps(answer)


CONFIG_PAGE = """
```toml
# ragframe.toml
[score]
metrics = ["faithfulness", "helpfulness"]

[metric.helpfulness]
kind = "g_eval"
criteria = "Does the answer help the user?"
evaluation_steps = ["Read the answer.", "Score how much it helps."]

[gate]
fail_under = { faithfulness = 0.9 }
```

```bash
ragframe metrics
ragframe score logs.parquet --sample 3 -o scored.parquet
```
"""


def test_a_pages_ragframe_toml_is_written_for_the_commands_after_it(
    judge_env, tmp_path, monkeypatch, capsys
):
    """The page's file is in the directory its commands run in: `ragframe metrics` lists the
    file's metric, and `ragframe score` scores it and exits 1 on the file's gate (a failing gate
    is a documented outcome, as with --fail-under on the line)."""
    judge_env.handler = router(faithfulness_verify=_unsupported)
    page = tmp_path / "page.md"
    page.write_text(CONFIG_PAGE)
    monkeypatch.setattr("test_docs.ROOT", tmp_path)
    run_page(page)
    out = capsys.readouterr().out
    assert Path("ragframe.toml").read_text().startswith("# ragframe.toml\n[score]")
    assert "helpfulness  (higher is better; GEval, [metric.helpfulness] of ragframe.toml)" in out
    assert "❌ faithfulness mean 0.000 < 0.900" in out
    assert {"faithfulness", "helpfulness"} <= set(pl.read_parquet("scored.parquet").columns)


def test_only_a_gated_subcommand_may_exit_1(judge_env):
    """The page's file allows status 1 to the subcommands it gives gates, and to no other."""
    assert gated_by("[gate]\nfail_under = { faithfulness = 0.5 }\n", "ragframe.toml") == {
        "score",
        "gate",
    }
    compare = '[compare]\nfail_if_worse = ["faithfulness"]\n'
    assert gated_by(compare, "ragframe.toml") == {"compare"}
    tool = "[tool.ragframe.gate]\nmin_pass_rate = { faithfulness = 0.5 }\n"
    assert gated_by(tool, "pyproject.toml") == {"score", "gate"}
    assert gated_by('[judge]\nmodel = "m"\n[gate]\njunit = "g.xml"\n', "ragframe.toml") == set()
    # A gate of the file fails `ragframe score` (1): allowed where the file gates score only.
    judge_env.handler = router(faithfulness_verify=_unsupported)
    Path("ragframe.toml").write_text(
        '[score]\nmetrics = ["faithfulness"]\n[gate]\nfail_under = { faithfulness = 0.9 }\n'
    )
    line = "ragframe score logs.parquet --sample 2 -o s.parquet --overwrite"
    run_command(line, "page", frozenset({"score", "gate"}))
    with pytest.raises(AssertionError, match=r"page: `ragframe score .*` exited 1"):
        run_command(line, "page", frozenset({"compare"}))
