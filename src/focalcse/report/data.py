"""The pipeline outputs the report reads (every path from :class:`focalcse.layout.Layout`):
significance, per-run evaluation and training metrics, curves, ablation items and hard negatives.

An ablation table's default point (the ablation loss's effective τ or m) is not an ablation item: it is
the main sweep's run of (ablation backbone, ``ablation.loss``, ``ablation.seed``), read from that run's
evaluation and training metrics; an ablation file at that value (e.g. left from an older parameter
set) is ignored."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.layout import ABLATION_KINDS, Layout

RunKey = tuple[str, str, int]  # (backbone, loss, seed)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def maybe_json(path: Path) -> Any:
    """The JSON at ``path``, or None if there is no such file."""
    return read_json(path) if path.is_file() else None


@dataclass(frozen=True)
class AblationPoint:
    """One row of Table 4 / 5: the swept ``value`` and its metrics (``STSBenchmark``,
    ``stsb_dev_best``, ``best_step``, ...), None when not run; ``main_seed`` is the main-sweep seed
    whose run the point is (the default point), None for an ablation item."""

    value: float
    item: dict[str, Any] | None
    main_seed: int | None = None


@dataclass
class ReportData:
    """The pipeline outputs the report shows, restricted to the current params' sweep."""

    significance: dict[str, Any]
    evals: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    trains: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    curves: dict[RunKey, tuple[list, list]] = field(default_factory=dict)
    ablation: dict[str, list[AblationPoint]] = field(default_factory=dict)  # kind -> points, ascending
    hard_negatives: dict[str, Any] | None = None


def ablation_default(params: Params, kind: str) -> float | None:
    """The default point of ``kind`` (the ablation loss's effective τ or m); None if the loss has no
    such hyper-parameter (no main-sweep point, e.g. an m ablation of InfoNCE)."""
    try:
        return params.ablation_default(kind)
    except KeyError:
        return None


def ablation_points(params: Params, kind: str) -> tuple[float, ...]:
    """Every point of Table 4 (``tau``) / 5 (``m``), ascending: the trained values and the default."""
    if ablation_default(params, kind) is None:
        return tuple(sorted(params.ablation_values(kind)))
    return params.ablation_points(kind)


def main_run_point(evals: dict[str, Any] | None, trains: dict[str, Any] | None) -> dict[str, Any] | None:
    """An ablation row from a main-sweep run: STS-B test (and alignment, uniformity) from its
    evaluation, dev best, best step and steps from its training metrics; None without its evaluation."""
    if evals is None:
        return None
    point = {k: evals[k] for k in ("STSBenchmark", "alignment", "uniformity") if k in evals}
    for key in ("stsb_dev_best", "stsb_dev_start", "best_step", "steps", "final_loss"):
        if trains is not None and key in trains:
            point[key] = trains[key]
    return point


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
    ab = params.ablation
    main = (params.ablation_backbone, ab.loss, ab.seed)
    for kind in ABLATION_KINDS:
        default = ablation_default(params, kind)
        data.ablation[kind] = [
            AblationPoint(v, main_run_point(data.evals.get(main), data.trains.get(main)), ab.seed)
            if default is not None and math.isclose(v, default)
            else AblationPoint(v, _ablation_item(items, kind, v))
            for v in ablation_points(params, kind)
        ]
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
