"""Step ``significance``: mean±std over seeds, paired t-tests of every loss against the baseline and
their Holm-adjusted p-values (one family per backbone and loss: the tasks and ``avg``). Writes the
full document (``metrics/significance.json``, a plain output) and DVC's one metrics file, the
summary (``metrics/summary.json``)."""

from __future__ import annotations

from typing import Any

from focalcse.config import Params
from focalcse.data.tasks import TASKS
from focalcse.eval.significance import significance, summary
from focalcse.layout import Layout
from focalcse.provenance import provenance
from focalcse.results import read_result, write_result


def load_eval_runs(params: Params, layout: Layout) -> list[dict[str, Any]]:
    """The evaluation of every sweep item that has one (files of items outside the sweep are not
    read); each carries backbone/loss/seed in ``meta``."""
    sweep, runs = params.sweep, []
    for backbone in sweep.backbones:
        for loss in sweep.losses:
            for seed in sweep.seeds:
                path = layout.eval_metrics(backbone, loss, seed)
                if not path.is_file():
                    continue
                data = read_result(path)
                missing = [k for k in ("backbone", "loss", "seed") if k not in data.get("meta", {})]
                if missing:
                    raise ValueError(f"{path}: meta lacks {missing}; not written by the evaluate stage")
                runs.append(data)
    if not runs:
        raise ValueError(f"{layout.eval_dir}: no evaluation of any sweep item")
    return runs


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Per sweep backbone, over the sweep's seeds; written to ``layout.significance_file`` and
    summarised into ``layout.summary_file``."""
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
    )
    out["meta"] = provenance(runs=len(runs), eval_dir=str(layout.eval_dir))
    write_result(layout.significance_file, out)
    write_result(layout.summary_file, {**summary(out), "meta": out["meta"]})  # meta: a companion
    return out
