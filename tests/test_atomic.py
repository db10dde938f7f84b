"""The atomic writers: outputs appear whole, with the modes the user's umask gives (not tempfile's 0600/0700)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from focalcse.atomic import atomic_write, staged_dir, tensor_bytes, write_json
from focalcse.errors import DiskFullError


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


# ---------------------------------------------------------------- a device that fills up
class _FullAfter:
    """A file whose write stores half the bytes, then fails as a full device does."""

    def __init__(self, f) -> None:
        self.f = f

    def __enter__(self) -> _FullAfter:
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()

    def write(self, data: bytes) -> None:
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_write_names_the_file_and_its_size_when_the_device_fills(tmp_path: Path, monkeypatch) -> None:
    target = atomic_write(tmp_path / "metrics.json", "old\n")
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullAfter(real(fd, mode)))
    with pytest.raises(DiskFullError) as info:
        atomic_write(target, b"x" * 3000)
    assert str(info.value).startswith(f"no space left on the device writing {target}: ")
    assert "free there, the write needs about 2.9 KiB; free some space and rerun" in str(info.value)
    assert info.value.need == 3000 and info.value.errno == errno.ENOSPC
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def _fill(folder: Path, size: int) -> None:
    (folder / "weights").write_bytes(b"w" * size)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    ("old_size", "need", "says"),
    [
        (0, 0, "more than 1000 B"),  # a first write: only what got written is known
        (5000, 0, "about 4.9 KiB"),  # the folder it replaces stands in for its size
        (5000, 3 << 20, "about 3.0 MiB"),  # the writer's own estimate
    ],
)
def test_staged_dir_names_the_folder_and_what_it_needs(
    tmp_path: Path, old_size: int, need: int, says: str
) -> None:
    dest = tmp_path / "models" / "best"
    if old_size:
        with staged_dir(dest) as tmp:
            (tmp / "weights").write_bytes(b"o" * old_size)
    says = f"writing {dest}: .* free there, the write needs {says};"
    with pytest.raises(DiskFullError, match=says), staged_dir(dest, need=need) as tmp:
        _fill(tmp, 1000)
    assert sorted(p.name for p in dest.parent.iterdir()) == (["best"] if old_size else [])
    if old_size:
        assert (dest / "weights").read_bytes() == b"o" * old_size  # the previous version is kept


def test_staged_dir_reads_an_unexplained_write_error_on_a_full_device_as_disk_full(
    tmp_path: Path, monkeypatch
) -> None:
    import focalcse.atomic as atomic

    pos = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # torch.save
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 4096)
    with pytest.raises(DiskFullError, match="4.0 KiB free there") as info, staged_dir(tmp_path / "last"):
        raise pos
    assert info.value.__cause__ is pos
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 10 << 30)  # room left: a bug, not a full disk
    with pytest.raises(RuntimeError, match="unexpected pos"), staged_dir(tmp_path / "last"):
        raise pos


def test_tensor_bytes_counts_a_shared_tensor_once() -> None:
    import torch

    w = torch.zeros(10, 4)  # 160 bytes
    assert tensor_bytes({"a": w, "tied": w, "b": [torch.zeros(3, dtype=torch.float64)]}, "x", None) == 184
