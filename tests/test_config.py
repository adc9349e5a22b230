"""Issue 28: `ragframe.toml` (or pyproject's [tool.ragframe]) holds the judge, the metrics
(G-Eval and rubrics), thresholds, gates and columns, so CI needs no Python. Every key is
checked before anything is read or sent (one line naming file, section and key; exit 2), and
a flag on the command line wins over the file."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import reply, router, system_text, task_name

from ragframe.cli import build_parser, main
from ragframe.cli import config as cfg


def log(folder: Path, n: int = 3) -> Path:
    path = folder / "log.parquet"
    pl.DataFrame(
        {
            "prompt": [f"question {i}?" for i in range(n)],
            "answer": [f"answer {i}." for i in range(n)],
            "contexts": [[f"context {i}."] for i in range(n)],
            "ground_truth": [f"truth {i}." for i in range(n)],
        }
    ).write_parquet(path)
    return path


def judge_table(server, **extra: str) -> str:
    lines = [
        "[judge]",
        'model = "fake-judge"',
        f'base_url = "{server.base_url}"',
        'api_key_env = "H7_TEST_KEY"',
        "cache = false",
        "progress = false",
        *[f"{k} = {v}" for k, v in extra.items()],
    ]
    return "\n".join(lines) + "\n"


GOOD = """
[score]
metrics = ["context_recall", "helpfulness", "correctness"]
columns = { question = "prompt" }
thresholds = { context_recall = 0.5 }

[metric.helpfulness]
kind = "g_eval"
criteria = "Does the answer help the user with the question?"
evaluation_steps = ["Read the question.", "Read the answer.", "Decide how much it helps."]
inputs = ["question", "answer"]
threshold = 0.6

[metric.correctness]
kind = "rubric"
rubric = { 1 = "Wrong.", 2 = "Partly right.", 3 = "Right." }
inputs = ["question", "answer", "ground_truth"]

[gate]
fail_under = { helpfulness = 0.5 }
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A working directory of its own, with the key the file names in the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("H7_TEST_KEY", "sk-from-the-environment")
    monkeypatch.delenv("RAGFRAME_MODEL", raising=False)
    return tmp_path


def scripted(server, g_eval_score: int) -> None:
    server.handler = router(
        g_eval_score=reply({"reason": "scripted", "score": g_eval_score}),
        rubric_score_score=reply({"reason": "scripted", "level": 3}),
    )


