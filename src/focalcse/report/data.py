"""The pipeline outputs the report reads (each result document with its ``meta``/``subsets``
companions, :mod:`focalcse.results`) (every path from :class:`focalcse.layout.Layout`):
significance, per-run evaluation and training metrics, curves, ablation items and hard negatives.

An ablation table's default point (the ablation loss's effective τ or m) is not an ablation item: it is
the main sweep's run of (ablation backbone, ``ablation.loss``, ``ablation.seed``), read from that run's
evaluation and training metrics; an ablation file at that value (e.g. left from an older parameter
set) is ignored.

SimCSE's runs are ``evals`` / ``trains`` / ``curves``, as before frameworks existed; each other
framework of ``sweep.frameworks`` has its evaluation and training metrics under ``framework_evals`` /
``framework_trains`` (their curves are not read: the per-run figures are SimCSE's). A missing item file
is simply absent, as for SimCSE; :meth:`ReportData.significance_of` gives a framework's part of
``significance.json`` in the shape of SimCSE's (None when the document has none)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.layout import ABLATION_KINDS, Layout, result_files
from focalcse.results import maybe_result, read_result

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
    reference: str = ""  # the sweep's first framework: its runs are evals / trains / curves
    evals: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    trains: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    curves: dict[RunKey, tuple[list, list]] = field(default_factory=dict)
    ablation: dict[str, list[AblationPoint]] = field(default_factory=dict)  # kind -> points, ascending
    hard_negatives: dict[str, Any] | None = None
    # every other framework of the sweep -> its runs, as evals / trains are the reference's
    framework_evals: dict[str, dict[RunKey, dict[str, Any]]] = field(default_factory=dict)
    framework_trains: dict[str, dict[RunKey, dict[str, Any]]] = field(default_factory=dict)

    def significance_of(self, framework: str) -> dict[str, Any] | None:
        """``significance.json`` as the reference framework's part reads (``baseline``, ``alpha``,
        ``holm_family``, ``backbones``) for ``framework``: the document itself for the reference, else its
        ``frameworks.<framework>`` backbones under the same top-level keys; None when it has none
        (e.g. written before the framework joined the sweep)."""
        if framework == self.reference:
            return self.significance
        part = (self.significance.get("frameworks") or {}).get(framework)
        if part is None:
            return None
        return {**{k: v for k, v in self.significance.items() if k != "frameworks"}, **part}


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
    sw = params.sweep
    ref = sw.reference
    data = ReportData(significance=read_result(layout.significance_file), reference=ref)
    for b in sw.backbones:
        for loss in sw.losses:
            for seed in sw.seeds:
                key = (b, loss, seed)
                ev = maybe_result(layout.eval_metrics(*key, ref))
                if ev is not None:
                    data.evals[key] = ev
                tr = maybe_result(layout.train_metrics(*key, ref))
                if tr is not None:
                    data.trains[key] = tr
                lc = maybe_json(layout.loss_curve(*key, ref))
                dc = maybe_json(layout.dev_curve(*key, ref))
                if lc is not None or dc is not None:
                    data.curves[key] = (lc or [], dc or [])
    for f in sw.frameworks[1:]:
        evals, trains = data.framework_evals.setdefault(f, {}), data.framework_trains.setdefault(f, {})
        for b in sw.backbones:
            for loss in sw.losses:
                for seed in sw.seeds:
                    key = (b, loss, seed)
                    ev = maybe_result(layout.eval_metrics(*key, f))
                    if ev is not None:
                        evals[key] = ev
                    tr = maybe_result(layout.train_metrics(*key, f))
                    if tr is not None:
                        trains[key] = tr
    items = [read_result(p) for p in result_files(layout.ablation_dir)]
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
    data.hard_negatives = merge_items(
        [
            hn
            for b in sw.backbones
            for loss in sw.losses
            if (hn := maybe_result(layout.hard_negatives_file(b, loss))) is not None
        ]
    )
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


def merge_items(items: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """One document of every ``hard_negatives`` item (one per backbone × loss, each holding the
    starting model's and its loss's cosines): per backbone the pairs with every model's cosine, the
    mean cosines and the models; ``wall_seconds`` summed (each item's in ``item_wall_seconds``), every
    item's ``meta`` under ``metas``.
    The items of one backbone must have chosen the same pairs (same starting model and params)."""
    if not items:
        return None
    first = items[0]
    out: dict[str, Any] = {k: first[k] for k in ("split", "max_gold", "k", "seed")}
    out["backbones"], out["wall_seconds"], out["metas"] = {}, 0.0, []
    out["item_wall_seconds"] = [it["wall_seconds"] for it in items if "wall_seconds" in it]  # one per item
    for it in items:
        loss, b = it["loss"], it["backbone"]
        entry = out["backbones"].setdefault(
            b,
            {
                "source": it["source"],
                "start_pooler": it["start_pooler"],
                "models": {"start": it["source"]},
                "candidates": it["candidates"],
                "mean_cos": {"start": it["mean_cos"]["start"]},
                "pairs": [{**p, "cos": {"start": p["cos"]["start"]}} for p in it["pairs"]],
            },
        )
        if [p["index"] for p in entry["pairs"]] != [p["index"] for p in it["pairs"]]:
            raise ValueError(
                f"hard negatives of {b}: the {loss} item chose other pairs than the first item "
                "(rerun the hard_negatives stage: its items disagree on the starting model or params)"
            )
        entry["models"][loss] = it["model"]
        entry["mean_cos"][loss] = it["mean_cos"][loss]
        for merged, p in zip(entry["pairs"], it["pairs"]):
            merged["cos"][loss] = p["cos"][loss]
        out["wall_seconds"] += it.get("wall_seconds", 0.0)
        if "meta" in it:
            out["metas"].append(it["meta"])
    return out
