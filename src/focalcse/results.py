"""A result document on disk: its numbers in one file, its ``meta`` and ``subsets`` beside it.

Every step writes its result dict through :func:`write_result`: the keys in
:data:`focalcse.layout.COMPANION_KEYS` go to companion files (``x.meta.json``, ``x.subsets.json``), the
rest to ``x.json``. :func:`read_result` puts the document back together, so readers see the dict the
step returned. Each file is written atomically, companions first: a reader that finds ``x.json``
finds its companions of the same write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from focalcse.atomic import write_json
from focalcse.layout import COMPANION_KEYS, companion_file


def write_result(path: str | os.PathLike, result: dict[str, Any]) -> Path:
    """``result`` without its companion keys to ``path``; each companion key to its own file (a
    companion the result lacks is removed, so an old one never passes for this write's)."""
    path = Path(path)
    for key in COMPANION_KEYS:
        if key in result:
            write_json(companion_file(path, key), result[key])
        else:
            companion_file(path, key).unlink(missing_ok=True)
    return write_json(path, {k: v for k, v in result.items() if k not in COMPANION_KEYS})


def read_result(path: str | os.PathLike) -> dict[str, Any]:
    """The document :func:`write_result` wrote at ``path``, companions merged back in."""
    path = Path(path)
    data = json.loads(path.read_text())
    for key in COMPANION_KEYS:
        extra = companion_file(path, key)
        if extra.is_file():
            data[key] = json.loads(extra.read_text())
    return data


def maybe_result(path: str | os.PathLike) -> dict[str, Any] | None:
    """:func:`read_result`, or None when there is no ``path``."""
    return read_result(path) if Path(path).is_file() else None
