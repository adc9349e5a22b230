"""CI files of the gates: JUnit XML a CI's test tab reads (checked against the rules CI tools
rely on, after ElementTree parses it back), JSON with stable keys, and a Markdown table that
no reason can break; written by `ragframe gate` and `ragframe score` whether the gates pass or
fail, with the exit statuses unchanged."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import markdown
import polars as pl
import pytest

from ragframe import cli
from ragframe.cli import gate as gate_cli
from ragframe.decide.ci_files import markdown_cell, xml_text
from ragframe.decide.gates import GateResult, check_gates
from ragframe.errors import ConfigError
from ragframe.testing.server import FakeServer

CLAIMS = pl.List(pl.Struct({"claim": pl.String, "supported": pl.Boolean, "reason": pl.String}))
DETAIL = pl.Struct({"claims": CLAIMS, "error": pl.String})
#: A judge's reason with everything that breaks XML or a Markdown table.
NASTY = "says <b>\"x\" & 'y'</b> | not | in\ncontext \x1b[31mred\x00 \\| end"


def scored() -> pl.DataFrame:
    """Four rows: faithfulness 1.0, 0.25 (a nasty reason), null (failed to score), 0.75;
    hallucination all low (a passing lower-is-better gate)."""

    def claims(*verdicts: tuple[str, bool, str]) -> list[dict[str, Any]]:
        return [{"claim": c, "supported": s, "reason": r} for c, s, r in verdicts]

    return pl.DataFrame(
        {
            "id": ["q1", "q2", "q3", "q4"],
            "faithfulness": [1.0, 0.25, None, 0.75],
            "faithfulness_detail": [
                {"claims": claims(("Paris is in France.", True, "ctx 1")), "error": None},
                {"claims": claims(("The moon | cheese.", False, NASTY)), "error": None},
                {"claims": None, "error": "timed out after 3 attempts"},
                {"claims": claims(("Rome is in Italy.", False, "no context")), "error": None},
            ],
            "hallucination": [0.0, 0.1, 0.0, 0.2],
        },
        schema_overrides={"faithfulness_detail": DETAIL},
    )


def gates(**extra: Any) -> GateResult:
    return check_gates(
        scored(),
        fail_under={"faithfulness": 0.8, "hallucination": 0.3},
        min_pass_rate={"faithfulness": 0.5},
        **extra,
    )


# ------------------------------------------------------------------------------ JUnit XML


def check_junit_rules(text: str) -> ET.Element:
    """Parse the document back and check what CI tools need of it: a <testsuites> root whose
    counts are its suites' sums; each <testsuite> named, its tests / failures / errors /
    skipped equal to its test cases and their <failure> / <error> / <skipped> children, a
    non-negative time and an ISO timestamp; each <testcase> with a classname, a name and a
    time; a <failure> has a message and sits only in a test case (at most one per case)."""
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites and all(child.tag == "testsuite" for child in root)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        cases = suite.findall("testcase")
        assert suite.get("name")
        counted = {
            "tests": len(cases),
            "failures": sum(len(c.findall("failure")) for c in cases),
            "errors": sum(len(c.findall("error")) for c in cases),
            "skipped": sum(len(c.findall("skipped")) for c in cases),
        }
        for key, value in counted.items():
            assert int(suite.get(key, "0")) == value, (key, suite.attrib)
            totals[key] += value
        assert float(suite.get("time", "-1")) >= 0
        assert "T" in suite.get("timestamp", "")
        for case in cases:
            assert case.get("classname") and case.get("name")
            assert float(case.get("time", "-1")) >= 0
            failures = case.findall("failure")
            assert len(failures) <= 1
            assert all(f.get("message") for f in failures)
            tags = [child.tag for child in case]
            assert set(tags) <= {"failure", "skipped", "system-out", "system-err"}
            assert not {"failure", "skipped"} <= set(tags)  # failed or skipped, not both
            assert all(s.get("message") for s in case.findall("skipped"))
    for key, value in totals.items():
        assert int(root.get(key, "0")) == value, key
    assert not root.findall(".//testsuite//testsuite") and not root.findall(".//failure/*")
    return root


def test_junit_has_a_case_per_gate_and_a_failure_only_in_failed_ones() -> None:
    result = gates()
    root = check_junit_rules(result.to_junit())
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "ragframe gates"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == [
        "faithfulness mean >= 0.8",
        "hallucination mean <= 0.3",
        "faithfulness pass rate >= 0.5",
    ]
    assert cases["faithfulness mean >= 0.8"].get("classname") == "ragframe.gate.faithfulness"
    names = result.table["metric"] + " " + result.table["gate"]
    ok = dict(zip(names, result.table["ok"], strict=True))
    assert ok == {
        "faithfulness mean": False,
        "hallucination mean": True,
        "faithfulness pass rate": True,
    }
    failed = [name for name, case in cases.items() if case.find("failure") is not None]
    assert failed == ["faithfulness mean >= 0.8"]
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    failure = cases["faithfulness mean >= 0.8"].find("failure")
    assert failure is not None
    message = failure.get("message", "")
    # the figure, the line, n and the interval, on one line
    assert message.startswith("faithfulness mean 0.500 < 0.800 (n=4; 95% interval [")
    assert "\n" not in message
    body = failure.text or ""
    assert "row 2 (id q3): no score - failed to score: timed out after 3 attempts" in body
    assert "row 1 (id q2): 0.250" in body and "row 3 (id q4): 0.750" in body


def test_junit_escapes_any_reason_and_still_parses() -> None:
    """<, &, quotes survive as themselves; control characters XML cannot hold are shown as
    \\x1b (ElementTree alone would write them raw: a file no CI tool can read)."""
    with pytest.raises(ET.ParseError):  # what ElementTree alone would have written
        element = ET.Element("failure", {"message": NASTY})
        element.text = NASTY
        ET.fromstring(ET.tostring(element))
    text = gates().to_junit()
    root = check_junit_rules(text)
    failure = root.find(".//failure")
    assert failure is not None
    body = failure.text or ""
    assert "says <b>\"x\" & 'y'</b> | not | in\ncontext \\x1b[31mred\\x00 \\| end" in body
    assert xml_text("a\x00b\x0bc\td\ne\ud800") == "a\\x00b\\x0bc\td\ne\\xd800"


def test_junit_time_attributes_add_up() -> None:
    result = gates()
    root = check_junit_rules(result.to_junit())
    suite = root.find("testsuite")
    assert suite is not None
    times = [float(c.get("time", "0")) for c in suite.findall("testcase")]
    assert result.seconds > 0
    assert float(suite.get("time", "0")) == pytest.approx(round(result.seconds, 3))
    assert sum(times) == pytest.approx(result.seconds, abs=0.002)


# ------------------------------------------------------------------------------ JSON


def test_json_has_stable_keys_passed_and_the_worst_rows() -> None:
    data = json.loads(
        json.dumps(gates().to_dict()),
        parse_constant=lambda c: pytest.fail(f"not JSON: {c}"),
    )
    assert list(data) == [
        "version",
        "passed",
        "gates",
        "failed",
        "source",
        "level",
        "ignore_failed",
        "id_column",
        "results",
    ]
    assert data["passed"] is False and data["gates"] == 3 and data["failed"] == 1
    first = data["results"][0]
    assert first["name"] == "faithfulness mean >= 0.8" and first["ok"] is False
    assert first["value"] == pytest.approx(0.5) and first["ci_low"] < 0.5 < first["ci_high"]
    assert [w["id"] for w in first["worst"]] == ["q3", "q2", "q4"]
    assert first["worst"][0] == {
        "row": 2,
        "id": "q3",
        "score": None,
        "pass": None,
        "why": "failed to score: timed out after 3 attempts",
    }
    assert all(r["worst"] == [] for r in data["results"][1:])
    passing = check_gates(scored(), fail_under={"faithfulness": 0.1}).to_dict()
    assert passing["passed"] is True and passing["failed"] == 0


def test_json_results_count_passing_rows_apart_from_the_boolean_passed() -> None:
    """The table's `passed` (a count of rows, null for a mean gate) is `passing_rows` in the
    JSON: beside the top-level Boolean `passed`, a result's `passed: 3` read as a verdict."""
    result = check_gates(scored(), min_pass_rate={"faithfulness": 0.9})
    rows = result.to_dict()["results"]
    assert all("passed" not in r for r in rows)
    assert [r["passing_rows"] for r in rows] == result.table["passed"].to_list()
    assert isinstance(rows[0]["passing_rows"], int)


