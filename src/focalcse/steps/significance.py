"""Step ``significance``: mean±std over seeds, paired t-tests of every loss against the baseline and
their Holm-adjusted p-values (one family per backbone and loss: the tasks and ``avg``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from focalcse.atomic import write_json
from focalcse.config import Params
from focalcse.data.tasks import TASKS
from focalcse.eval.significance import significance
from focalcse.layout import Layout
from focalcse.provenance import provenance


def load_eval_runs(eval_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every evaluation JSON in ``eval_dir`` (each carries backbone/loss/seed in ``meta``)."""
    runs = []
    for path in sorted(Path(eval_dir).glob("*.json")):
        data = json.loads(path.read_text())
        missing = [k for k in ("backbone", "loss", "seed") if k not in data.get("meta", {})]
        if missing:
            raise ValueError(f"{path}: meta lacks {missing}; not written by the evaluate stage")
        runs.append(data)
    if not runs:
        raise ValueError(f"{eval_dir}: no evaluation JSON files")
    return runs


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Per sweep backbone, over the sweep's seeds; written to ``layout.significance_file``."""
    sweep, sig = params.sweep, params.significance
    runs = [r for r in load_eval_runs(layout.eval_dir) if r["meta"]["backbone"] in sweep.backbones]
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
    write_json(layout.significance_file, out)
    return out
