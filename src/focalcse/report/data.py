"""The pipeline outputs the report reads (every path from :class:`focalcse.layout.Layout`):
significance, per-run evaluation and training metrics, curves, ablation items and hard negatives."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.layout import Layout

RunKey = tuple[str, str, int]  # (backbone, loss, seed)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def maybe_json(path: Path) -> Any:
    """The JSON at ``path``, or None if there is no such file."""
    return read_json(path) if path.is_file() else None


@dataclass
class ReportData:
    """The pipeline outputs the report shows, restricted to the current params' sweep."""

    significance: dict[str, Any]
    evals: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    trains: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    curves: dict[RunKey, tuple[list, list]] = field(default_factory=dict)
    ablation: dict[str, list[tuple[float, dict[str, Any] | None]]] = field(default_factory=dict)
    hard_negatives: dict[str, Any] | None = None


def ablation_values(params: Params) -> dict[str, tuple[float, ...]]:
    """The swept values per ablation kind (``tau``: Table 4, ``m``: Table 5), in params order."""
    return {"tau": params.ablation.temperatures, "m": params.ablation.ms}


def load_report_data(params: Params, layout: Layout) -> ReportData:
    """Read every output the report uses; runs outside the current sweep are ignored."""
    data = ReportData(significance=read_json(layout.significance_file))
    sw = params.sweep
    for b in sw.backbones:
        for loss in sw.losses:
            for seed in sw.seeds:
                key = (b, loss, seed)
                ev = maybe_json(layout.eval_metrics(*key))
                if ev is not None:
                    data.evals[key] = ev
                tr = maybe_json(layout.train_metrics(*key))
                if tr is not None:
                    data.trains[key] = tr
                lc = maybe_json(layout.loss_curve(*key))
                dc = maybe_json(layout.dev_curve(*key))
                if lc is not None or dc is not None:
                    data.curves[key] = (lc or [], dc or [])
    items = (
        [read_json(p) for p in sorted(layout.ablation_dir.glob("*.json"))]
        if layout.ablation_dir.is_dir()
        else []
    )
    for kind, values in ablation_values(params).items():
        data.ablation[kind] = [(v, _ablation_item(items, kind, v)) for v in values]
    data.hard_negatives = maybe_json(layout.hard_negatives_file)
    return data


def _ablation_item(items: list[dict[str, Any]], kind: str, value: float) -> dict[str, Any] | None:
    """The first item of ``kind`` whose value is ``value`` (to float tolerance), else None."""
    return next(
        (
            it
            for it in items
            if it.get("kind") == kind and math.isclose(float(it.get("value", math.nan)), value)
        ),
        None,
    )
