"""Steps ``ablate_tau`` / ``ablate_m``: one item of the τ (Table 4) or m (Table 5) ablation."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.layout import ABLATION_KINDS, ABLATION_TASK, Layout, TrainItem
from focalcse.provenance import provenance
from focalcse.results import write_result
from focalcse.steps.evaluate import evaluate_model
from focalcse.steps.train import train_item


def run(params: Params, layout: Layout, kind: str, value: str, progress: bool = True) -> dict[str, Any]:
    """Train ``ablation.loss`` on the ablation backbone with seed ``ablation.seed``, τ (``kind="tau"``)
    or m (``kind="m"``) set to ``value`` and every other key the main sweep's run of that item has
    (its effective config: train, backbone and loss overrides; same length), exactly as the train
    stage would (best-on-dev model kept); then score STS-B test with that model, which lives in a
    temporary folder and is deleted. The default value's point is that main-sweep run itself, which
    the report reads; config validation refuses it here.

    ``value`` is the swept number as ``dvc.yaml`` renders it; it names the output file.
    """
    cfg = params.ablation_train_config(kind, float(value))
    backbone, ab = params.ablation_backbone, params.ablation
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="focalcse-ablation-") as tmp:
        t = Path(tmp)
        item = TrainItem(
            corpus_file=layout.corpus_file,
            sts_dir=layout.sts_dir,
            model_dir=t / "model",
            metrics_file=t / "train.json",
            curve_file=t / "loss.json",
            dev_file=t / "dev.json",
        )
        train = train_item(params, cfg, backbone, item, progress=progress, framework=params.sweep.reference)
        ev = evaluate_model(
            params.eval.with_tasks((ABLATION_TASK,)),
            item.model_dir,
            layout.sts_dir,
            t / "eval.json",
            identity={"backbone": backbone, "loss": ab.loss, "seed": ab.seed},
            progress=progress,
        )
    out = {
        "kind": kind,
        "value": float(value),
        "parameter": ABLATION_KINDS[kind],
        "backbone": backbone,
        "loss": ab.loss,
        "seed": ab.seed,
        "temperature": cfg.temperature,
        **cfg.loss_kwargs(),
        ABLATION_TASK: ev[ABLATION_TASK],
        "alignment": ev.get("alignment"),
        "uniformity": ev.get("uniformity"),
        "stsb_dev_best": train["stsb_dev_best"],
        "stsb_dev_start": train["stsb_dev_start"],
        "best_step": train["best_step"],
        "steps": train["steps"],
        "final_loss": train["final_loss"],
        "wall_seconds": time.perf_counter() - start,
        "meta": provenance(
            backbone=backbone,
            backbone_source=params.backbone_source(backbone),
            train_config=train["meta"]["train_config"],
            corpus=train["meta"]["corpus"],
            sts_dir=str(layout.sts_dir),
            model="deleted after scoring (ablation items keep metrics only)",
        ),
    }
    write_result(layout.ablation_metrics(kind, value), out)
    return out
