"""Shared by the stage entry points: load validated params and parse a matrix key."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from focalcse.config import ConfigError, Params, load_params
from focalcse.errors import EX_TEMPFAIL, known_failure
from focalcse.layout import Layout

PARAMS_FILE = os.environ.get("FOCALCSE_PARAMS", "params.yaml")
LAYOUT = Layout()  # paths relative to the repository root, where DVC runs every stage


DEBUG_ENV = "FOCALCSE_DEBUG"  # 1: print the full traceback of any error on the console
LOG_DIR = Path(".focalcse") / "logs"  # under the repository root (git- and DVC-ignored)


def _concise_errors(kind, value, tb) -> None:
    # Foreseen failures (bad inputs, a full disk: focalcse.errors.RULES) are the user's to fix: one
    # line naming the file/line or key, no traceback. Anything else is a bug: one line with its type
    # and message and the file holding the full traceback (FOCALCSE_DEBUG=1 prints it instead). The
    # exit status is non-zero either way.
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        sys.__excepthook__(kind, value, tb)
    elif (line := known_failure(value)) is not None:
        print(f"error: {line}", file=sys.stderr)
    elif issubclass(kind, KeyboardInterrupt):
        print("error: interrupted", file=sys.stderr)
    else:
        print(unexpected_error_line(kind, value, tb), file=sys.stderr)


def unexpected_error_line(kind, value, tb) -> str:
    """``<Type>: <message> (unexpected error; full traceback in <file>; ...)``: the full traceback goes
    to a file under ``.focalcse/logs/`` of the repository root (the temp folder if that is not
    writable). The line starts with the type, as a traceback's last line does, so the Prefect flows
    classify it the same way (focalcse.ops.orchestration.classify_failure)."""
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    lines = str(value).strip().splitlines() or [""]
    message = lines[0] + (" [...]" if len(lines) > 1 else "")
    log = _write_traceback(kind, value, tb)
    where = f"full traceback in {log}" if log else "the traceback could not be written to a file"
    return f"{name}: {message} (unexpected error; {where}; {DEBUG_ENV}=1 prints it here)"


def _write_traceback(kind, value, tb) -> Path | None:
    stage = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join([Path(sys.argv[0]).stem or "python", *sys.argv[1:]]))
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{stage[:80]}-{os.getpid()}.log"
    text = f"$ {' '.join(sys.argv)}\n" + "".join(traceback.format_exception(kind, value, tb))
    root = Path(os.environ.get("DVC_ROOT") or ".")
    for folder in (root / LOG_DIR, Path(tempfile.gettempdir()) / "focalcse-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        except OSError:
            continue
        return folder / name
    return None


sys.excepthook = _concise_errors


def _stop_with_parent() -> None:
    """End this stage when the process that started it (``dvc repro``, a flow, a shell) dies, however
    it died: a stage left running under init would go on writing outputs that a rerun writes too.
    Linux's parent-death signal covers a parent that exits; a watcher thread covers the rest (the
    parent's starting thread ending first, other systems), noticing within a second that this process
    was re-parented."""
    import signal
    import threading

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        print(
            f"error: the process that started this stage (pid {parent}) has ended; stopping", file=sys.stderr
        )
        os.kill(os.getpid(), signal.SIGTERM)

    if parent != 1:  # started by init itself (a container's entry point): nothing to watch
        threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()


_stop_with_parent()


LOCK_DIR = Path(".focalcse") / "locks"  # beside the stage's outputs (git- and DVC-ignored)


@contextmanager
def item_lock(item: str) -> Iterator[None]:
    """Hold the lock file of ``item`` (its DVC name) for as long as the block runs, with this process's
    pid in it: one process per item, whatever ended the last one (``flock``: the kernel drops the lock
    of a dead process). A second process on the same item stops with one line naming the holder."""
    import fcntl

    path = LOCK_DIR / (re.sub(r"[^A-Za-z0-9._-]+", "_", item) + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            sys.exit(
                f"error: {item} is already running in process {holder} (it holds {path.resolve()}); "
                "wait for it or stop it, then run this item again"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def params() -> Params:
    try:
        return load_params(PARAMS_FILE)
    except ConfigError as err:
        sys.exit(f"error: {err}")


def matrix_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("framework", help="a registered framework (sweep.frameworks)")
    parser.add_argument("backbone")
    parser.add_argument("loss")
    parser.add_argument("seed", type=int)
    return parser.parse_args()


@contextmanager
def transient_exit() -> Iterator[None]:
    """Exit with EX_TEMPFAIL (75) when the tracking server is unreachable: the Prefect flow retries
    that exit status only (focalcse.ops.orchestration.classify_failure)."""
    from focalcse.errors import TrackingUnavailableError

    try:
        yield
    except TrackingUnavailableError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EX_TEMPFAIL)
