"""Step ``train``: one backbone × loss × seed run; the best-on-dev model, a metrics JSON, two curves."""

from __future__ import annotations

import time
from typing import Any

from focalcse.atomic import write_json
from focalcse.config import Params, TrainConfig
from focalcse.core.distributed import DistributedContext
from focalcse.core.model import SentenceEncoder
from focalcse.core.training import MetricsCallback, sha256_file, tokenize_corpus, train
from focalcse.eval.sts_eval import stsb_dev_evaluator
from focalcse.layout import Layout, TrainItem
from focalcse.provenance import provenance
from focalcse.results import write_result


def run(
    params: Params,
    layout: Layout,
    backbone: str,
    loss: str,
    seed: int,
    log_metrics: MetricsCallback | None = None,
    progress: bool = True,
    parallel: DistributedContext | None = None,
) -> dict[str, Any]:
    """Train matrix item (backbone, loss, seed) into the layout's paths; see :func:`train_item`."""
    cfg = params.train_config(backbone, loss, seed)
    return train_item(
        params, cfg, backbone, layout.train_item(backbone, loss, seed), log_metrics, progress, parallel
    )


def train_item(
    params: Params,
    cfg: TrainConfig,
    backbone: str,
    item: TrainItem,
    log_metrics: MetricsCallback | None = None,
    progress: bool = True,
    parallel: DistributedContext | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` on ``backbone``; write the best model, a metrics JSON and the loss / dev curves.

    ``parallel``: one rank of a ``torchrun`` job; only rank 0 evaluates and writes, the others
    return ``{}``.
    """
    source = params.backbone_source(backbone)
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(
        source,
        pooler=cfg.pooler,
        mlp_only_train=cfg.mlp_only_train,
        max_seq_len=cfg.max_seq_len,
        mlp_init="fresh",
        seed=cfg.seed,
    )
    parallel = parallel or DistributedContext()
    with parallel.main_first():  # rank 0 fills the datasets cache, the others read it
        corpus = tokenize_corpus(item.corpus_file, encoder.tokenizer, cfg.max_seq_len)
    dev = stsb_dev_evaluator(str(item.sts_dir), batch_size=params.eval.batch_size, precision=cfg.precision)
    identity = {"backbone": backbone, "backbone_source": source, "loss": cfg.loss, "seed": cfg.seed}
    result = train(
        encoder,
        corpus,
        cfg,
        item.model_dir,
        dev_evaluator=dev,
        log_metrics=log_metrics or (lambda m, s: None),
        save_extra={**identity, "train_config": cfg.to_dict()},
        progress=progress,
        parallel=parallel,
    )
    if not parallel.is_main:
        return {}
    metrics = {
        "best_step": result.best_step,
        "stsb_dev_best": result.best_dev,
        "stsb_dev_start": result.dev_curve[0]["stsb_dev_spearman"]
        if cfg.eval_at_start and result.dev_curve
        else None,
        "steps": result.steps,
        "final_loss": result.history[-1]["loss"] if result.history else None,
        "train_seconds": result.train_seconds,
        "wall_seconds": time.perf_counter() - start,
        "sentences_per_second": result.sentences_per_second,
        "peak_memory_mb": result.peak_memory_mb,
        "meta": provenance(
            **identity,
            train_config=cfg.to_dict(),
            corpus={
                "file": str(item.corpus_file),
                "sha256": sha256_file(item.corpus_file),
                "sentences": len(corpus),
            },
            sts_dir=str(item.sts_dir),
        ),
    }
    write_json(item.curve_file, result.history)
    write_json(item.dev_file, result.dev_curve)
    write_result(item.metrics_file, metrics)
    return metrics