@pytest.mark.parametrize("name", ["scored.parquet", 'it\'s \\ "odd".parquet'])
def test_json_and_junit_name_the_source_without_quotes(tmp_path: Path, name: str) -> None:
    """The path as a file names it (`"source": "/x/scored.parquet"`), not Python's repr of it
    (`"'/x/scored.parquet'"`), which the messages keep to show where a name ends."""
    path = tmp_path / name
    scored().write_parquet(path)
    result = check_gates(str(path), fail_under={"faithfulness": 0.8})
    assert result.to_dict()["source"] == str(path)
    root = ET.fromstring(result.to_junit().encode("utf-8"))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["source"] == str(path)
    assert check_gates(scored(), fail_under={"faithfulness": 0.8}).to_dict()["source"] == (
        "the frame"
    )


# ------------------------------------------------------------------------------ Markdown


class Cells(HTMLParser):
    """The rows of every table of an HTML page, as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rendered_tables(text: str) -> list[list[list[str]]]:
    """The tables of GitHub-flavoured Markdown as Python-Markdown's tables extension (the
    site's) renders them."""
    parser = Cells()
    parser.feed(markdown.markdown(text, extensions=["tables"]))
    return parser.tables


def test_markdown_table_one_row_per_gate_then_the_worst_rows_unbroken() -> None:
    text = gates().to_markdown()
    assert text.startswith("### ragframe gates: ❌ 1 of 3 gates failed")
    summary, worst = rendered_tables(text)
    assert summary[0] == ["", "metric", "gate", "value", "required", "95% interval", "n", "notes"]
    assert [row[:5] for row in summary[1:]] == [
        ["❌", "faithfulness", "mean", "0.500", "≥ 0.800"],
        ["✅", "hallucination", "mean", "0.075", "≤ 0.300"],
        ["✅", "faithfulness", "pass rate", "50.0%", "≥ 50.0%"],
    ]
    assert summary[1][5].startswith("[") and summary[3][5] == "-"
    assert all(len(row) == 8 for row in summary)
    assert worst[0] == ["row", "id", "score", "why"]
    assert all(len(row) == 4 for row in worst)
    assert [row[1] for row in worst[1:]] == ["q3", "q2", "q4"]
    # the reason whole in its cell: pipes, the newline, markup and a backslash as written
    reason = worst[2][3]
    assert '"The moon | cheese."' in reason
    assert "says <b>\"x\" & 'y'</b> | not | in\ncontext" in reason and "\\| end" in reason
    assert "#### ❌ faithfulness mean >= 0.8: worst rows" in text


