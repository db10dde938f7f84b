"""Shared by the stage entry points: load validated params and parse a matrix key."""

from __future__ import annotations

import argparse
import os
import sys

from focalcse.config import ConfigError, Params, load_params

PARAMS_FILE = os.environ.get("FOCALCSE_PARAMS", "params.yaml")


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
    return parser.parse_args()
