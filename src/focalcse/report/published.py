"""Published numbers: the rows Table 2 shows beside ours, read from ``published.yaml`` next to this
module (each row with its backbone, loss, label, source and scores keyed by task name and ``avg``).

A row may hold any subset of the task keys (several papers publish only the average); the report
shows ``–`` for a task a row lacks, so adding a task to :mod:`focalcse.data.tasks` needs no change here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

PUBLISHED_FILE = "published.yaml"
_ROW_KEYS = ("backbone", "loss", "label", "source", "scores")
_HUB_ORGS = ("google-bert/", "FacebookAI/")  # hub ids of the original checkpoints under an org


@dataclass(frozen=True)
class PublishedRow:
    """A published Table 2 row (Spearman × 100, SimCSE's "all" setting); ``scores`` may hold only
    ``avg`` where only the average is published."""

    backbone: str  # Hugging Face hub id of the backbone it was trained from
    loss: str
    label: str
    source: str
    scores: Mapping[str, float]


class PublishedError(ValueError):
    """A malformed row in ``published.yaml``."""


def parse_published(raw: Any, where: str = PUBLISHED_FILE) -> tuple[PublishedRow, ...]:
    """The rows of a loaded ``published.yaml`` document (``{"rows": [...]}``), checked."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("rows"), list):
        raise PublishedError(f"{where}: expected a mapping with a 'rows' list")
    rows = []
    for i, row in enumerate(raw["rows"]):
        at = f"{where}: rows[{i}]"
        if not isinstance(row, Mapping) or set(row) != set(_ROW_KEYS):
            got = sorted(row) if isinstance(row, Mapping) else type(row).__name__
            raise PublishedError(f"{at}: expected exactly the keys {list(_ROW_KEYS)}, got {got}")
        for key in _ROW_KEYS[:4]:
            if not isinstance(row[key], str) or not row[key]:
                raise PublishedError(f"{at}.{key}: expected a non-empty string, got {row[key]!r}")
        scores = row["scores"]
        if not isinstance(scores, Mapping) or not scores:
            raise PublishedError(f"{at}.scores: expected a non-empty mapping of task name to score")
        for key, value in scores.items():
            if (
                not isinstance(key, str)
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise PublishedError(
                    f"{at}.scores: {key!r}: {value!r} is not a task name with a finite number"
                )
        rows.append(
            PublishedRow(
                row["backbone"],
                row["loss"],
                row["label"],
                row["source"],
                {k: float(v) for k, v in scores.items()},
            )
        )
    return tuple(rows)


def load_published() -> tuple[PublishedRow, ...]:
    """Every row of the packaged ``published.yaml``, in file order."""
    text = resources.files(__package__).joinpath(PUBLISHED_FILE).read_text(encoding="utf-8")
    return parse_published(yaml.safe_load(text))


PUBLISHED: tuple[PublishedRow, ...] = load_published()


def backbone_key(name: str) -> str:
    """A backbone reference as ``published.yaml`` names it (the hub id without its org prefix)."""
    for org in _HUB_ORGS:
        name = name.removeprefix(org)
    return name


def published_rows(*names: str, rows: tuple[PublishedRow, ...] | None = None) -> list[PublishedRow]:
    """Published rows for the first of ``names`` (a sweep name, then its source) that has any."""
    rows = PUBLISHED if rows is None else rows
    for name in names:
        key = backbone_key(name)
        found = [r for r in rows if r.backbone == key]
        if found:
            return found
    return []
