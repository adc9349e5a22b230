"""Files a CI job reads: JUnit XML (the test tab of GitHub's test reporters, GitLab's
`artifacts:reports:junit`, Jenkins), JSON, and a GitHub-flavoured Markdown summary (for
`$GITHUB_STEP_SUMMARY`), written from any result that says what it checked.

A result (`GateResult`, `RegressionCheck`) gives its checks as `Case`s, its JSON as a dict and
its Markdown as text; this module turns them into files that never break their format: text
of any kind (a judge's reason with `<`, `&`, quotes, `|`, newlines or control characters) is
escaped for XML by ElementTree after the characters XML 1.0 forbids are replaced, and for a
Markdown table cell by `markdown_cell`. Files are written atomically (a temporary file, then
renamed), their folder made if missing, whether the checks passed or not.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragframe.errors import ConfigError, InputError

__all__ = ["STDOUT", "Case", "CiFiles", "junit_xml", "markdown_cell", "markdown_table", "write"]

#: The path that means "print it" (`--markdown -`).
STDOUT = "-"
#: Characters XML 1.0 cannot hold at all, even escaped (C0 controls but tab, newline and
#: carriage return; lone surrogates; U+FFFE and U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Case:
    """One check as a JUnit test case: `classname` ("ragframe.gate.faithfulness"), `name`
    ("faithfulness mean >= 0.8"), whether it passed, the one-line `message` of its failure and
    the failure's `text` (the figure, the interval, the worst rows). `skipped`: a check that
    could not tell and did not fail (too few rows), written as JUnit's `<skipped>` with its
    `message`, the warning a CI test tab shows."""

    classname: str
    name: str
    ok: bool
    message: str = ""
    text: str = ""
    skipped: bool = False


def xml_text(text: str) -> str:
    """`text` with the characters XML 1.0 forbids shown as `\\x1b` (ElementTree escapes the
    rest, `<`, `&` and quotes, but would write these as they are: a file no reader parses)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(
    suite: str,
    cases: Sequence[Case],
    *,
    seconds: float = 0.0,
    properties: Mapping[str, Any] | None = None,
) -> str:
    """A JUnit XML document: `<testsuites>` holding one `<testsuite name=suite>` with its
    counts, one `<testcase>` per case, a `<failure>` in each failed one and a `<skipped>` in
    each skipped one (one that passed without telling: its message is a warning). The checks run
    together in one read, so `seconds` is the suite's time and each case gets an equal share."""
    failures = sum(not c.ok for c in cases)
    skipped = sum(c.ok and c.skipped for c in cases)
    share = seconds / len(cases) if cases else 0.0
    counts = {
        "tests": str(len(cases)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", {"name": "ragframe", **counts})
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    node = ET.SubElement(
        root,
        "testsuite",
        {"name": suite, **counts, "timestamp": stamp, "hostname": xml_text(socket.gethostname())},
    )
    if properties:
        props = ET.SubElement(node, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", {"name": key, "value": xml_text(str(value))})
    for case in cases:
        element = ET.SubElement(
            node,
            "testcase",
            {
                "classname": xml_text(case.classname),
                "name": xml_text(case.name),
                "time": f"{share:.3f}",
            },
        )
        if not case.ok:
            failure = ET.SubElement(
                element,
                "failure",
                {"message": xml_text(" ".join(case.message.split())), "type": "failed"},
            )
            failure.text = xml_text(case.text or case.message)
        elif case.skipped:
            ET.SubElement(element, "skipped", {"message": xml_text(" ".join(case.message.split()))})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def markdown_cell(text: Any) -> str:
    """`text` safe in a GitHub-flavoured Markdown table cell: `\\` and `|` escaped (so a pipe
    never splits the cell), `&`, `<` and `>` as entities (so a reason is never read as HTML),
    line breaks as `<br>` (so a row never ends early), other control characters dropped."""
    text = "" if text is None else str(text)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = re.sub(r"\r\n|\r|\n", "<br>", text)
    return _NOT_XML.sub("", text.replace("\t", " ")).strip()


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A GitHub-flavoured Markdown table, every cell escaped by `markdown_cell`."""
    lines = ["| " + " | ".join(markdown_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]
    return lines


class CiFiles:
    """What a result needs to be written as CI files: `cases()` (JUnit), `to_dict()` (JSON),
    `to_markdown()`, and the suite's name and time; `write` and `to_junit` come with it."""

    suite: str = "ragframe"

    def cases(self) -> list[Case]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_markdown(self) -> str:
        raise NotImplementedError

    def _seconds(self) -> float:
        return 0.0

    def _properties(self) -> dict[str, Any]:
        return {}

    def to_junit(self) -> str:
        """The checks as a JUnit XML document (one test case per check)."""
        return junit_xml(
            self.suite, self.cases(), seconds=self._seconds(), properties=self._properties()
        )

    def write(
        self,
        *,
        junit: str | Path | None = None,
        json: str | Path | None = None,
        markdown: str | Path | None = None,
    ) -> list[str]:
        """Write the JUnit XML, JSON and Markdown files asked for (`"-"` prints one instead);
        the paths written. Call it whether the checks passed or not: CI uploads them either
        way."""
        return write(self, junit=junit, json=json, markdown=markdown)


def write(
    result: CiFiles,
    *,
    junit: str | Path | None = None,
    json: str | Path | None = None,
    markdown: str | Path | None = None,
) -> list[str]:
    """`result.write(...)`: each file asked for, atomically; an unwritable path is an
    InputError naming the option and the path, the same path twice a ConfigError."""
    asked = {"junit": junit, "json": json, "markdown": markdown}
    given = {k: str(v) for k, v in asked.items() if v is not None and str(v) != ""}
    check_paths(given)
    makers = {
        "junit": result.to_junit,
        "json": lambda: _json_text(result.to_dict()),
        "markdown": result.to_markdown,
    }
    written = []
    for kind, path in given.items():
        text = makers[kind]()
        if path == STDOUT:
            print(text, end="" if text.endswith("\n") else "\n")
            continue
        _atomic_write(Path(path), text, kind)
        written.append(path)
    return written


def check_paths(given: Mapping[str, str]) -> None:
    """No two outputs to one path, and at most one printed (`-`)."""
    seen: dict[str, str] = {}
    for kind, path in given.items():
        key = path if path == STDOUT else os.path.abspath(path)
        if key in seen:
            where = "stdout ('-')" if path == STDOUT else repr(path)
            raise ConfigError(
                f"--{seen[key]} and --{kind} both write to {where}: give each its own file"
            )
        seen[key] = kind


def _json_text(data: Mapping[str, Any]) -> str:
    """Strict JSON (a NaN or infinity, which JSON cannot hold, as null)."""
    return json.dumps(_finite(data), ensure_ascii=False, indent=2, default=str) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _atomic_write(path: Path, text: str, kind: str) -> None:
    """`text` to `path` (UTF-8) through a temporary file in the same folder, renamed over it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise InputError(
            f"cannot write the --{kind} file {str(path)!r} ({reason}); give a path in a folder "
            "you may write to"
        ) from exc
