"""MkDocs hooks: the pages generated from the code, so they cannot drift from it.

- one page per metric, from `ragframe.catalog()` (each metric's `MetricInfo`, direction and
  required inputs) and the class's docstring, plus the overview table on `metrics/index.md`;
- the command-line reference, from `ragframe.cli.build_parser()`;
- the table of which run path honours which option, from `ragframe.engine.spec.PATHS`.

They are virtual files (`File.generated`), built on every `mkdocs build` and never committed.
"""

from __future__ import annotations

import argparse
import inspect
import re
from typing import Any

from mkdocs.structure.files import File, Files

import ragframe
from ragframe.cli import build_parser

METRICS_DIR = "metrics"
CLI_PAGE = "cli.md"
TABLE_MARKER = "<!-- generated: metric table -->"
PATHS_MARKER = "<!-- generated: run paths -->"


def _metric_class(row: dict[str, Any]) -> type:
    return getattr(ragframe, row["class"])


def _metric_rows() -> list[dict[str, Any]]:
    return ragframe.catalog().to_dicts()


def metric_page(row: dict[str, Any]) -> str:
    """One metric's page: what `ragframe metrics` says about it, then its docstring."""
    cls = _metric_class(row)
    inputs = ", ".join(f"`{c}`" for c in row["required_inputs"]) or "the metrics it combines"
    better = "higher" if row["direction"] == "higher" else "**lower**"
    doc = inspect.cleandoc(cls.__doc__ or "")
    lines = [
        f"# `{row['name']}`",
        "",
        row["description"],
        "",
        "| | |",
        "| --- | --- |",
        f"| formula | {cell(row['formula'])} |",
        f"| better | {better} |",
        f"| requests per row | {cell(row['requests_per_row'])} |",
        f"| needs | {inputs} |",
        f"| empty input | {cell(row['empty_input'])} |",
        f"| source | {linked(cell(row['source']))} |",
        f"| uses an LLM / embeddings | {_yes(row['uses_llm'])} / {_yes(row['uses_embeddings'])} |",
        f"| how to ask for it | `{row['how']}` (class `ragframe.{row['class']}`) |",
        "",
        "Generated from the metric's `info` (`MetricInfo`) and its class by `docs/hooks.py`;",
        "`ragframe metrics` prints the same catalogue.",
        "",
        "## The class's own description",
        "",
        "```text",
        doc,
        "```",
        "",
    ]
    return "\n".join(lines)


def metric_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| metric | better | formula | requests per row | needs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        needs = ", ".join(row["required_inputs"]) or "the metrics it combines"
        better = "higher" if row["direction"] == "higher" else "**lower**"
        out.append(
            f"| [`{row['name']}`]({row['name']}.md) | {better} | {cell(row['formula'])} "
            f"| {cell(row['requests_per_row'])} | {needs} |"
        )
    return "\n".join(out)


def cell(value: str) -> str:
    """A value as a Markdown table cell: a `|` in a formula must not end the cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


#: A web address in a metric's source, up to the bracket or punctuation that closes it.
_URL = re.compile(r"https?://[^\s()<>;,]+[^\s()<>;,.]")


def linked(text: str) -> str:
    """Every web address in `text` as a link (the catalogue cites its sources by address)."""
    return _URL.sub(lambda m: f"<{m.group(0)}>", text)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.option_strings and action.nargs != 0 and action.metavar:
            name += f" {action.metavar}"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{default}`"
        help_text = (action.help or "").replace("%(default)s", str(default)).replace("%%", "%")
        help_text = help_text.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {shown} | {help_text} |")
    return rows


def _command_section(name: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        out += [parser.description, ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    out += _options_table(parser)
    out.append("")
    if parser.epilog:
        out += [f"*{parser.epilog.strip()}*", ""]
    for sub_name, sub in _subparsers(parser).items():
        out += _command_section(f"{name} {sub_name}", sub, min(level + 1, 4))
    return out


def cli_page() -> str:
    """Every subcommand's usage, options with defaults and help, and its exit statuses."""
    parser = build_parser()
    out = [
        "# Command line",
        "",
        "Generated from `ragframe.cli.build_parser()` by `docs/hooks.py`, so it lists what",
        "`ragframe COMMAND --help` prints. Exit statuses are on [Exit statuses](exit-status.md).",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    for name, sub in _subparsers(parser).items():
        out += _command_section(f"ragframe {name}", sub, 2)
    return "\n".join(out)


def paths_table() -> str:
    """One row per option of a run, one column per path: honoured, or refused before any
    request (`ragframe.engine.spec.PATHS` and `FLAGS`)."""
    from ragframe.engine.spec import FLAGS, PATHS

    score = _subparsers(build_parser()).get("score")
    on_cli = {o for a in score._actions for o in a.option_strings} if score else set()
    paths = list(PATHS)
    out = [
        "| option (Python) | `ragframe score` | " + " | ".join(paths) + " |",
        "| --- | --- | " + " | ".join("---" for _ in paths) + " |",
    ]
    for name, flag in FLAGS.items():
        cli = f"`{flag}`" if flag in on_cli else "–"
        cells = ["yes" if name in PATHS[p] else "refused" for p in paths]
        out.append(f"| `{name}` | {cli} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def on_config(config):
    """Fill the Metrics section of the navigation with one page per metric."""
    pages = [f"{METRICS_DIR}/{row['name']}.md" for row in _metric_rows()]
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Metrics" in entry:
            entry["Metrics"] = [f"{METRICS_DIR}/index.md", *pages]
    return config


def on_files(files: Files, config) -> Files:
    for row in _metric_rows():
        path = f"{METRICS_DIR}/{row['name']}.md"
        files.append(File.generated(config, path, content=metric_page(row)))
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if TABLE_MARKER in markdown:
        markdown = markdown.replace(TABLE_MARKER, metric_table(_metric_rows()))
    if PATHS_MARKER in markdown:
        markdown = markdown.replace(PATHS_MARKER, paths_table())
    return markdown