def test_markdown_cell_escapes_what_breaks_a_table() -> None:
    assert markdown_cell("a|b") == "a\\|b"
    assert markdown_cell("a\\|b") == "a\\\\\\|b"
    assert markdown_cell("x\r\ny\nz") == "x<br>y<br>z"
    assert markdown_cell("<img src=x>") == "&lt;img src=x&gt;"
    assert markdown_cell(None) == "" and markdown_cell(0.5) == "0.5"


# ------------------------------------------------------------------------------ the CLI


@pytest.fixture
def scored_path(tmp_path: Path) -> Path:
    path = tmp_path / "scored.parquet"
    scored().write_parquet(path)
    return path


@pytest.mark.parametrize("mean, status", [(0.8, 1), (0.4, 0)], ids=["fails", "passes"])
def test_gate_writes_the_three_files_whether_it_passes_or_fails(
    scored_path: Path, tmp_path: Path, mean: float, status: int, capsys: Any
) -> None:
    out = tmp_path / "reports" / "new"  # a folder that does not exist yet
    argv = ["gate", str(scored_path), "--fail-under", f"faithfulness={mean}"]
    argv += ["--junit", str(out / "g.xml"), "--json", str(out / "g.json")]
    argv += ["--markdown", str(out / "g.md")]
    assert cli.main(argv) == status
    printed = capsys.readouterr().out
    assert ("gates passed" if status == 0 else "1 gate failed") in printed
    root = check_junit_rules((out / "g.xml").read_text())
    assert root.get("failures") == str(status)
    assert json.loads((out / "g.json").read_text())["passed"] is (status == 0)
    mark = "✅" if status == 0 else "❌"
    assert rendered_tables((out / "g.md").read_text())[0][1][0] == mark
    assert sorted(p.name for p in out.iterdir()) == ["g.json", "g.md", "g.xml"]  # no temporaries


