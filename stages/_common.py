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
