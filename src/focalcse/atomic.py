"""Write once, atomically: a file or a folder appears whole or not at all.

Every writer in the project goes through :func:`atomic_write` (a file: temp file beside it, then
``os.replace``) or :func:`staged_dir` (a folder: built beside it, then swapped in). A reader, DVC or
a user never sees a half-written output, and a failure leaves the previous output untouched.

``tempfile`` creates its files 0600 and its folders 0700; before the rename they get the modes a
plain ``open``/``mkdir`` would give (0644 / 0755 under umask 022), so outputs stay readable by others.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    old = os.umask(0)
    os.umask(old)
    return old


def atomic_write(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """``data`` as indented JSON (NaN allowed, key order kept) with a final newline, atomically."""
    return atomic_write(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=True) + "\n")


def follow_umask(folder: str | os.PathLike) -> None:
    """Give ``folder``, everything in it and below it the modes the umask gives new files and folders
    (0644 / 0755 under umask 022). Libraries that write through ``tempfile`` (safetensors' weights,
    written 0600) would otherwise leave single files private while the rest follows the umask."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)


@contextmanager
def staged_dir(dest: str | os.PathLike, swap: Callable[[Path, Path], Any] | None = None) -> Iterator[Path]:
    """Build a folder in a temp folder beside ``dest``; on success swap it in place of ``dest``.

    Yields the staging folder. If the block raises, the staging folder is removed and ``dest`` (if
    any) is left as it was. The old ``dest`` is moved aside before the new one is renamed in, so the
    swap is two renames on one filesystem. ``swap(staging, dest)`` replaces that swap (e.g.
    :func:`rotate_dir`, which keeps the old ``dest`` as a previous version).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp
        follow_umask(tmp)
        (swap or replace_dir)(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _aside(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.old")


def replace_dir(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Move finished folder ``src`` to ``dest`` (same filesystem), replacing an existing ``dest``.

    The old ``dest`` is renamed to ``.<name>.old`` beside it first and removed last; if the process
    dies between the two renames, :func:`recover_dir` puts it back.
    """
    src, dest = Path(src), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = _aside(dest)
    if old.exists():
        shutil.rmtree(old)
    if dest.exists():
        os.replace(dest, old)
    os.replace(src, dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest


def rotate_dir(src: str | os.PathLike, dest: str | os.PathLike, previous: str | os.PathLike) -> Path:
    """Move finished folder ``src`` to ``dest``, keeping the old ``dest`` as ``previous`` (the older
    ``previous`` is dropped). Each move is a rename on one filesystem: a kill at any point leaves
    ``dest`` or ``previous`` (after :func:`recover_dir` on ``previous``) holding a whole folder.
    """
    src, dest, previous = Path(src), Path(dest), Path(previous)
    if dest.exists():
        replace_dir(dest, previous)
    os.replace(src, dest)
    return dest


def recover_dir(dest: str | os.PathLike) -> Path:
    """Undo a :func:`replace_dir` that was killed after moving the old ``dest`` aside."""
    dest = Path(dest)
    old = _aside(dest)
    if not dest.exists() and old.is_dir():
        os.replace(old, dest)
    return dest


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (checkpoint manifests, the corpus sample in train metrics, the
    check stage's source fingerprints)."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
