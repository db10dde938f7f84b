"""Step ``significance``: mean±std over seeds, paired t-tests of every loss against the baseline loss
of the same framework and backbone, and their Holm-adjusted p-values (one family per framework,
backbone and loss: the tasks and ``avg``). Writes the full document (``metrics/significance.json``, a
plain output) and DVC's one metrics file, the summary (``metrics/summary.json``).

The items are the ``evaluate`` stage's, one per framework of ``sweep.frameworks``
(:meth:`focalcse.layout.Layout.eval_metrics`); the first framework's results sit at the top level of
both files and every other one's under ``frameworks`` (:func:`focalcse.eval.significance.significance`)."""

from __future__ import annotations

from typing import Any

from focalcse.config import Params
from focalcse.data.tasks import TASKS
from focalcse.eval.significance import run_framework, significance, summary
from focalcse.layout import Layout
from focalcse.provenance import provenance
from focalcse.results import read_result, write_result


def load_eval_runs(params: Params, layout: Layout) -> list[dict[str, Any]]:
    """The evaluation of every sweep item that has one, the reference framework's first (files of items
    outside the sweep are not read); each carries backbone/loss/seed and its framework in ``meta`` (from
    the file's place when the meta names none; a meta naming another framework than its file's is
    refused)."""
    runs = []
    for framework, backbone, loss, seed in params.framework_items():
        path = layout.eval_metrics(backbone, loss, seed, framework)
        if not path.is_file():
            continue
        data = read_result(path)
        meta = data.get("meta", {})
        missing = [k for k in ("backbone", "loss", "seed") if k not in meta]
        if missing:
            raise ValueError(f"{path}: meta lacks {missing}; not written by the evaluate stage")
        if "framework" in meta and run_framework(data) != framework:
            raise ValueError(
                f"{path}: meta names framework {run_framework(data)!r}, but the file is a {framework} item"
            )
        if "framework" not in meta:
            data = {**data, "meta": {**meta, "framework": framework}}
        runs.append(data)
    if not runs:
        raise ValueError(f"{layout.eval_dir}: no evaluation of any sweep item")
    return runs


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Per framework and sweep backbone, over the sweep's seeds; written to
    ``layout.significance_file`` and summarised into ``layout.summary_file``."""
    sweep, sig = params.sweep, params.significance
    runs = load_eval_runs(params, layout)
    out = significance(
        runs,
        backbones=sweep.backbones,
        losses=sweep.losses,
        seeds=sweep.seeds,
        tasks=[t for t in TASKS if t in params.eval.tasks],
        baseline=sig.baseline,
        alpha=sig.alpha,
        frameworks=sweep.all_frameworks,
    )
    out["meta"] = provenance(runs=len(runs), eval_dir=str(layout.eval_dir))
    write_result(layout.significance_file, out)
    write_result(layout.summary_file, {**summary(out), "meta": out["meta"]})  # meta: a companion
    return out
