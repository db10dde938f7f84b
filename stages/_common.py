"""Shared by the stage entry points: load validated params and parse a matrix key."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from focalcse.config import ConfigError, Params, load_params
from focalcse.errors import EX_TEMPFAIL
from focalcse.layout import Layout

PARAMS_FILE = os.environ.get("FOCALCSE_PARAMS", "params.yaml")
LAYOUT = Layout()  # paths relative to the repository root, where DVC runs every stage


def _concise_errors(kind, value, tb) -> None:
    # Bad inputs are the user's to fix: one line naming the file/line or key, no traceback.
    # Anything else is a bug: full traceback. The exit status is non-zero either way.
    from focalcse.errors import CorpusError, NonFiniteLossError, StsDataError

    if issubclass(kind, (ConfigError, CorpusError, StsDataError, NonFiniteLossError, FileNotFoundError)):
        print(f"error: {value}", file=sys.stderr)
    else:
        sys.__excepthook__(kind, value, tb)


sys.excepthook = _concise_errors


def params() -> Params:
    try:
        return load_params(PARAMS_FILE)
    except ConfigError as err:
        sys.exit(f"error: {err}")


def matrix_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("backbone")
    parser.add_argument("loss")
    parser.add_argument("seed", type=int)
    # absent for SimCSE (the train / evaluate stages' commands carry no framework)
    parser.add_argument(
        "--framework", default="simcse", help="promptbert | diffcse (train_framework / evaluate_framework)"
    )
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