def test_g_eval_and_rubric_from_the_file_score_and_gate(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    scripted(server, g_eval_score=5)
    assert main(["score", str(log(folder)), "-o", "out.parquet"]) == 0
    captured = capsys.readouterr()
    assert "ragframe: using ragframe.toml" in captured.err
    out = pl.read_parquet(folder / "out.parquet")
    assert out["helpfulness"].to_list() == [1.0, 1.0, 1.0]  # 5 on 1..5
    assert out["correctness"].to_list() == [1.0, 1.0, 1.0]  # level 3 on 1..3
    assert out["context_recall"].null_count() == 0  # columns: question = "prompt"
    asked = {task_name(r.body): r for r in server.requests if r.path.endswith("/completions")}
    assert "Does the answer help the user" in system_text(asked["g_eval_score"].body)
    assert "Partly right." in system_text(asked["rubric_score_score"].body)
    assert "g_eval_steps" not in asked  # the file's steps are used as given
    # The key came from the variable api_key_env names; the file holds no secret.
    auth = {r.headers.get("authorization") for r in server.requests}
    assert auth == {"Bearer sk-from-the-environment"}


def test_a_gate_in_the_file_fails_the_run_with_status_1(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    scripted(server, g_eval_score=2)  # (2 - 1) / 4 = 0.25 < 0.5
    assert main(["score", str(log(folder)), "-o", "out.parquet"]) == 1
    assert "helpfulness" in capsys.readouterr().out
    assert (folder / "out.parquet").exists()
    # `ragframe gate` reads the same gates from the file: no flag needed.
    assert main(["gate", "out.parquet"]) == 1
    # A command-line gate wins over the file's.
    assert main(["gate", "out.parquet", "--fail-under", "helpfulness=0.2"]) == 0


def test_the_command_line_wins_over_the_file(folder, server):
    (folder / "ragframe.toml").write_text(
        judge_table(server, concurrency="2", timeout="7.5") + "[score]\nsample = 2\n"
    )

    def parsed(*argv: str):
        parser = build_parser()
        args = parser.parse_args(["score", "log.parquet", *argv])
        return cfg.apply(parser, args, ["score", "log.parquet", *argv])

    from_file = parsed()
    assert (from_file.concurrency, from_file.timeout, from_file.sample) == (2, 7.5, 2)
    assert from_file.no_cache is True and from_file.no_progress is True
    # A flag given its parser default still wins (16 and 120 are the defaults).
    given = parsed("--concurrency", "16", "--timeout", "120", "--sample", "3")
    assert (given.concurrency, given.timeout, given.sample) == (16, 120.0, 3)
    # --cache FILE turns the cache the file turned off back on.
    assert parsed("--cache", "c.sqlite3").no_cache is False
    # --no-config: the file is not read at all.
    ignored = parsed("--no-config")
    assert (ignored.concurrency, ignored.sample) == (16, None)


def test_command_line_metrics_may_name_the_files_metrics(server, folder):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    scripted(server, g_eval_score=5)
    source = str(log(folder))
    assert main(["score", source, "-o", "out.parquet", "--metrics", "helpfulness"]) == 0
    assert "helpfulness" in pl.read_parquet("out.parquet").columns
    assert "context_recall" not in pl.read_parquet("out.parquet").columns


def test_pyproject_tool_table_is_found(server, folder, capsys):
    text = "[project]\nname = 'x'\n\n" + _tool_table(judge_table(server) + GOOD)
    (folder / "pyproject.toml").write_text(text)
    scripted(server, g_eval_score=5)
    assert main(["score", str(log(folder)), "-o", "out.parquet"]) == 0
    assert "using pyproject.toml [tool.ragframe]" in capsys.readouterr().err
    assert "helpfulness" in pl.read_parquet("out.parquet").columns
    # Its errors name the table as it is written there.
    (folder / "pyproject.toml").write_text(text + "\n[tool.ragframe.gate2]\n")
    assert main(["score", "log.parquet", "-o", "o2.parquet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ragframe: error: pyproject.toml: [tool.ragframe] unknown section [gate2]; "
        "did you mean 'gate'?"
    )


def _tool_table(text: str) -> str:
    """Every table header of a ragframe.toml moved under [tool.ragframe]."""
    return "\n".join(
        "[tool.ragframe." + line[1:] if line.startswith("[") else line for line in text.splitlines()
    )


def test_a_pyproject_without_the_table_is_no_configuration(folder, server):
    (folder / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.ruff]\nline-length = 1\n")
    assert cfg.find_config(None) is None


#: (file text, the one line's expected tail after "ragframe: error: ragframe.toml: ").
BAD = [
    ('[judge]\napi_key = "sk-live-123"\n', "[judge] api_key: a secret never goes in the file"),
    ('[judge]\nbase_url = "https://u:pw@host/v1"\n', "[judge] base_url: holds a password"),
    ('[judgee]\nmodel = "m"\n', "unknown section [judgee]; did you mean 'judge'?"),
    ("[judge]\nconcurency = 3\n", "[judge] concurency: unknown key; did you mean 'concurrency'?"),
    ("[judge]\nconcurrency = 0\n", "[judge] concurrency: must be a whole number from 1"),
    ('[judge]\ntimeout = "fast"\n', "[judge] timeout: must be a finite number above 0, got 'fast'"),
    ("[judge]\nprice = [0.1]\n", "[judge] price: must be [prompt, completion]"),
    ('[score]\nmetrics = ["faithfulnes"]\n', "[score] metrics: unknown metric 'faithfulnes'; did"),
    ('[score]\nmetrics = ["g_eval"]\n', "[score] metrics: G-Eval needs your criteria"),
    ("[score]\nmetrics = []\n", "[score] metrics: is empty"),
    ("[score]\ncolumns = { question = 3 }\n", "[score] columns: question: must be a non-empty"),
    ("[score]\nthresholds = { faithfulness = 1.5 }\n", "[score] thresholds: faithfulness: must"),
    ('[score]\nfrom = "csv"\n', "[score] from: must be one of openinference"),
    (
        '[score]\nmetrics = ["faithfulness"]\n[gate]\nfail_under = { context_recall = 0.8 }\n',
        "[gate] fail_under: names 'context_recall', which this file does not score",
    ),
    ('[score]\nmetrics = ["faithfulness"]\n[gate]\nmin_pass_rate = 0.9\n', "[gate] min_pass_rate"),
    ('[metric.h]\nkind = "g_eval"\ncriteria = 3\n', "[metric.h] criteria: must be a non-empty"),
    ('[metric.h]\nkind = "g_eval"\n', "[metric.h] criteria: missing: G-Eval needs criteria"),
    ('[metric.h]\ncriteria = "x"\n', '[metric.h] kind: missing: say what it is, kind = "g_eval"'),
    ('[metric.h]\nkind = "geval"\n', "[metric.h] kind: unknown kind 'geval'; did you mean"),
    (
        '[metric.h]\nkind = "g_eval"\ncriteria = "x"\nscore_range = [5, 1]\n',
        "[metric.h] score_range: must be two integers lo < hi",
    ),
    (
        '[metric.h]\nkind = "g_eval"\ncriteria = "x"\ninputs = ["answr"]\n',
        "[metric.h] inputs: unknown inputs ['answr']",
    ),
    ('[metric.r]\nkind = "rubric"\n', "[metric.r] rubric: missing"),
    ('[metric.r]\nkind = "rubric"\nrubric = { one = "x" }\n', "[metric.r] rubric: levels are"),
    ('[metric.faithfulness]\nmax_claims = "many"\n', "[metric.faithfulness] max_claims: must"),
    ("[metric.faithfulness]\nmax_claimz = 3\n", "[metric.faithfulness] max_claimz: unknown key"),
    ("[metric.faithfulness]\nmax_claims = 0\n", "[metric.faithfulness] max_claims: must be a"),
    ('[metric.mine]\nkind = "faithfulness"\n', "[metric.mine] kind: a catalogue metric keeps"),
    ("[metric.faithfulness]\nthreshold = 2\n", "[metric.faithfulness] threshold: must be a number"),
    (
        '[metric.h]\nkind = "g_eval"\ncriteria = "x"\n[score]\nmetrics = ["faithfulness"]\n',
        "[metric.h] is defined but [score] metrics does not list it",
    ),
    (
        '[score]\nmetrics = ["faithfulness"]\n[compare]\nfail_if_worse = ["hallucination"]\n',
        "[compare] fail_if_worse: names 'hallucination', which this file does not score",
    ),
    ("[compare]\nmargin = 1\n", "[compare] margin: must be a number from 0 up to"),
    ('[compare]\nfail_if_wrose = ["x"]\n', "[compare] fail_if_wrose: unknown key; did you mean"),
    (
        '[compare]\nfail_under = ["x"]\n',
        "[compare] fail_under: unknown key; known: on, by, fail_if",
    ),
    ("[gate]\nfail_under = { faithfulnes = 0.8 }\n", "[gate] fail_under: unknown metric 'faith"),
    (
        '[score]\nmetrics = "all"\n[metric.h]\nkind = "g_eval"\ncriteria = "x"\n',
        '[metric.h] is defined but metrics = "all" scores the catalogue',
    ),
    ("x = [\n", "not valid TOML"),
    ("[judge]\napi_key_env = 3\n", "[judge] api_key_env: must be the NAME"),
    (
        "[score]\nthresholds = { hallucination = 0.5 }\n",
        "[score] thresholds: names 'hallucination', which this file does not score (with no "
        "[score] metrics it scores faithfulness, answer_relevancy, context_precision, "
        "context_recall); add it to [score] metrics",
    ),
    (
        "[gate]\nfail_under = { hallucination = 0.2 }\n",
        "[gate] fail_under: names 'hallucination', which this file does not score",
    ),
    (
        '[score]\nthresholds = { helpfulness = 0.9 }\n[metric.helpfulness]\nkind = "g_eval"\n'
        'criteria = "x"\nthreshold = 0.3\n',
        "[score] thresholds: names 'helpfulness', whose table [metric.helpfulness] sets its "
        "threshold too; keep one of the two",
    ),
    (
        '[score]\nstrict = ["faithfulness"]\n[metric.faithfulness]\nthreshold = 0.3\n',
        "[score] strict: names 'faithfulness', whose table [metric.faithfulness] sets its",
    ),
    (
        '[score]\ncolumns = { questoin = "prompt" }\n',
        "[score] columns: 'questoin' is not a ragframe input; did you mean 'question'?",
    ),
    (
        '[metric.question]\nkind = "g_eval"\ncriteria = "x"\n',
        "[metric.question] is named like the input 'question': its score column would clash",
    ),
]


@pytest.mark.parametrize(("text", "said"), BAD, ids=[b[1][:40] for b in BAD])
def test_every_bad_key_is_one_line_naming_file_section_and_key(server, folder, capsys, text, said):
    (folder / "ragframe.toml").write_text(text)
    missing = str(folder / "not-there.parquet")  # never read: the file is refused first
    assert main(["score", missing, "-o", "out.parquet", "--base-url", server.base_url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"ragframe: error: ragframe.toml: {said}"), err
    assert "not-there" not in err
    assert server.requests == []
    assert not (folder / "out.parquet").exists()


def test_the_file_named_by_config_is_read_and_a_missing_one_refused(server, folder, capsys):
    (folder / "ci.toml").write_text("[judge]\nconcurency = 3\n")
    assert main(["score", "log.parquet", "-o", "o.parquet", "--config", "ci.toml"]) == 2
    assert "ci.toml: [judge] concurency: unknown key" in capsys.readouterr().err
    assert main(["gate", "o.parquet", "--config", "nope.toml"]) == 2
    assert "--config nope.toml: no such file" in capsys.readouterr().err


def test_a_key_env_that_is_not_set_is_refused_before_anything_is_sent(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    log(folder)
    import os

    del os.environ["H7_TEST_KEY"]  # monkeypatch restores it
    assert main(["score", "log.parquet", "-o", "out.parquet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "[judge] api_key_env: the environment variable H7_TEST_KEY is not set" in err
    assert server.requests == []


def test_g_eval_named_on_the_command_line_says_how_to_define_it(server, folder, capsys):
    argv = ["score", "log.parquet", "-o", "o.parquet", "--metrics", "g_eval"]
    assert main([*argv, "--base-url", server.base_url, "--model", "m"]) == 2
    err = capsys.readouterr().err
    assert '[metric.helpfulness] with kind = "g_eval"' in err and "ragframe.toml" in err
    assert 'GEval(name=..., criteria="...")' in err
    assert server.requests == []


def test_the_dry_run_counts_the_files_metrics(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    log(folder)
    assert main(["score", "log.parquet", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 3 rows x (context_recall 1 + G-Eval 1 with given steps + rubric 1).
    assert "estimate: 9 requests" in out
    assert server.requests == []


def test_the_files_metric_options_and_thresholds_reach_the_output(server, folder):
    text = judge_table(server) + GOOD + "\n[metric.context_recall]\nthreshold = 0.9\n"
    text = text.replace("thresholds = { context_recall = 0.5 }\n", "")
    (folder / "ragframe.toml").write_text(text)
    scripted(server, g_eval_score=5)
    assert main(["score", str(log(folder)), "-o", "out.parquet"]) == 0
    meta = pl.read_parquet_metadata(folder / "out.parquet")
    recorded = json.dumps(meta)
    assert "0.9" in recorded and "0.6" in recorded  # context_recall's and helpfulness's


def test_compare_takes_its_regression_check_from_the_file(folder, server):
    (folder / "ragframe.toml").write_text(
        '[compare]\non = ["id", "run"]\nfail_if_worse = ["faithfulness"]\nmargin = 0.05\n'
    )

    def parsed(*argv: str):
        parser = build_parser()
        line = ["compare", "a.parquet", "b.parquet", *argv]
        return cfg.apply(parser, parser.parse_args(line), line)

    from_file = parsed()
    assert (from_file.on, from_file.fail_if_worse, from_file.margin) == (
        "id,run",
        "faithfulness",
        0.05,
    )
    given = parsed("--margin", "0", "--on", "id")  # 0 is the flag's default: it still wins
    assert (given.on, given.margin) == ("id", 0.0)


def test_a_gate_of_the_file_on_a_metric_the_command_line_dropped_is_refused(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD)
    log(folder)
    argv = ["score", "log.parquet", "-o", "out.parquet", "--metrics", "context_recall"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        "ragframe: error: ragframe.toml: [gate] fail_under: names 'helpfulness', which this "
        "run does not score (--metrics context_recall)"
    )
    assert server.requests == []
    # Given on the command line, the gate replaces the file's: the run goes on.
    assert main([*argv, "--fail-under", "context_recall=0"]) == 0


def test_every_judge_key_reaches_the_judge(folder, server):
    (folder / "ragframe.toml").write_text(
        judge_table(server)
        + 'embedding_model = "emb"\nconcurrency = 3\ntemperature = 0.5\n'
        + "requests_per_minute = 60\ntokens_per_minute = 9000\ntimeout = 9\n"
        + "retry_failed = true\nreasons = false\nfail_fast = true\nmax_cost = 1.5\n"
        + "price = [0.15, 0.6]\nmax_text_chars = 1000\nseed = 7\nmax_attempts = 2\n"
    )
    from ragframe.cli.options import judge_from_args

    parser = build_parser()
    line = ["score", "log.parquet", "-o", "o.parquet"]
    judge = judge_from_args(cfg.apply(parser, parser.parse_args(line), line))
    assert judge.model == "fake-judge" and judge.base_url.startswith(server.base_url)
    assert judge._api_key == "sk-from-the-environment"
    assert (judge.embedding_model, judge.concurrency, judge.temperature) == ("emb", 3, 0.5)
    assert (judge.requests_per_minute, judge.tokens_per_minute) == (60.0, 9000.0)
    assert (judge.timeout, judge.retry_failed, judge.reasons, judge.fail_fast) == (
        9.0,
        True,
        False,
        True,
    )
    assert (judge.max_cost, judge.price, judge.max_text_chars) == (1.5, (0.15, 0.6), 1000)
    assert (judge.seed, judge.max_attempts, judge.cache_path, judge.progress) == (
        7,
        2,
        None,
        False,
    )


def test_metrics_lists_the_files_metrics_marked_as_the_files(folder, capsys):
    text = GOOD + "\n[metric.faithfulness]\nmax_claims = 7\nstrict = true\n"
    text = text.replace('"correctness"]', '"correctness", "faithfulness"]')
    (folder / "ragframe.toml").write_text(text)
    assert main(["metrics"]) == 0
    captured = capsys.readouterr()
    assert "ragframe: using ragframe.toml" in captured.err
    catalogue, _, own = captured.out.partition("\nDefined in ragframe.toml")
    assert "helpfulness" not in catalogue  # the file's metrics stand apart, under its name
    assert "helpfulness  (higher is better; GEval, [metric.helpfulness] of ragframe.toml)" in own
    assert "criteria: Does the answer help the user with the question?" in own
    assert "inputs: question, answer\n" in own and "passes at: 0.6" in own
    assert "correctness  (higher is better; RubricScore, [metric.correctness] of" in own
    assert "rubric: 1 = Wrong.; 2 = Partly right.; 3 = Right." in own
    assert "inputs: question, ground_truth, answer" in own
    assert "faithfulness  (higher is better; Faithfulness, [metric.faithfulness] of" in own
    assert "passes at: strict" in own
    # --json: the catalogue's entries, then the file's, each saying where it is defined.
    assert main(["metrics", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    mine = {e["name"]: e for e in entries if e["defined_in"] is not None}
    assert list(mine) == ["helpfulness", "correctness", "faithfulness"]
    assert mine["helpfulness"]["class"] == "GEval"
    assert mine["helpfulness"]["required_inputs"] == ["question", "answer"]
    assert mine["helpfulness"]["defined_in"] == "[metric.helpfulness] of ragframe.toml"
    assert mine["helpfulness"]["settings"]["threshold"] == 0.6
    assert mine["faithfulness"]["settings"]["max_claims"] == 7
    assert mine["correctness"]["required_inputs"] == ["question", "ground_truth", "answer"]
    catalogue_entries = [e for e in entries if e["defined_in"] is None]
    assert len(catalogue_entries) == len(entries) - 3
    # pyproject's table is named as it is written there; --no-config lists the catalogue alone.
    (folder / "ragframe.toml").unlink()
    (folder / "pyproject.toml").write_text(_tool_table(GOOD))
    assert main(["metrics"]) == 0
    out = capsys.readouterr().out
    assert "\nDefined in pyproject.toml [tool.ragframe] (`ragframe score` scores them" in out
    assert "GEval, [tool.ragframe.metric.helpfulness] of pyproject.toml)" in out
    assert main(["metrics", "--no-config"]) == 0
    assert "helpfulness" not in capsys.readouterr().out


def test_metrics_refuses_a_bad_file_naming_its_key(folder, capsys):
    (folder / "ragframe.toml").write_text('[metric.h]\nkind = "geval"\n')
    assert main(["metrics"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragframe: error: ragframe.toml: [metric.h] kind: unknown kind"), err
    assert len(err.splitlines()) == 1


def test_the_docs_quote_the_real_message_of_a_bad_key(server, folder, capsys):
    """docs/exit-status.md (status 2) and docs/configuration.md show a bad key's line as the
    command prints it, so neither can drift from the message."""
    (folder / "ragframe.toml").write_text("[judge]\nconcurency = 3\n")
    assert main(["score", "log.parquet", "-o", "o.parquet"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("ragframe: error: ragframe.toml: [judge] concurency: "), line
    docs = Path(__file__).resolve().parent.parent / "docs"
    assert f"`{line.removeprefix('ragframe: error: ')}`" in (docs / "exit-status.md").read_text()
    assert f"\n{line}\n" in (docs / "configuration.md").read_text()


#: A valid value for every key of every section (a key added without one fails the test).
EVERY_KEY = {
    "judge": {
        "model": '"m"',
        "base_url": '"http://127.0.0.1:9/v1"',
        "api_key_env": '"H7_TEST_KEY"',
        "embedding_model": '"e"',
        "concurrency": "2",
        "temperature": "0",
        "requests_per_minute": "60",
        "tokens_per_minute": "9000",
        "timeout": "5",
        "cache": "false",
        "retry_failed": "true",
        "reasons": "false",
        "fail_fast": "true",
        "progress": "false",
        "max_cost": "1",
        "price": "[0.1, 0.2]",
        "max_text_chars": "100",
        "seed": "3",
        "max_attempts": "2",
    },
    "score": {
        "metrics": '["faithfulness"]',
        "columns": '{ question = "prompt" }',
        "thresholds": "{ faithfulness = 0.7 }",
        "strict": '["faithfulness"]',
        "sample": "2",
        "seed": "1",
        "repeats": "1",
        "chunk_rows": "10",
        "calibration": '["cal.json"]',
        "from": '"auto"',
    },
    "gate": {
        "fail_under": "{ faithfulness = 0.5 }",
        "min_pass_rate": "{ faithfulness = 0.5 }",
        "ignore_failed": "true",
        "worst": "1",
        "junit": '"gates.xml"',
        "json": '"gates.json"',
        "markdown": '"gates.md"',
    },
    "compare": {
        "on": '"id"',
        "by": '["topic"]',
        "fail_if_worse": '["faithfulness"]',
        "margin": "0.05",
        "level": "0.9",
        "ignore_failed": "true",
        "fail_if_unknown": "true",
        "junit": '"compare.xml"',
        "markdown": '"compare.md"',
    },
}


def test_every_key_of_every_section_reaches_every_reader(folder):
    """Each reader takes every key of its sections as an option's default (a key mapped to
    an option the subcommand lacks, like [gate] worst for score once, crashed the run)."""
    for section, keys in (
        ("judge", cfg.JUDGE_KEYS),
        ("score", cfg.SCORE_KEYS),
        ("gate", cfg.GATE_KEYS),
        ("compare", cfg.COMPARE_KEYS),
    ):
        assert set(EVERY_KEY[section]) == set(keys), section
    text = "".join(
        f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
        for section, keys in EVERY_KEY.items()
    )
    (folder / "ragframe.toml").write_text(text)
    lines = {
        "score": ["score", "log.parquet", "-o", "o.parquet"],
        "gate": ["gate", "o.parquet"],
        "compare": ["compare", "a.parquet", "b.parquet"],
        "generate": ["generate", "docs", "-o", "t.parquet", "-n", "3"],
        "metrics": ["metrics"],
    }
    assert set(lines) == set(cfg.READERS)
    for line in lines.values():
        parser = build_parser()
        args = cfg.apply(parser, parser.parse_args(line), line)
        assert args.config is not None or line == ["metrics"]
        if "gate" in cfg.READERS[args.command]:
            assert (args.worst, args.junit, args.json_out) == (1, "gates.xml", "gates.json")
        if args.command == "compare":
            assert (args.by, args.ignore_failed, args.fail_if_unknown) == ("topic", True, True)
        if "judge" in cfg.READERS[args.command]:
            assert args.concurrency == int(EVERY_KEY["judge"]["concurrency"]), args.command
    assert args.command == "metrics"


def test_the_files_worst_lists_that_many_rows_in_scores_gate_table(server, folder, capsys):
    (folder / "ragframe.toml").write_text(judge_table(server) + GOOD + "worst = 1\n")
    scripted(server, g_eval_score=2)  # every row fails the helpfulness gate
    assert main(["score", str(log(folder)), "-o", "out.parquet"]) == 1
    out = capsys.readouterr().out
    assert out.count("scripted") == 1, out  # one worst row, with its reason


def test_a_broken_pyproject_with_our_table_is_refused_naming_the_toml_error(folder, capsys):
    """Ignoring it would drop its gates: a failing gate would become a green build."""
    (folder / "pyproject.toml").write_text(
        "[project]\nname = 'x'\nversion = \n\n[tool.ragframe.gate]\nfail_under = { a = 0.5 }\n"
    )
    assert main(["gate", "out.parquet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "ragframe: error: pyproject.toml: not valid TOML (Invalid value (at line 3"
    ), err
    assert "[tool.ragframe] cannot be read" in err and len(err.splitlines()) == 1
    # Without our table, a broken pyproject.toml is not ours to refuse.
    (folder / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = \n[tool.ruff]\n")
    assert cfg.find_config(None) is None
    assert main(["gate", "out.parquet", "--no-config", "--fail-under", "a=0.5"]) == 2
    assert "pyproject" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "value", ["sk-proj-abcdef123456", "sk_live_abcdef123456", "abcdef0123456789abcdef0123456789ab"]
)
def test_a_key_pasted_as_api_key_env_is_never_echoed(folder, capsys, value):
    (folder / "ragframe.toml").write_text(f'[judge]\napi_key_env = "{value}"\n')
    assert main(["score", "log.parquet", "-o", "o.parquet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragframe: error: ragframe.toml: [judge] api_key_env: must be the NAME")
    assert "never the key" in err and "not shown" in err
    assert value not in err and value[:8] not in err


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HF_TOKEN", "MY_KEY"])
def test_a_variable_name_is_taken_as_api_key_env(name):
    say = lambda m: cfg.ConfigError(m)  # noqa: E731
    assert cfg._env_name(name, say) == name


def test_compare_takes_by_from_the_file_and_json_has_no_file_form(folder, capsys):
    (folder / "ragframe.toml").write_text(
        '[compare]\nby = ["topic"]\nfail_if_worse = ["faithfulness"]\n'
    )
    parser = build_parser()
    line = ["compare", "a.parquet", "b.parquet"]
    assert cfg.apply(parser, parser.parse_args(line), line).by == "topic"
    capsys.readouterr()
    (folder / "ragframe.toml").write_text('[compare]\njson = "c.json"\n')
    assert main(line) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ragframe: error: ragframe.toml: [compare] json: --json prints the comparison to stdout "
        "and has no file form here; give it on the command line (ragframe compare A B --json > "
        "compare.json)"
    )


def test_the_gate_takes_a_metric_tables_threshold_and_strict(folder, capsys):
    pl.DataFrame({"helpfulness": [0.4, 0.4, 0.4], "faithfulness": [0.9, 0.9, 0.9]}).write_parquet(
        folder / "out.parquet"
    )
    (folder / "ragframe.toml").write_text(
        '[metric.helpfulness]\nkind = "g_eval"\ncriteria = "x"\nthreshold = 0.3\n'
        "[metric.faithfulness]\nstrict = true\n"
        "[gate]\nmin_pass_rate = { helpfulness = 1.0 }\n"
    )
    assert main(["gate", "out.parquet"]) == 0  # 0.4 passes at 0.3 (it fails at 0.5)
    capsys.readouterr()
    text = (folder / "ragframe.toml").read_text()
    (folder / "ragframe.toml").write_text(
        text.replace("{ helpfulness = 1.0 }", "{ helpfulness = 1.0, faithfulness = 1.0 }")
    )
    assert main(["gate", "out.parquet"]) == 1  # 0.9 is not perfect: strict fails it
    assert "faithfulness" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[compare]\njunit = "c.xml"\n',
            "[compare] junit: is for the regression check, but no metric is checked: add "
            'fail_if_worse = ["metric"] to [compare]',
        ),
        ("[compare]\nmargin = 0.1\n", "[compare] margin: is for the regression check"),
        ("[compare]\nfail_if_unknown = true\n", "[compare] fail_if_unknown: is for the"),
    ],
)
def test_a_compare_key_that_needs_fail_if_worse_names_the_files_key(folder, capsys, text, said):
    (folder / "ragframe.toml").write_text(text)
    assert main(["compare", "a.parquet", "b.parquet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ragframe: error: ragframe.toml: {said}"), err
    assert "--junit" not in err.split("(or")[0] and "--margin" not in err
    # The command line's metric makes the file's key meaningful: no refusal for it.
    parser = build_parser()
    line = ["compare", "a.parquet", "b.parquet", "--fail-if-worse", "faithfulness"]
    cfg.apply(parser, parser.parse_args(line), line)


@pytest.mark.parametrize("command", ["gate", "score"])
def test_a_gate_file_with_no_gate_names_the_files_key(folder, capsys, command):
    (folder / "ragframe.toml").write_text('[gate]\njunit = "gates.xml"\n')
    assert main([command, "log.parquet", "-o", "o.parquet"][: 2 if command == "gate" else 4]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "ragframe: error: ragframe.toml: [gate] junit: writes the gates' results, but no gate is "
        "given: add fail_under"
    ), err
    assert not (folder / "gates.xml").exists()


def test_config_and_no_config_together_are_refused(folder, capsys):
    (folder / "ragframe.toml").write_text("[judge]\nconcurrency = 3\n")
    assert main(["gate", "o.parquet", "--config", "ragframe.toml", "--no-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ragframe: error: --config ragframe.toml and --no-config contradict each other: drop one"
    )


def test_config_naming_a_pyproject_without_our_table_is_refused(folder, capsys):
    (folder / "sub").mkdir()
    (folder / "sub" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert main(["gate", "o.parquet", "--config", "sub/pyproject.toml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ragframe: error: --config sub/pyproject.toml: it has no [tool.ragframe] table; add "
        "one, or name a ragframe.toml"
    )


def test_a_files_ignore_failed_is_undone_on_the_command_line(folder):
    """The command line wins over the file for a switch too: `--no-ignore-failed` turns off
    the file's `ignore_failed = true` (a store_true option could only turn it on)."""
    (folder / "ragframe.toml").write_text(
        "[gate]\nfail_under = { faithfulness = 0.5 }\nignore_failed = true\n"
    )
    for line, expected in (
        (["gate", "o.parquet"], True),
        (["gate", "o.parquet", "--no-ignore-failed"], False),
    ):
        parser = build_parser()
        args = cfg.apply(parser, parser.parse_args(line), line)
        assert args.ignore_failed is expected, line
    (folder / "ragframe.toml").write_text(
        '[compare]\non = "id"\nfail_if_worse = ["faithfulness"]\nignore_failed = true\n'
        "fail_if_unknown = true\n"
    )
    for line, expected in (
        (["compare", "a.parquet", "b.parquet"], True),
        (
            ["compare", "a.parquet", "b.parquet", "--no-ignore-failed", "--no-fail-if-unknown"],
            False,
        ),
    ):
        parser = build_parser()
        args = cfg.apply(parser, parser.parse_args(line), line)
        assert (args.ignore_failed, args.fail_if_unknown) == (expected, expected), line
