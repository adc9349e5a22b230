"""The judge that answers is the judge that was named.

A model named with no API key and no base URL used to be scored by the embedded SmolLM2 judge,
recorded and priced under the name given, and gated as if that model had judged. The embedded
judge now runs only when no judge is named at all, or when it is asked for by name ("local");
anything else with nowhere to send it is a configuration error (exit 2) before anything runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import DATA
from test_local import stand_in_conversion

import ragframe
from ragframe import Judge
from ragframe.cli import main
from ragframe.errors import ConfigError
from ragframe.judge import local
from ragframe.judge.local import LOCAL_MODEL

SAMPLE = DATA / "sample.parquet"
ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL")


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No judge configured in the environment, the cache under `tmp_path`, and the embedded
    judge never started (a test that starts it fails)."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGFRAME_CACHE", raising=False)

    def never(**_: Any) -> str:
        raise AssertionError("the embedded judge was started")

    monkeypatch.setattr(local, "start_local_judge", never)
    return monkeypatch


# --------------------------------------------------------------------------- Python


@pytest.mark.parametrize(
    ("key", "given"), [(None, None), ("", None), (" ", None), (None, ""), (None, "  ")]
)
def test_a_named_model_with_no_endpoint_is_refused(
    bare: pytest.MonkeyPatch, key: Any, given: Any
) -> None:
    """`Judge("gpt-4o-mini")` with no key, the empty one a missing CI secret gives, or an
    empty `api_key=` (`os.environ.get("MY_KEY", "")`)."""
    if key is not None:
        bare.setenv("OPENAI_API_KEY", key)
    with pytest.raises(ConfigError) as err:
        Judge("gpt-4o-mini", api_key=given, cache=False)
    text = str(err.value)
    assert "\n" not in text and "'gpt-4o-mini'" in text
    assert "set OPENAI_API_KEY" in text and "--base-url" in text and "--model local" in text


def test_ragframe_model_names_a_judge(bare: pytest.MonkeyPatch) -> None:
    """$RAGFRAME_MODEL names a model as `model=` does; empty, it counts as unset."""
    bare.setenv("RAGFRAME_MODEL", "gpt-4o")
    with pytest.raises(ConfigError, match=r"^\$RAGFRAME_MODEL names the judge 'gpt-4o'"):
        Judge(cache=False)
    bare.setenv("RAGFRAME_MODEL", "")
    assert Judge(cache=False).local
    bare.setenv("RAGFRAME_MODEL", "local")
    assert Judge(cache=False).local
    bare.setenv("RAGFRAME_MODEL", "gpt-4o")
    bare.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    judge = Judge(cache=False)
    assert (judge.model, judge.endpoint_host, judge.local) == ("gpt-4o", "api.openai.com", False)


def test_evaluate_refuses_before_any_request(bare: pytest.MonkeyPatch) -> None:
    """`evaluate` without a judge builds one from the environment: refused there too."""
    bare.setenv("RAGFRAME_MODEL", "gpt-4o-mini")
    frame = pl.read_parquet(SAMPLE).head(2)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        ragframe.evaluate(frame, ["faithfulness"])


@pytest.mark.parametrize(
    "env", [{}, {"OPENAI_API_KEY": "sk-test"}, {"OPENAI_BASE_URL": "http://h/v1"}]
)
def test_the_embedded_judge_is_named_by_local(
    bare: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """`Judge("local")` is the embedded judge whatever the environment points at; its
    metadata names it, at its endpoint, with no price."""
    for name, value in env.items():
        bare.setenv(name, value)
    judges = [Judge("local", cache=False)]
    if "OPENAI_BASE_URL" in env:  # its own name at a base URL: a server of yours serving it
        assert Judge(LOCAL_MODEL, cache=False).endpoint_host == "h"
    else:  # its own name, as the metadata records it, with nowhere else to go
        judges.append(Judge(LOCAL_MODEL, cache=False))
    for judge in judges:
        assert judge.local and judge.price is None
        described = judge.describe()
        assert (described["model"], described["endpoint_host"]) == (LOCAL_MODEL, "local")


def test_no_judge_named_is_the_embedded_judge(bare: pytest.MonkeyPatch) -> None:
    judge = Judge(cache=False)
    assert judge.local and judge.model == LOCAL_MODEL and judge.price is None
    assert judge.describe()["endpoint_host"] == "local"
    assert Judge(cache=False, max_cost=1.0).max_cost == 1.0  # nothing to spend, not refused


def test_a_named_model_is_the_model_that_answers(bare: pytest.MonkeyPatch) -> None:
    bare.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    bare.setenv("RAGFRAME_EMBEDDING_MODEL", " ")  # blank: unset, OpenAI's default
    assert Judge(cache=False).embedding_model == "text-embedding-3-small"
    judge = Judge("gpt-4o-mini", cache=False)
    assert not judge.local and judge.price == (0.15, 0.60)
    assert judge.describe()["model"] == "gpt-4o-mini"
    assert judge.describe()["endpoint_host"] == "api.openai.com"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "local", "base_url": "http://127.0.0.1:1/v1"}, "takes no base URL"),
        ({"model": ""}, r"^model is empty"),
        ({"model": "  "}, r"^model is empty"),
        ({"model": "m", "base_url": ""}, r"^base_url is empty"),
    ],
)
def test_contradictory_or_empty_names_are_refused(
    bare: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Judge(**kwargs, cache=False)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("temperature", 1e308),
        ("temperature", 2.0001),
        ("seed", 99999999999999999999),
        ("seed", 2**63),
    ],
)
def test_settings_beyond_what_servers_accept_are_refused(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"^{setting} must be"):
        Judge("m", base_url="http://127.0.0.1:1/v1", api_key="k", cache=False, **{setting: value})


def test_the_bounds_themselves_are_accepted() -> None:
    judge = Judge(
        "m",
        base_url="http://127.0.0.1:1/v1",
        api_key="k",
        cache=False,
        temperature=2,
        seed=2**63 - 1,
    )
    assert (judge.temperature, judge.seed) == (2, 2**63 - 1)


# --------------------------------------------------------------------------- command line


@pytest.mark.parametrize("key", [None, ""])
def test_score_with_a_named_model_and_no_key_exits_2_having_done_nothing(
    bare: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: Any,
) -> None:
    """The reviewer's command: exit 2, one line saying what to set; no output, no cache, no
    embedded judge started."""
    if key is not None:
        bare.setenv("OPENAI_API_KEY", key)
    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    args = ["score", str(SAMPLE), "-o", str(out), "--cache", str(cache), "--no-progress"]
    status = main([*args, "--model", "gpt-4o-mini", "--fail-under", "faithfulness=0.8"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "set OPENAI_API_KEY" in captured.err and "--model local" in captured.err
    assert not out.exists() and not cache.exists()


def test_the_refusal_comes_before_the_input_is_read(
    bare: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.parquet"
    status = main(["score", str(tmp_path / "missing.parquet"), "-o", str(out), "--model", "gpt-4o"])
    assert status == 2 and "OPENAI_API_KEY" in capsys.readouterr().err


def test_ragframe_model_counts_on_the_command_line(
    bare: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare.setenv("RAGFRAME_MODEL", "gpt-4o-mini")
    out = tmp_path / "out.parquet"
    assert main(["score", str(SAMPLE), "-o", str(out), "--dry-run"]) == 2
    assert "$RAGFRAME_MODEL" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("flags", [[], ["--model", "local"]])
def test_the_embedded_judge_runs_unnamed_or_named_local(
    bare: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
) -> None:
    """The README's command with no key and no model still uses the embedded judge (a dry
    run: nothing started), under its own name and with no price."""
    bare.setenv("OPENAI_BASE_URL", "")  # empty: unset
    out = tmp_path / "out.parquet"
    assert main(["score", str(SAMPLE), "-o", str(out), "--dry-run", *flags]) == 0
    printed = capsys.readouterr().out
    assert f"on {LOCAL_MODEL}" in printed and "$" not in printed and not out.exists()


@pytest.mark.parametrize(("flag", "value"), [("--temperature", "1e308"), ("--temperature", "2.5")])
def test_cli_refuses_a_temperature_no_server_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    out = tmp_path / "out.parquet"
    args = ["score", str(SAMPLE), "-o", str(out), "--base-url", "http://127.0.0.1:1/v1"]
    assert main([*args, "--model", "m", flag, value]) == 2
    assert "temperature must be from 0 to 2" in capsys.readouterr().err and not out.exists()


def test_metadata_names_the_judge_that_answered(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named model at an endpoint: the output records that model at that endpoint's host."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    out = tmp_path / "out.parquet"
    args = ["score", str(SAMPLE), "-o", str(out), "--metrics", "context_recall", "--no-cache"]
    args += ["--no-progress", "--base-url", server.base_url, "--model", "named-judge"]
    assert main(args) == 0
    judge = ragframe.read_metadata(out)["judge"]
    host = server.base_url.split("//")[1].split("/")[0]
    assert (judge["model"], judge["endpoint_host"], judge["local"]) == ("named-judge", host, False)
    assert {body["model"] for body in server.chat_requests} == {"named-judge"}


def test_the_reviewers_command_in_a_fresh_process(tmp_path: Path) -> None:
    """`env -u OPENAI_API_KEY ragframe score ... --model gpt-4o-mini --fail-under ...`, as run."""
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    command, gate = (
        [sys.executable, "-m", "ragframe.cli", "score"],
        ["--fail-under", "faithfulness=0.8"],
    )
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = tmp_path / "out.parquet"
    done = subprocess.run(
        [*command, str(SAMPLE), "-o", str(out), "--model", "gpt-4o-mini", *gate],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "OPENAI_API_KEY" in done.stderr
    assert not out.exists() and not (tmp_path / "xdg").exists()


# --------------------------------------------------------------------------- the weights


@pytest.fixture
def conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """`_weights` with a stand-in source and conversion (`test_local.stand_in_conversion`)."""
    return stand_in_conversion(monkeypatch, tmp_path)


def plant(folder: Path, mode: int) -> Path:
    """Weights planted in `folder` (made `mode`) with their digest recorded beside them, as
    a conversion would leave them."""
    name = f"{local._GGUF_NAME.removesuffix('.Q4_1.gguf')}.Q4_0.14.gguf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"PLANTED")
    local._write_digest(folder / name, hashlib.sha256(b"PLANTED").hexdigest())
    folder.chmod(mode)
    return folder / name


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_weights_planted_in_a_cache_folder_others_can_write_are_not_loaded(
    conversion: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    """XDG_CACHE_HOME on a shared folder: another user wrote weights and their digest where
    the converted file is looked for. They are not loaded; ours are made in a private folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "shared"))
    planted = plant(tmp_path / "shared" / "ragframe" / "models", mode)
    path = local._weights()
    assert path.read_bytes() == b"CONVERTED source weights" and len(conversion) == 1
    assert path.parent == tmp_path / "tmp" / f"ragframe-models-{os.getuid()}"
    assert planted.read_bytes() == b"PLANTED"  # left alone, never loaded


def test_weights_under_a_folder_others_can_rename_are_not_loaded(
    conversion: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private models folder inside a folder anyone may write (no sticky bit) could be
    swapped for another between the check and the load: not used. With the sticky bit (as
    /tmp has), others cannot rename what is ours: used."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    assert local._weights().parent == tmp_path / "tmp" / f"ragframe-models-{os.getuid()}"
    shared.chmod(0o1777)
    assert local._weights().parent == shared / "ragframe" / "models"


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs chown (root)")
def test_weights_owned_by_another_user_are_not_loaded(
    conversion: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder, or a file in our folder, that another user owns (mode 0700/0600 or not)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models = tmp_path / "cache" / "ragframe" / "models"
    planted = plant(models, 0o700)
    os.chown(models, 65534, -1)
    assert local._weights().parent == tmp_path / "tmp" / f"ragframe-models-{os.getuid()}"
    os.chown(models, 0, -1)  # our folder again, the planted file another user's
    os.chown(planted, 65534, -1)
    path = local._weights()
    assert path == planted and path.read_bytes() == b"CONVERTED source weights"