def test_markdown_to_stdout_moves_the_table_to_stderr(scored_path: Path, capsys: Any) -> None:
    argv = ["gate", str(scored_path), "--fail-under", "faithfulness=0.8", "--markdown", "-"]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("### ragframe gates: ❌ 1 of 1 gates failed")
    assert "1 gate failed (of 1)" in captured.err and "gates on" not in captured.out


@pytest.mark.parametrize(
    "files, said",
    [
        (["--junit", "{d}/x", "--json", "{d}/x"], "--junit and --json both write to"),
        (["--json", "-", "--markdown", "-"], "--json and --markdown both write to stdout"),
        (["--junit", "{scored}"], "would overwrite"),
        (["--junit", "{scored}/x.xml"], "cannot write the --junit file"),
    ],
    ids=["same-file", "two-stdout", "the-input", "unwritable"],
)
def test_bad_ci_file_paths_exit_2_on_one_line(
    scored_path: Path, tmp_path: Path, files: list[str], said: str, capsys: Any
) -> None:
    files = [f.format(d=tmp_path, scored=scored_path) for f in files]
    before = scored_path.read_bytes()
    assert cli.main(["gate", str(scored_path), "--fail-under", "faithfulness=0.1", *files]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err
    assert scored_path.read_bytes() == before


def test_the_options_on_another_command_write_the_files(tmp_path: Path, capsys: Any) -> None:
    """What `ragframe score` uses (add_gate_options, check_gate_options, gate_exit): the
    files come with the gates, and without a gate they are refused before the run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-o", "--output")
    gate_cli.add_gate_options(parser)
    frame = pl.DataFrame({"faithfulness": [0.9, 0.7]})
    junit = tmp_path / "score.xml"
    args = parser.parse_args(["--fail-under", "faithfulness=0.85", "--junit", str(junit)])
    assert (args.junit, args.json_out, args.markdown) == (str(junit), None, None)
    gate_cli.check_gate_options(args, ["faithfulness"])
    assert gate_cli.gate_exit(args, frame) == 1
    assert check_junit_rules(junit.read_text()).get("failures") == "1"
    alone = parser.parse_args(["--junit", str(junit)])
    with pytest.raises(ConfigError, match="no gate is given"):
        gate_cli.check_gate_options(alone, ["faithfulness"])
    printed = parser.parse_args(["--fail-under", "faithfulness=0.5", "--markdown", "-"])
    with pytest.raises(ConfigError, match="give --junit / --json / --markdown a file"):
        gate_cli.check_gate_options(printed, ["faithfulness"])
    clash = parser.parse_args(["--fail-under", "faithfulness=0.5", "-o", "o.pq", "--json", "o.pq"])
    with pytest.raises(ConfigError, match=r"would overwrite 'o\.pq'"):
        gate_cli.check_gate_options(clash, ["faithfulness"])


def test_score_writes_the_junit_file_with_its_gate(
    tmp_path: Path, server: FakeServer, capsys: Any
) -> None:
    """`ragframe score ... --fail-under ... --junit FILE` end to end, with the scripted judge."""
    source = tmp_path / "log.parquet"
    pl.DataFrame(
        {
            "question": ["What is fact 1?", "What is fact 2?"],
            "answer": ["Fact 1 is true.", "Fact 2 is true."],
            "contexts": [["Fact 1 is true."], ["Fact 2 is true."]],
        }
    ).write_parquet(source)
    out, junit, md = tmp_path / "out.parquet", tmp_path / "s.xml", tmp_path / "s.md"
    argv = ["score", str(source), "-o", str(out), "--metrics", "faithfulness", "--model", "m"]
    argv += ["--base-url", server.base_url, "--no-progress", "--no-cache"]
    status = cli.main([*argv, "--fail-under", "faithfulness=0", "--junit", str(junit)])
    assert status == 0, capsys.readouterr().err
    root = check_junit_rules(junit.read_text())
    assert root.get("tests") == "1" and root.get("failures") == "0"
    assert root.find(".//testcase").get("name") == "faithfulness mean >= 0"  # type: ignore[union-attr]
    sent = server.count()
    out.unlink()
    refused = [*argv, "--markdown", str(md)]  # a CI file with no gate: refused, nothing sent
    assert cli.main(refused) == 2
    assert "no gate is given" in capsys.readouterr().err
    assert server.count() == sent and not md.exists() and not out.exists()
