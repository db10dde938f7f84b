"""Published numbers: the rows Table 2 shows beside ours, read from ``published.yaml`` next to this
module (each row with its backbone, loss, label, source and scores keyed by task name and ``avg``;
optionally ``derived`` arithmetic and the ``paper_baseline`` flag).

SimCSE's rows (the file's ``rows``) are :data:`PUBLISHED`; the other frameworks' (``framework_rows``,
each naming its ``framework``: DiffCSE's and PromptBERT's own BERT-base rows) are
:data:`PUBLISHED_FRAMEWORKS`, shown only for a sweep that trains that framework. Such a row may carry
an ``avg_note`` saying why its published average is not the mean of its published tasks.

A row may hold any subset of the task keys (several papers publish only the average); the report
shows ``–`` for a task a row lacks, so adding a task to :mod:`focalcse.data.tasks` needs no change here.
The loader checks the file against itself: a derived score must equal its stated arithmetic, and a
row that gives every task of ``average_of`` must have an ``avg`` within :data:`AVG_TOLERANCE` of their
mean (published numbers are rounded to 2 decimals).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from focalcse.core.frameworks import default_framework, framework_names

PUBLISHED_FILE = "published.yaml"
_REQUIRED = ("backbone", "loss", "label", "source", "scores")
_OPTIONAL = ("derived", "paper_baseline")
_HUB_ORGS = ("google-bert/", "FacebookAI/")  # hub ids of the original checkpoints under an org
AVG_TOLERANCE = 0.005  # |avg - mean(tasks)| allowed: each published number is rounded to 0.01
_DERIVED_TOLERANCE = 1e-6  # a derived number is its arithmetic exactly (to float error)
_NUMBER = r"\d+(?:\.\d+)?"
_MINUS = "−-"  # U+2212 (what the report prints) or ASCII
_ARITHMETIC = re.compile(rf"^\s*({_NUMBER}(?:\s*[+{_MINUS}]\s*{_NUMBER})*)\s*(?:\((.+)\))?\s*$")


@dataclass(frozen=True)
class PublishedRow:
    """A published Table 2 row (Spearman × 100, SimCSE's "all" setting); ``scores`` may hold only
    ``avg`` where only the average is published."""

    backbone: str  # Hugging Face hub id of the backbone it was trained from
    loss: str
    label: str
    source: str
    scores: Mapping[str, float]
    # score key -> "a − b (why)": numbers computed from published ones, not published themselves
    derived: Mapping[str, str] = field(default_factory=dict)
    paper_baseline: bool = False  # the Focal-InfoNCE paper's own SimCSE baseline (its gains are over it)
    # the framework it was trained with (a registered framework, focalcse.core.frameworks); unset in
    # published.yaml: the registry's default framework, the paper's own
    framework: str = field(default_factory=default_framework)
    avg_note: str = ""  # why its avg is not the mean of its tasks (then exempt from that check)


class PublishedError(ValueError):
    """A malformed or self-contradicting row in ``published.yaml``."""


def evaluate_arithmetic(text: str) -> float:
    """The value of a derivation such as ``"78.72 − 0.82 (why)"``: numbers joined by + and −
    (U+2212 or ASCII), optionally followed by an explanation in parentheses."""
    m = _ARITHMETIC.match(text)
    if not m:
        raise ValueError(f"{text!r}: expected numbers joined by + / − and an optional '(why)'")
    tokens = re.findall(rf"[+{_MINUS}]|{_NUMBER}", m.group(1))
    total, sign = float(tokens[0]), 1.0
    for tok in tokens[1:]:
        if tok in f"+{_MINUS}":
            sign = 1.0 if tok == "+" else -1.0
        else:
            total += sign * float(tok)
    return total


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _parse_row(row: Any, at: str, average_of: tuple[str, ...], framework_row: bool = False) -> PublishedRow:
    required = (*_REQUIRED, "framework") if framework_row else _REQUIRED
    optional = (*_OPTIONAL, "avg_note") if framework_row else _OPTIONAL
    if not isinstance(row, Mapping) or not set(required) <= set(row) <= {*required, *optional}:
        got = sorted(row) if isinstance(row, Mapping) else type(row).__name__
        raise PublishedError(
            f"{at}: expected the keys {list(required)} and optionally {list(optional)}, got {got}"
        )
    for key in _REQUIRED[:4]:
        if not isinstance(row[key], str) or not row[key]:
            raise PublishedError(f"{at}.{key}: expected a non-empty string, got {row[key]!r}")
    framework = row.get("framework") or default_framework()
    others = tuple(f for f in framework_names() if f != default_framework())
    if framework_row and framework not in others:  # framework_rows: the other frameworks' rows only
        others = ", ".join(others)
        raise PublishedError(f"{at}.framework: expected one of {others}, got {framework!r}")
    note = row.get("avg_note", "")
    if not isinstance(note, str) or ("avg_note" in row and not note.strip()):
        raise PublishedError(f"{at}.avg_note: expected a non-empty sentence, got {note!r}")
    scores = row["scores"]
    if not isinstance(scores, Mapping) or not scores:
        raise PublishedError(f"{at}.scores: expected a non-empty mapping of task name to score")
    for key, value in scores.items():
        if not isinstance(key, str) or not _is_number(value):
            raise PublishedError(f"{at}.scores: {key!r}: {value!r} is not a task name with a finite number")
    scores = {k: float(v) for k, v in scores.items()}
    derived = row.get("derived") or {}
    if not isinstance(derived, Mapping):
        raise PublishedError(f"{at}.derived: expected a mapping score -> 'a − b (why)', got {derived!r}")
    for key, text in derived.items():
        if key not in scores or not isinstance(text, str):
            raise PublishedError(f"{at}.derived.{key}: expected the arithmetic of one of its scores")
        try:
            value = evaluate_arithmetic(text)
        except ValueError as err:
            raise PublishedError(f"{at}.derived.{key}: {err}") from None
        if abs(value - scores[key]) > _DERIVED_TOLERANCE:
            raise PublishedError(
                f"{at}.derived.{key}: {text!r} = {value:.4f}, but the row's {key} is {scores[key]:.4f}"
            )
    flag = row.get("paper_baseline", False)
    if not isinstance(flag, bool):
        raise PublishedError(f"{at}.paper_baseline: expected true or false, got {flag!r}")
    if average_of and "avg" in scores and all(t in scores for t in average_of):
        mean = sum(scores[t] for t in average_of) / len(average_of)
        off = abs(mean - scores["avg"]) > AVG_TOLERANCE
        if off and not note:
            raise PublishedError(
                f"{at}.scores.avg = {scores['avg']:.2f}, but the mean of its {len(average_of)} tasks "
                f"({', '.join(average_of)}) is {mean:.4f}: more than {AVG_TOLERANCE} apart"
            )
        if note and not off:
            raise PublishedError(f"{at}.avg_note: its avg is the mean of its tasks; drop the note")
    return PublishedRow(
        row["backbone"],
        row["loss"],
        row["label"],
        row["source"],
        scores,
        dict(derived),
        flag,
        framework,
        note,
    )


def parse_published(raw: Any, where: str = PUBLISHED_FILE, key: str = "rows") -> tuple[PublishedRow, ...]:
    """The rows under ``key`` of a loaded ``published.yaml`` document (``{"average_of": [...],
    "rows": [...], "framework_rows": [...]}``), checked: see the module docstring. ``rows`` (SimCSE's)
    must be there; ``framework_rows`` may be absent (no rows)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("rows"), list):
        raise PublishedError(f"{where}: expected a mapping with a 'rows' list")
    rows = raw.get(key, [])
    if not isinstance(rows, list):
        raise PublishedError(f"{where}: {key}: expected a list of rows, got {type(rows).__name__}")
    average_of = raw.get("average_of") or []
    if not isinstance(average_of, list) or not all(isinstance(t, str) for t in average_of):
        raise PublishedError(f"{where}: average_of: expected a list of task names, got {average_of!r}")
    return tuple(
        _parse_row(row, f"{where}: {key}[{i}]", tuple(average_of), framework_row=key != "rows")
        for i, row in enumerate(rows)
    )


def load_published(key: str = "rows") -> tuple[PublishedRow, ...]:
    """The rows under ``key`` (``rows``: SimCSE's; ``framework_rows``) of the packaged
    ``published.yaml``, in file order."""
    text = resources.files(__package__).joinpath(PUBLISHED_FILE).read_text(encoding="utf-8")
    return parse_published(yaml.safe_load(text), key=key)


PUBLISHED: tuple[PublishedRow, ...] = load_published()
PUBLISHED_FRAMEWORKS: tuple[PublishedRow, ...] = load_published("framework_rows")


def backbone_key(name: str) -> str:
    """A backbone reference as ``published.yaml`` names it (the hub id without its org prefix)."""
    for org in _HUB_ORGS:
        name = name.removeprefix(org)
    return name


def published_rows(
    *names: str, rows: tuple[PublishedRow, ...] | None = None, framework: str | None = None
) -> list[PublishedRow]:
    """Published rows of ``framework`` (default: the paper's own, the registry's default framework)
    for the first of ``names`` (a sweep name, then its source) that has any."""
    framework = framework or default_framework()
    if rows is None:
        rows = PUBLISHED if framework == default_framework() else PUBLISHED_FRAMEWORKS
    rows = tuple(r for r in rows if r.framework == framework)
    for name in names:
        key = backbone_key(name)
        found = [r for r in rows if r.backbone == key]
        if found:
            return found
    return []


def published_backbones(rows: tuple[PublishedRow, ...] | None = None) -> list[str]:
    """The backbones with published rows (the paper's: SimCSE's rows unless ``rows``), in file order."""
    return list(dict.fromkeys(r.backbone for r in (PUBLISHED if rows is None else rows)))


def published_gains(rows: tuple[PublishedRow, ...] | None = None) -> dict[str, dict[str, float]]:
    """``{loss: {backbone: gain}}``: the published gain of each treated loss's ``avg`` over the
    Focal-InfoNCE paper's own SimCSE baseline (the ``paper_baseline`` row) of the same backbone, in file
    order, rounded to the published 2 decimals (e.g. BERT-base 77.32 − 75.68 = +1.64)."""
    rows = PUBLISHED if rows is None else rows
    out: dict[str, dict[str, float]] = {}
    for backbone in published_backbones(rows):
        mine = [r for r in rows if r.backbone == backbone and "avg" in r.scores]
        base = next((r for r in mine if r.paper_baseline), None)
        if base is None:
            continue
        for r in mine:
            if r.loss != base.loss:
                out.setdefault(r.loss, {})[backbone] = round(r.scores["avg"] - base.scores["avg"], 2)
    return out
