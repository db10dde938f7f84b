"""A Prefect process worker that stops on the first SIGINT (or SIGTERM), however it was started.

A process started in the background of a non-interactive shell (``cmd &`` in a script, a CI step, a
test runner's child, anything below one) inherits SIGINT *ignored* (POSIX: job control is off there).
Python then installs no ``KeyboardInterrupt`` handler, and Prefect 3.9's worker CLI stops on SIGINT
by restoring the handler it found, which is "ignore", and sending itself SIGINT again
(``prefect.utilities.processutils.forward_signal_handler``; its SIGTERM handler sends that SIGINT too).
That SIGINT is lost: the worker runs on, and only a second signal stops it, by SIGKILL. :func:`run`
gives SIGINT back to Python before Prefect starts, so the first one stops the worker, exit 0.
"""

from __future__ import annotations

import signal
import sys


def interruptible() -> bool:
    """SIGINT back to Python's handler (``KeyboardInterrupt``) if this process inherited it
    ignored; True if it had."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True


def run(pool: str, name: str, limit: int = 1) -> int:
    """``prefect worker start --type process`` on ``pool`` in this process, taking ``limit`` flow runs
    at a time; returns its exit status once it stops (SIGINT or SIGTERM, the first one)."""
    interruptible()
    from prefect.cli import app

    cmd = ["worker", "start", "--pool", pool, "--name", name, "--limit", str(limit), "--type", "process"]
    sys.argv = ["prefect", *cmd]  # (Prefect's CLI reads its arguments there)
    try:
        app()
    except SystemExit as stop:
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
