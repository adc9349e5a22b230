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
    ('[judge]\napi_key_env = "sk-live-123"\n', "[judge] api_key_env: must be the NAME"),
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
    ('[compare]\nfail_under = ["x"]\n', "[compare] fail_under: unknown key; known: on, fail_if"),
    ("[gate]\nfail_under = { faithfulnes = 0.8 }\n", "[gate] fail_under: unknown metric 'faith"),
    (
        '[score]\nmetrics = "all"\n[metric.h]\nkind = "g_eval"\ncriteria = "x"\n',
        '[metric.h] is defined but metrics = "all" scores the catalogue',
    ),
    ("x = [\n", "not valid TOML"),
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
