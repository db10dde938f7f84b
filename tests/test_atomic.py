"""The atomic writers: outputs appear whole, with the modes the user's umask gives (not tempfile's 0600/0700)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from focalcse.atomic import atomic_write, staged_dir, write_json


@pytest.fixture(params=[0o022, 0o077])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_applies_umask(tmp_path: Path, umask: int) -> None:
    f = atomic_write(tmp_path / "sub" / "a.txt", "hello")
    assert f.read_text() == "hello"
    assert _mode(f) == 0o666 & ~umask  # 0644 under 022, 0600 under 077
    j = write_json(tmp_path / "b.json", {"x": 1})
    assert _mode(j) == 0o666 & ~umask
    atomic_write(f, b"again")  # replacing keeps the umask mode too
    assert f.read_bytes() == b"again" and _mode(f) == 0o666 & ~umask
    assert sorted(p.name for p in f.parent.iterdir()) == ["a.txt"]  # no temp file left


def test_staged_dir_applies_umask(tmp_path: Path, umask: int) -> None:
    dest = tmp_path / "out"
    with staged_dir(dest) as tmp:
        (tmp / "x").write_text("1")
    assert _mode(dest) == 0o777 & ~umask  # 0755 under 022, 0700 under 077
    assert (dest / "x").read_text() == "1"
    with staged_dir(dest) as tmp:  # a replacement too
        (tmp / "y").write_text("2")
    assert _mode(dest) == 0o777 & ~umask and [p.name for p in dest.iterdir()] == ["y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staged_dir_failure_keeps_the_old_folder(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with staged_dir(dest) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(RuntimeError), staged_dir(dest) as tmp:
        (tmp / "y").write_text("2")
        raise RuntimeError("boom")
    assert [p.name for p in dest.iterdir()] == ["x"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
