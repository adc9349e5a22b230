"""The Vega script every report inlines, and the copy of it kept between runs.

Bundling Vega, Vega-Lite and vega-embed with vl-convert takes seconds, so a copy is kept in
a `vega` folder beside ragframe's cache. Whatever is read back goes into every report's
`<script>`, so a cache folder others can write (the Ray docs suggest a shared one) would let
them put script into every report. A kept copy is therefore used only when

- its folder and the file are this user's and neither group nor others can write them, and
- its SHA-256 is the one pinned below for this vl-convert and Vega-Lite version.

Anything else is ignored, with a warning saying why, and the bundle is rebuilt from
vl-convert. A version without a pinned digest is rebuilt every time, never read from a file;
so is every version where owners cannot be checked (Windows).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import warnings
from functools import lru_cache
from pathlib import Path

from ragframe.judge.private_files import make_private_dirs
from ragframe.report._deps import need

#: Whether owners and modes can be checked, on a folder opened once (POSIX): else nothing is
#: kept or read.
CHECKABLE = hasattr(os, "getuid") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd

#: SHA-256 of `vl_convert.javascript_bundle(vl_version=V)` (its text, UTF-8), per
#: (vl-convert-python version, V; "latest" for None), for every release the `report` extra
#: allows (>= 1.7), computed from each release's Linux wheel. To pin a new vl-convert release:
#: `python -c "import hashlib, vl_convert as v; print(hashlib.sha256(
#: v.javascript_bundle(vl_version='6.4').encode()).hexdigest())"` for each version it lists.
PINNED: dict[tuple[str, str], str] = {
    ("1.7.0", "5.8"): "eda01712af9d9c81eb358543ae07ace2586a271ee97ac6c66e3ed596be3ae36a",
    ("1.7.0", "5.14"): "26671d36549a75227f988930b97d48814cf71a2a757560977e9a038beb8038e6",
    ("1.7.0", "5.15"): "2271b2d20af29e501370b87f5d48f1fafbd9e0a201de861c245fb6b2ad004d7d",
    ("1.7.0", "5.16"): "8c84ae39a0b0eb3c3843a0021f9d1a802123ddc8c09ee67250cdd6d7a0ac852c",
    ("1.7.0", "5.17"): "8fc7963717f97e7af16c03a8bdabbf9e6790f0112ead5ee68ba5e6b2877705b3",
    ("1.7.0", "5.18"): "1064f09a838a9aa4e2f34f628ad8609311c01251ddc9d34e68945a4c78a1a177",
    ("1.7.0", "5.19"): "9ee4ff46d820a1e66e597dd60972bf783b0e83699afeda2cc92e30fbfe337d62",
    ("1.7.0", "5.20"): "38f0a244090484ae2dda6fdcc42dc50b4c35fe04f1e0525bd6004a72dba21592",
    ("1.7.0", "5.21"): "92d4a4f00b4aa942512304efb42b0ec17d93486a2a5a999b70a8d532c2f7b964",
    ("1.7.0", "latest"): "92d4a4f00b4aa942512304efb42b0ec17d93486a2a5a999b70a8d532c2f7b964",
    ("1.8.0", "5.8"): "4a32fb5a29104dd5407db851b6e32559e87bab640464a7d31d40657b820b403e",
    ("1.8.0", "5.14"): "94a0b8b3f228bef19c32643dbde45cf5a587d85e096c61dc674ab694b7f3e229",
    ("1.8.0", "5.15"): "ce6225c63e9302e736e860ab239959f0650dae0de9c9588f7bd431d2b938bbbe",
    ("1.8.0", "5.16"): "9827ed4aa554ad9547a78597889d326b6716a918b49f50abac1671645851c113",
    ("1.8.0", "5.17"): "dcc0e3ca52aefe16060ec70d98058c071ad311ec744976e0e8d09bb1602b4383",
    ("1.8.0", "5.19"): "923f3098bf010d8579f1fb1423aa70ccaade32222faa7bdf5d896e368df4b343",
    ("1.8.0", "5.20"): "191a60ebfcc9a7e98106a5477da7306fe8ce511738f1f5548c9cfde74ab7237c",
    ("1.8.0", "5.21"): "1d199f7898079b5282d6c9923d3192bbb3cfbf7d1318b8698fa5273190d714db",
    ("1.8.0", "6.1"): "b11ae2116b4e9d1f5b2737febbc1ba91ea8ba36c110f5d14cefabaf401effa4d",
    ("1.8.0", "latest"): "b11ae2116b4e9d1f5b2737febbc1ba91ea8ba36c110f5d14cefabaf401effa4d",
    ("1.9.0", "5.8"): "b24d0095860695514a29e4408ae9eebd27c5e28286e33ba70acdb323a231ce96",
    ("1.9.0", "5.14"): "287ba69f96b1b47a69c220b7e7f571a5b30f9cc31ce7294de2866a7ab517b3a3",
    ("1.9.0", "5.15"): "a0dde83a2433a02603aad05087fc22c9488553b917a1ffb06c702f10ca2a1ae5",
    ("1.9.0", "5.16"): "844dc75cf3f2d26dd63510cab2f1ff3dd45cb39de60ca845a5d8e87d581e71ce",
    ("1.9.0", "5.17"): "49b77bcbf592d7646bf014e29b2933267893abb2ca1ec29f8b7081ac1bd7ecb5",
    ("1.9.0", "5.20"): "7884a7bb24c750fab92c22f5d4eff7e5918757d0d6ed189dbc9cecdb6931234a",
    ("1.9.0", "5.21"): "9568278d3a5a7f71ceef77e8bf3d586baecb43ea9589fb950423cc03908fca39",
    ("1.9.0", "6.1"): "258b89504d5f67d16fe97d83d215483f73b9dfd25fbb8e20a340b8266d9fb1db",
    ("1.9.0", "6.4"): "3425bd951a44d478d0505c6b5d1e8d57656b6e9a4da7bfe88a718ce61d76e572",
    ("1.9.0", "latest"): "3425bd951a44d478d0505c6b5d1e8d57656b6e9a4da7bfe88a718ce61d76e572",
    ("1.9.0.post1", "5.8"): "b24d0095860695514a29e4408ae9eebd27c5e28286e33ba70acdb323a231ce96",
    ("1.9.0.post1", "5.14"): "287ba69f96b1b47a69c220b7e7f571a5b30f9cc31ce7294de2866a7ab517b3a3",
    ("1.9.0.post1", "5.15"): "a0dde83a2433a02603aad05087fc22c9488553b917a1ffb06c702f10ca2a1ae5",
    ("1.9.0.post1", "5.16"): "844dc75cf3f2d26dd63510cab2f1ff3dd45cb39de60ca845a5d8e87d581e71ce",
    ("1.9.0.post1", "5.17"): "49b77bcbf592d7646bf014e29b2933267893abb2ca1ec29f8b7081ac1bd7ecb5",
    ("1.9.0.post1", "5.20"): "7884a7bb24c750fab92c22f5d4eff7e5918757d0d6ed189dbc9cecdb6931234a",
    ("1.9.0.post1", "5.21"): "9568278d3a5a7f71ceef77e8bf3d586baecb43ea9589fb950423cc03908fca39",
    ("1.9.0.post1", "6.1"): "258b89504d5f67d16fe97d83d215483f73b9dfd25fbb8e20a340b8266d9fb1db",
    ("1.9.0.post1", "6.4"): "3425bd951a44d478d0505c6b5d1e8d57656b6e9a4da7bfe88a718ce61d76e572",
    ("1.9.0.post1", "latest"): "3425bd951a44d478d0505c6b5d1e8d57656b6e9a4da7bfe88a718ce61d76e572",
}


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script, for the Vega-Lite version Altair writes,
    ready to inline in a `<script>` element: a kept copy that passes every check, else
    vl-convert's (no network either way)."""
    alt = need("altair")
    vlc = need("vl_convert")
    version = ".".join(str(alt.SCHEMA_VERSION).lstrip("v").split(".")[:2])
    if version not in vlc.get_vegalite_versions():
        version = None  # vl-convert's latest
    tool = _installed("vl-convert-python")
    digest = PINNED.get((tool, version or "latest")) if tool else None
    kept = None
    if digest is not None and CHECKABLE:
        kept = Kept(bundle_folder(), f"vega-bundle-{tool}-vl{version or 'latest'}.js", digest)
        text = kept.read()
        if text is not None:
            return inlinable(text)
    bundle = str(vlc.javascript_bundle(vl_version=version))
    if kept is not None and _sha256(bundle) == digest:
        kept.write(bundle)
    return inlinable(bundle)


