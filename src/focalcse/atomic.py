"""Write once, atomically: a file or a folder appears whole or not at all.

Every writer in the project goes through :func:`atomic_write` (a file: temp file beside it, then
``os.replace``) or :func:`staged_dir` (a folder: built beside it, then swapped in). A reader, DVC or
a user never sees a half-written output, and a failure leaves the previous output untouched.

``tempfile`` creates its files 0600 and its folders 0700; before the rename they get the modes a
plain ``open``/``mkdir`` would give (0644 / 0755 under umask 022), so outputs stay readable by others.

A write that fills the device raises :class:`~focalcse.errors.DiskFullError`, which names the output,
the space left once the partial write is removed, and what the write needs.
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

from focalcse.errors import DiskFullError, free_bytes, is_disk_full

# Below this much free space, a write error that names no cause (torch.save's zip writer:
# "unexpected pos ...") is read as the device having filled up.
NEARLY_FULL_BYTES = 1 << 20


def current_umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    old = os.umask(0)
    os.umask(old)
    return old


def atomic_write(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode(encoding) if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException as err:
        full = _filled_up(err, path.parent)
        Path(tmp).unlink(missing_ok=True)
        if full:
            raise DiskFullError(path, free_bytes(path.parent), len(payload)) from err
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
def staged_dir(
    dest: str | os.PathLike, swap: Callable[[Path, Path], Any] | None = None, need: int = 0
) -> Iterator[Path]:
    """Build a folder in a temp folder beside ``dest``; on success swap it in place of ``dest``.

    Yields the staging folder. If the block raises, the staging folder is removed and ``dest`` (if
    any) is left as it was. The old ``dest`` is moved aside before the new one is renamed in, so the
    swap is two renames on one filesystem. ``swap(staging, dest)`` replaces that swap (e.g.
    :func:`rotate_dir`, which keeps the old ``dest`` as a previous version).

    ``need``: about how many bytes the folder will hold (:func:`tensor_bytes` of what is saved), named
    if the device fills up; without it the size of the ``dest`` being replaced stands in, and without
    that what was written before the device filled up, as a lower bound.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp
        follow_umask(tmp)
        (swap or replace_dir)(tmp, dest)
    except BaseException as err:
        full = _filled_up(err, tmp)
        written = tree_bytes(tmp) if full else 0
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            estimate = need or tree_bytes(dest)
            raise DiskFullError(dest, free_bytes(dest.parent), max(estimate, written), estimate > 0) from err
        raise


def _filled_up(err: BaseException, where: Path) -> bool:
    """Whether a write near ``where`` failed because the device is full (measured before the partial
    write is removed)."""
    if is_disk_full(err):
        return True
    unexplained = isinstance(err, RuntimeError) or (isinstance(err, OSError) and err.errno is None)
    return unexplained and 0 <= free_bytes(where) < NEARLY_FULL_BYTES


def tree_bytes(path: str | os.PathLike) -> int:
    """Bytes in the files at or below ``path`` (0 if it does not exist)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def tensor_bytes(*objects: Any) -> int:
    """Bytes held by the tensors in nested dicts, lists and tuples (anything with ``nbytes`` and
    ``data_ptr``), a tensor seen under two names (tied weights) counted once: about what saving them
    writes. Duck-typed, so this module needs no torch."""
    seen: set[tuple[int, int]] = set()
    stack, total = list(objects), 0
    while stack:
        obj = stack.pop()
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "nbytes") and hasattr(obj, "data_ptr"):
            key = (obj.data_ptr(), obj.nbytes)
            if key not in seen:
                seen.add(key)
                total += obj.nbytes
    return total


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
