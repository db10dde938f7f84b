"""Step ``train``: one framework × backbone × loss × seed run; the best-on-dev model, a metrics JSON,
two curves. Every registered framework plugs a :class:`focalcse.core.training.FrameworkStep` into the
training loop (:func:`framework_encoder`)."""

from __future__ import annotations

import time
from typing import Any

from focalcse.atomic import sha256_file, write_json
from focalcse.config import Params, TrainConfig
from focalcse.core.batching import tokenize_corpus
from focalcse.core.distributed import DistributedContext
from focalcse.core.frameworks import framework_module
from focalcse.core.model import SentenceEncoder
from focalcse.core.settings import recorded_train
from focalcse.core.training import MetricsCallback, train
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
    *,
    framework: str,
) -> dict[str, Any]:
    """Train matrix item (framework, backbone, loss, seed) into the layout's paths; see :func:`train_item`."""
    cfg = params.train_config(backbone, loss, seed, framework)
    item = layout.train_item(backbone, loss, seed, framework)
    return train_item(params, cfg, backbone, item, log_metrics, progress, parallel, framework=framework)


def framework_encoder(
    params: Params, cfg: TrainConfig, backbone: str, item: TrainItem, framework: str
) -> tuple[SentenceEncoder, Any, int]:
    """``(encoder, step, corpus_max_len)`` of one item: the encoder to train, the framework's training
    step and the token budget the corpus is tokenised with.

    The framework is its registered module (:mod:`focalcse.core.frameworks`), imported by computed name
    (so an item depends on its own framework's module only) and asked for
    ``training_setup(source, cfg, settings, prepared_dir)``."""
    source = params.backbone_source(backbone)
    module = framework_module(framework)
    return module.training_setup(source, cfg, params.frameworks.settings(framework), item.prepared_dir)


def train_item(
    params: Params,
    cfg: TrainConfig,
    backbone: str,
    item: TrainItem,
    log_metrics: MetricsCallback | None = None,
    progress: bool = True,
    parallel: DistributedContext | None = None,
    *,
    framework: str,
) -> dict[str, Any]:
    """Train ``cfg`` on ``backbone`` with ``framework``; write the best model, a metrics JSON and the
    loss / dev curves.

    ``parallel``: one rank of a ``torchrun`` job; only rank 0 evaluates and writes, the others
    return ``{}`` (for a framework whose SPEC does not refuse DDP).
    """
    source = params.backbone_source(backbone)
    start = time.perf_counter()
    encoder, step, corpus_len = framework_encoder(params, cfg, backbone, item, framework)
    parallel = parallel or DistributedContext()
    with parallel.main_first():  # rank 0 fills the datasets cache, the others read it
        corpus = tokenize_corpus(item.corpus_file, encoder.tokenizer, corpus_len)
    dev = stsb_dev_evaluator(str(item.sts_dir), batch_size=params.eval.batch_size, precision=cfg.precision)
    identity = {"backbone": backbone, "backbone_source": source, "loss": cfg.loss, "seed": cfg.seed}
    record = params.framework_record(framework)
    if record is not None or step.settings:  # a framework with nothing of its own (SimCSE) records none
        identity["framework"] = {**params.framework_settings(framework), **step.settings}
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
        framework=step,
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
        "step_seconds_median": result.step_seconds_median,
        "peak_memory_mb": result.peak_memory_mb,
        "meta": provenance(
            **identity,
            # what ran: the forward the loop took and the framework's sentence vector, as MLflow logs it
            train_config=recorded_train(
                cfg, framework, encoder.backbone.config.to_dict(), params.frameworks.settings(framework)
            ),
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