def bundle_folder() -> Path:
    """The folder of kept bundles: `vega` beside the answer cache (`$RAGFRAME_CACHE`...)."""
    from ragframe.judge.cache import default_cache_path

    return default_cache_path().parent / "vega"


def inlinable(bundle: str) -> str:
    """The script as it may sit in a `<script>` element: a literal "</script" would end it."""
    return bundle.replace("</script", "<\\/script")


class Kept:
    """One kept bundle: `name` in `folder`, used only if it passes every check (see the
    module's docstring). The folder is opened once and the file through it, not following
    a symbolic link, so what is checked is what is read."""

    def __init__(self, folder: Path, name: str, digest: str) -> None:
        self.folder, self.name, self.digest = folder, name, digest

    @property
    def path(self) -> Path:
        return self.folder / self.name

    def read(self) -> str | None:
        """The kept bundle's text, or None (nothing kept, or ignored with a warning; a folder
        others can write is warned about even when it holds no bundle yet)."""
        try:
            folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None  # nothing kept yet
        try:
            problem = _unsafe(os.fstat(folder), "it")
            if problem:  # said even with no file yet: nothing will be kept there either
                return self._ignored(problem, _PRIVATE, f"the folder {self.folder}")
            try:
                fd = os.open(self.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
            except FileNotFoundError:
                return None
            except OSError as exc:  # a symbolic link (ELOOP), unreadable
                why = f"it cannot be opened as a plain file ({exc.strerror})"
                return self._ignored(why, _REPLACED)
            with os.fdopen(fd, "rb") as handle:
                problem = _unsafe(os.fstat(handle.fileno()), "the file")
                data = b"" if problem else handle.read()
        finally:
            os.close(folder)
        if problem:
            return self._ignored(problem, _REPLACED)
        if hashlib.sha256(data).hexdigest() != self.digest:
            why = (
                "its SHA-256 is not the one ragframe pins for this vl-convert and Vega-Lite "
                "version (cut short, or not vl-convert's script)"
            )
            return self._ignored(why, _REPLACED)
        return data.decode("utf-8")

    def write(self, bundle: str) -> None:
        """Keep `bundle` (atomically, mode 0644, in a folder of mode 0700 made if missing);
        a folder that is not safe, or cannot be written, keeps nothing: not an error."""
        try:
            make_private_dirs(self.folder)
            folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        tmp = f".{self.name}.{os.getpid()}.tmp"
        try:
            if _unsafe(os.fstat(folder), "its folder"):
                return  # already said by read(): nothing is kept where others can write
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            fd = os.open(tmp, flags, 0o600, dir_fd=folder)
            with os.fdopen(fd, "wb") as handle:
                handle.write(bundle.encode("utf-8"))
                os.fchmod(handle.fileno(), 0o644)  # whatever the umask
            os.replace(tmp, self.name, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
        finally:
            os.close(folder)

    def _ignored(self, why: str, fix: str, where: str | None = None) -> None:
        """Say (one line) why no kept bundle is used, and what to do."""
        subject = f"Vega's script kept in {where}" if where else f"the kept Vega script {self.path}"
        warnings.warn(
            f"{subject} is not used: {why}; the report inlines vl-convert's, rebuilt "
            f"(seconds); {fix}",
            stacklevel=4,
        )


#: What to do about a folder others could write: nothing is read or kept there.
_PRIVATE = (
    "make the folder writable by you alone (chmod go-w), or point $RAGFRAME_CACHE at a "
    "folder that is"
)
#: What happens to a file that failed a check in a folder that passed: it is replaced.
_REPLACED = "the file is replaced by vl-convert's"


def _unsafe(info: os.stat_result, what: str) -> str | None:
    """Why a kept bundle with this folder's or file's status must not be used; None if fine."""
    me = os.getuid()
    if info.st_uid != me:
        return f"{what} belongs to user id {info.st_uid}, not to you ({me})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} can be written by others (mode {stat.filemode(info.st_mode)})"
    if what == "the file" and not stat.S_ISREG(info.st_mode):
        return f"{what} is not a regular file"
    return None


def _installed(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
