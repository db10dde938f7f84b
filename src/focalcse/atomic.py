"""Write once, atomically: a file or a folder appears whole or not at all.

Every writer in the project goes through :func:`atomic_write` (a file: temp file beside it, then
``os.replace``) or :func:`staged_dir` (a folder: built beside it, then swapped in). A reader, DVC or
a user never sees a half-written output, and a failure leaves the previous output untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """``data`` as indented JSON (NaN allowed, key order kept) with a final newline, atomically."""
    return atomic_write(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=True) + "\n")


@contextmanager
def staged_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Build a folder in a temp folder beside ``dest``; on success swap it in place of ``dest``.

    Yields the staging folder. If the block raises, the staging folder is removed and ``dest`` (if
    any) is left as it was. The old ``dest`` is moved aside before the new one is renamed in, so the
    swap is two renames on one filesystem.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp
        replace_dir(tmp, dest)
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


def recover_dir(dest: str | os.PathLike) -> Path:
    """Undo a :func:`replace_dir` that was killed after moving the old ``dest`` aside."""
    dest = Path(dest)
    old = _aside(dest)
    if not dest.exists() and old.is_dir():
        os.replace(old, dest)
    return dest
