"""The Vega script a report inlines, and the copy of it kept beside the cache
(`ragframe.report._bundle`).

Whatever is read back from that folder goes into every report's `<script>`; the promise: a
kept copy is used only if its SHA-256 is the one pinned for this vl-convert and Vega-Lite
version and its folder and file are the user's alone. Anything else (a planted script, the
right script in a folder others can write, a symbolic link) is ignored with a warning and the
bundle rebuilt from vl-convert. vl-convert is replaced by a counting stand-in whose bundle is
pinned for the test, except in the test that checks the real pins.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

pytest.importorskip("altair", reason="the report extra is not installed")
pytest.importorskip("vl_convert", reason="the report extra is not installed")

import vl_convert

from ragframe.report import _bundle, report

#: The stand-in's bundle: as long as the real one, ending as it does.
VEGA = "/* vega */" + "x" * 200_000 + "window.vegaEmbed=e;"
#: What someone who can write the cache folder would put there.
PLANTED = "document.title='planted';" + "x" * 200_000 + "window.vegaEmbed=e;"


class Pinned(dict[tuple[str, str], str]):
    """Every version pinned to one digest (whatever vl-convert and Altair are installed)."""

    def __init__(self, digest: str) -> None:
        super().__init__()
        self.digest = digest

    def get(self, key: Any, default: Any = None) -> Any:
        return self.digest


@pytest.fixture
def built(tmp_path: Path, monkeypatch: Any) -> Iterator[list[str | None]]:
    """The cache under `tmp_path`, vl-convert's bundle replaced by `VEGA` (pinned), and the
    list of Vega-Lite versions it was asked to bundle (one entry per build)."""
    calls: list[str | None] = []

    def bundle(vl_version: str | None = None) -> str:
        calls.append(vl_version)
        return VEGA

    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache" / "cache.sqlite3"))
    monkeypatch.setattr(vl_convert, "javascript_bundle", bundle)
    monkeypatch.setattr(_bundle, "PINNED", Pinned(sha256(VEGA)))
    _bundle.vega_bundle.cache_clear()
    try:
        yield calls
    finally:
        _bundle.vega_bundle.cache_clear()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fresh() -> str:
    """The bundle as a new process gets it (the per-process memo cleared)."""
    _bundle.vega_bundle.cache_clear()
    return _bundle.vega_bundle()


def kept_file() -> Path:
    """The one kept bundle (after a first build)."""
    (kept,) = _bundle.bundle_folder().glob("vega-bundle-*.js")
    return kept


def test_kept_private_read_back_and_rebuilt_when_cut(built: list[str | None]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _bundle.vega_bundle() == VEGA and len(built) == 1
        kept = kept_file()
        assert kept.read_text() == VEGA
        assert kept.stat().st_mode & 0o777 == 0o644
        assert kept.parent.stat().st_mode & 0o777 == 0o700
        assert fresh() == VEGA and len(built) == 1  # read back, not rebuilt
    kept.write_text(VEGA[:5000])  # cut short (a full disk)
    with pytest.warns(UserWarning, match="SHA-256 is not the one ragframe pins"):
        assert fresh() == VEGA
    assert len(built) == 2 and kept.read_text() == VEGA  # rebuilt and kept again


def test_a_planted_script_is_not_inlined(built: list[str | None]) -> None:
    fresh()
    kept = kept_file()
    kept.write_text(PLANTED)  # the user's own folder and file, but not vl-convert's script
    _bundle.vega_bundle.cache_clear()
    with pytest.warns(UserWarning, match=f"{kept}.*SHA-256") as said:
        page = report(pl.DataFrame({"faithfulness": [0.2, 0.9]}))
    assert "planted" not in page and VEGA in page and len(built) == 2
    assert len(said) == 1 and "\n" not in str(said[0].message)  # one line


@pytest.mark.parametrize("where", ["folder", "file"])
def test_the_right_script_others_can_write_is_not_used(built: list[str | None], where: str) -> None:
    fresh()
    kept = kept_file()
    target = kept.parent if where == "folder" else kept
    target.chmod(0o770 if where == "folder" else 0o664)  # group-writable, content intact
    inode = kept.stat().st_ino
    assert kept.read_text() == VEGA
    with pytest.warns(UserWarning, match="can be written by others"):
        assert fresh() == VEGA
    assert len(built) == 2  # rebuilt from vl-convert, not read
    # A file that failed is replaced by a private one; a folder others write keeps nothing.
    assert (kept.stat().st_ino != inode) is (where == "file")
    assert kept.stat().st_mode & 0o777 == 0o644 and kept.read_text() == VEGA


def test_a_bundle_of_another_user_is_not_used(built: list[str | None], monkeypatch: Any) -> None:
    fresh()
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # the files now belong to someone else
    with pytest.warns(UserWarning, match=f"belongs to user id {me}, not to you"):
        assert fresh() == VEGA
    assert len(built) == 2


def test_a_symbolic_link_is_not_followed(built: list[str | None], tmp_path: Path) -> None:
    fresh()
    kept = kept_file()
    elsewhere = tmp_path / "elsewhere.js"
    elsewhere.write_text(VEGA)  # the right script, but the link could be pointed anywhere
    kept.unlink()
    kept.symlink_to(elsewhere)
    with pytest.warns(UserWarning, match="cannot be opened as a plain file"):
        assert fresh() == VEGA
    assert len(built) == 2
    assert not kept.is_symlink() and kept.read_text() == VEGA  # replaced by the user's own


def test_a_version_without_a_pin_is_rebuilt_every_time(
    built: list[str | None], monkeypatch: Any
) -> None:
    fresh()
    kept = kept_file()
    monkeypatch.setattr(_bundle, "PINNED", {})  # vl-convert's digest unknown
    kept.write_text(PLANTED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fresh() == VEGA and fresh() == VEGA
    assert len(built) == 3  # never read from the folder, whatever is there
    assert kept.read_text() == PLANTED  # and nothing written there


def test_the_pins_are_vl_converts_bundles() -> None:
    """The pin for the installed vl-convert and the Vega-Lite version Altair writes is the
    digest of what vl-convert bundles (a wrong pin would rebuild every report)."""
    from importlib.metadata import version

    import altair

    tool = version("vl-convert-python")
    vl = ".".join(str(altair.SCHEMA_VERSION).lstrip("v").split(".")[:2])
    if vl not in vl_convert.get_vegalite_versions():
        vl = "latest"
    pinned = _bundle.PINNED.get((tool, vl))
    if pinned is None:
        pytest.skip(f"vl-convert-python {tool} (Vega-Lite {vl}) has no pinned digest yet")
    real = vl_convert.javascript_bundle(vl_version=None if vl == "latest" else vl)
    assert sha256(real) == pinned


def test_the_command_line_says_it_on_one_line(
    built: list[str | None], tmp_path: Path, capsys: Any
) -> None:
    from ragframe.cli import main

    fresh()
    kept_file().parent.chmod(0o775)
    _bundle.vega_bundle.cache_clear()
    scored = tmp_path / "scored.parquet"
    pl.DataFrame({"faithfulness": [0.2, 0.9]}).write_parquet(scored)
    assert main(["report", str(scored), "-o", str(tmp_path / "report.html")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ragframe: warning: Vega's script kept in")
    assert "can be written by others" in err[0] and len(built) == 2
