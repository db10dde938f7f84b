"""The failures a stage foresees, each reported in one line, and the retry exit status.

A module of its own, importing nothing of the project, so that the stage entry points' error hook
(``stages/_common.py``) does not make every DVC stage depend on the training loop or the data readers.
The classes are re-exported where they are raised (``focalcse.core.training``, ``focalcse.data.corpus``,
``focalcse.data.sts``, ``focalcse.ops.tracking``).

:data:`RULES` names every foreseen failure once: which errors it covers and the line the hook prints
(``error: <line>``, no traceback). A new case is one more :class:`Rule`; anything no rule covers is a
bug and gets the hook's "unexpected error" line. docs/reliability.md lists the rules.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EX_TEMPFAIL = 75  # sysexits.h: temporary failure, the caller may retry


class ConfigError(ValueError):
    """A params value that is missing, of the wrong type or out of range (re-exported by
    :mod:`focalcse.config`)."""


class CorpusError(ValueError):
    """A corpus that cannot be used; the message names the file (and line)."""


class StsDataError(ValueError):
    """A malformed STS file; the message names the file and line."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf."""


class TrackingUnavailableError(ConnectionError):
    """The tracking server cannot be reached (transient: stages exit with EX_TEMPFAIL)."""


class BackboneError(ValueError):
    """A backbone reference that resolves to nothing loadable (no such folder, a folder without
    ``config.json``, a hub id neither cached nor downloadable); the message names it."""


class DiskFullError(OSError):
    """The device filled up while an output was written (raised by :mod:`focalcse.atomic`'s writers).

    Args:
        path: the output being written (the file or folder a reader would see).
        free: bytes free on its device once the partial write was removed.
        need: bytes the write needs: an estimate of the whole write, or, when ``need_known`` is
            False, a lower bound (what was written before the device filled up).
        need_known: whether ``need`` estimates the whole write.
    """

    def __init__(self, path: str | os.PathLike, free: int, need: int, need_known: bool = True) -> None:
        self.path, self.free, self.need = Path(path), free, need
        amount = f"about {human_bytes(need)}" if need_known else f"more than {human_bytes(need)}"
        super().__init__(
            f"no space left on the device writing {path}: {human_bytes(free)} free there, the write needs "
            f"{amount}; free some space and rerun"
        )
        self.errno = errno.ENOSPC


# ---------------------------------------------------------------- disk full
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# libraries doing their own I/O (safetensors, in Rust) put the OS's message in their own error's text
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the device (or the user's quota) is full."""
    if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
        return True
    return isinstance(err, Exception) and any(text in str(err) for text in _DISK_FULL_TEXT)


def free_bytes(path: str | os.PathLike) -> int:
    """Bytes free to this user on the device holding ``path`` (its nearest existing folder); -1 if
    that cannot be read."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return -1


def human_bytes(n: int) -> str:
    """``1.5 MiB``-style size (``unknown`` for a negative count)."""
    if n < 0:
        return "unknown"
    units, size, i = ("B", "KiB", "MiB", "GiB", "TiB"), float(n), 0
    while size >= 1024 and i < len(units) - 1:
        size, i = size / 1024, i + 1
    return f"{n} B" if i == 0 else f"{size:.1f} {units[i]}"


def _disk_full_line(err: BaseException) -> str:
    if isinstance(err, DiskFullError):
        return str(err)
    # written by something other than focalcse.atomic: the OS names the file if anything does
    name = getattr(err, "filename", None)
    where = Path(name).parent if name else Path.cwd()
    return (
        f"no space left on the device writing {name or 'an output (not named by the error)'}: "
        f"{human_bytes(free_bytes(where))} free in {where}; free some space and rerun ({err})"
    )


# ---------------------------------------------------------------- the rules
@dataclass(frozen=True)
class Rule:
    """A failure a stage foresees: the errors it covers and the one line the stages print for it."""

    failure: str  # as docs/reliability.md's table names it
    matches: Callable[[BaseException], bool]
    line: Callable[[BaseException], str] = str


def _kind(*kinds: type[BaseException]) -> Callable[[BaseException], bool]:
    return lambda err: isinstance(err, kinds)


RULES: tuple[Rule, ...] = (
    Rule("bad params value", _kind(ConfigError)),
    Rule("unusable corpus", _kind(CorpusError)),
    Rule("malformed STS file", _kind(StsDataError)),
    Rule("NaN/inf loss", _kind(NonFiniteLossError)),
    Rule("unresolvable backbone", _kind(BackboneError)),
    Rule("disk full", is_disk_full, _disk_full_line),
    Rule("missing file", _kind(FileNotFoundError)),
)


def known_failure(err: BaseException) -> str | None:
    """The one line for a foreseen failure (the first of :data:`RULES` that matches ``err``), None for
    an error no rule covers."""
    for rule in RULES:
        if rule.matches(err):
            return rule.line(err)
    return None
