"""Step ``evaluate``: every ``eval.tasks`` score of one trained model folder, with its recorded pooler."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any

from focalcse.config import EvalConfig, Params
from focalcse.core.model import SentenceEncoder, read_record
from focalcse.eval.sts_eval import evaluate_sts
from focalcse.layout import Layout
from focalcse.provenance import provenance
from focalcse.results import write_result

SETTING = "all (STS12-16 subsets pooled); wmean under 'wmean'; alignment / uniformity on STS-B dev"


def run(
    params: Params,
    layout: Layout,
    backbone: str,
    loss: str,
    seed: int,
    progress: bool = True,
    *,
    framework: str,
) -> dict[str, Any]:
    """Score the matrix item's model folder into ``layout.eval_metrics(...)``. The folder's record
    says how it encodes (pooler; a PromptBERT model its template and denoising)."""
    identity: dict[str, Any] = {"backbone": backbone, "loss": loss, "seed": seed, "framework": framework}
    return evaluate_model(
        params.eval,
        layout.model_dir(backbone, loss, seed, framework),
        layout.sts_dir,
        layout.eval_metrics(backbone, loss, seed, framework),
        identity=identity,
        progress=progress,
    )


def evaluate_model(
    cfg: EvalConfig,
    model_dir: str | os.PathLike,
    sts_dir: str | os.PathLike,
    out_file: str | os.PathLike,
    identity: dict[str, Any],
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a model folder written by the train step; ``identity`` goes into ``meta``."""
    record = read_record(model_dir)
    if record is None:
        raise ValueError(f"{model_dir}: no focalcse.json; not a model folder written by the train stage")
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(model_dir)
    result = evaluate_sts(
        encoder,
        str(sts_dir),
        tasks=cfg.tasks,
        batch_size=cfg.batch_size,
        precision=cfg.precision,
        progress=progress,
    )
    result["meta"] = provenance(
        **identity,
        model=str(model_dir),
        pooler=record.eval_pooler,
        best_step=(record.extra or {}).get("best_step"),
        eval_config=asdict(cfg),
        sts_dir=str(sts_dir),
        setting=SETTING,
        wall_time_s=time.perf_counter() - start,
    )
    write_result(out_file, result)
    return result
