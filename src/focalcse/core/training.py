"""Unsupervised SimCSE training with any registered contrastive loss (InfoNCE, Focal-InfoNCE, ...).

Each batch of N sentences is encoded twice in train mode in one forward over the concatenated
(2N, L) batch, so the two dropout masks give two views; the loss compares view 1 with view 2. AdamW
(eps 1e-8, betas (0.9, 0.999)), linear decay to 0 without warm-up, the global gradient norm clipped to
``max_grad_norm`` before every optimizer step (HF Trainer's ``max_grad_norm``, the official fork's
``clip_grad_norm_``), STS-B dev Spearman every ``eval_steps`` with the best checkpoint kept (SimCSE's
``--metric_for_best_model stsb_spearman --load_best_model_at_end``).

Precision: with ``precision: bf16`` the encoder's forward runs under autocast, while the loss math
(cosines, logits, cross-entropy) stays float32 (:mod:`focalcse.core.losses.base`); gradients,
their norm and the optimizer state are float32.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from tqdm.auto import tqdm

from focalcse.atomic import replace_dir, sha256_file  # noqa: F401 - sha256_file re-exported
from focalcse.core.batching import batch_order, tokenize_corpus  # noqa: F401 - re-exported
from focalcse.core.checkpoint import Checkpointer, rng_state  # noqa: F401 - Checkpointer re-exported
from focalcse.core.distributed import DistributedContext
from focalcse.core.encode import autocast_context
from focalcse.core.frameworks import default_framework, framework_module, framework_spec
from focalcse.core.heap import keep_freed_memory
from focalcse.core.losses import build_loss
from focalcse.core.model import SentenceEncoder
from focalcse.core.settings import TrainConfig, padded_reason, training_steps
from focalcse.errors import NonFiniteLossError  # re-exported: importers find it here


class FrameworkStep(Protocol):
    """What :func:`train` asks of a framework's step (:mod:`focalcse.core.frameworks`): its modules on
    the encoder and each batch's loss. Declared here, so the loop depends on no framework module."""

    name: str
    settings: dict[str, Any]  # its own settings (the resume fingerprint, the model record; {}: none)

    def attach(self, encoder: SentenceEncoder) -> None:
        """Add the framework's trained or frozen modules to ``encoder`` (before the optimizer is built,
        so they train with it and are saved in its checkpoints)."""

    def loss(
        self, encoder: nn.Module, loss_fn: nn.Module, rows: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The training loss of one batch (``rows``: this rank's corpus token ids with special tokens;
        ``encoder``: the encoder, or its DDP wrapper under torchrun) and any extra numbers to log (e.g.
        its loss parts)."""


MetricsCallback = Callable[[dict[str, float], int], None]


def _no_log(metrics: dict[str, float], step: int) -> None:
    return None


@dataclass
class TrainResult:
    best_step: int
    best_dev: float
    steps: int
    train_seconds: float
    sentences_per_second: float
    peak_memory_mb: float
    sentences_seen: int = 0
    # the median of this process's step times (seconds; dev evaluations and checkpoints not included):
    # a resumed run's median covers the steps it ran itself
    step_seconds_median: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)
    dev_curve: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Loop:
    """Everything one training run holds between steps (built by :func:`_setup`)."""

    encoder: SentenceEncoder
    model: nn.Module  # `encoder`, or its DDP wrapper
    loss_fn: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    batches: list[list[int]]
    ids_column: Any
    device: torch.device
    ckpt: Checkpointer
    ckpt_every: int
    best_dir: Path
    work: Path
    result: TrainResult
    start_step: int
    framework: FrameworkStep

    @property
    def total(self) -> int:
        return len(self.batches)


def train(
    encoder: SentenceEncoder,
    corpus: Any,
    cfg: TrainConfig,
    output_dir: str | os.PathLike,
    dev_evaluator: Callable[[SentenceEncoder], float] | None = None,
    log_metrics: MetricsCallback = _no_log,
    save_extra: dict[str, Any] | None = None,
    progress: bool = True,
    work_dir: str | os.PathLike | None = None,
    resume: bool = True,
    parallel: DistributedContext | None = None,
    framework: FrameworkStep | None = None,
) -> TrainResult:
    """Train ``encoder`` on ``corpus`` and leave the best-on-dev model in ``output_dir``.

    Args:
        encoder: the model (train pooler set; ``mlp_only_train`` as wanted).
        corpus: a ``datasets.Dataset`` with ``input_ids`` (see :func:`tokenize_corpus`) or a list of
            token-id lists.
        cfg: training hyper-parameters.
        output_dir: where the best model lands (an HF + sentence-transformers folder). It appears only
            when training succeeds: checkpoints go to ``work_dir`` and are moved here at the end, so a
            failed run never leaves a partial model where DVC (or a user) would take it as finished.
        dev_evaluator: returns STS-B dev Spearman x 100; None trains without selection (last model kept).
        log_metrics: ``callback(metrics, step)``; loss, lr and the pre-clip gradient norm
            (``grad_norm``) every ``log_every`` steps, dev Spearman at each evaluation.
        save_extra: extra fields recorded in the saved model's ``focalcse.json``.
        progress: show a tqdm bar.
        work_dir: checkpoint folder (default: hidden ``.<name>.work`` beside ``output_dir``); removed on
            success, kept after a failure.
        resume: continue from the last checkpoint in ``work_dir`` when it was written by a run with the
            same config and corpus size (model, optimizer, scheduler, RNG states, data position and
            best-so-far are restored, so the result equals an uninterrupted run).
        parallel: this process's place in a ``torchrun`` job (:func:`focalcse.core.distributed.init_distributed`);
            ``cfg.batch_size`` is then the global batch, split over the ranks, and the loss uses the
            global batch's negatives. Only rank 0 evaluates, saves, checkpoints and logs. None: one process.
        framework: the framework's step (:mod:`focalcse.core.frameworks`): it adds its modules to
            ``encoder`` and computes each step's loss from the batch's token ids with the registry's loss;
            what its SPEC ``refuses`` (DDP, GradCache) is refused. None: the default framework's step
            (the registry's ``default_framework()``, whose module's ``step(encoder, cfg)`` builds it).
    """
    output_dir = Path(output_dir)
    work = Path(work_dir) if work_dir is not None else output_dir.parent / f".{output_dir.name}.work"
    parallel = parallel or DistributedContext()
    if not parallel.is_main:  # rank 0 alone evaluates, saves, logs and shows progress
        dev_evaluator, log_metrics, progress = None, _no_log, False
    loop = _setup(encoder, corpus, cfg, work, parallel, resume, framework)
    if loop.start_step and progress:
        tqdm.write(f"resuming {cfg.loss} seed {cfg.seed} from step {loop.start_step} ({loop.ckpt.folder})")

    def evaluate(step: int) -> None:
        if dev_evaluator is not None:
            _evaluate_dev(loop, step, dev_evaluator, log_metrics, save_extra)

    if cfg.eval_at_start and loop.start_step == 0:
        evaluate(0)
    encoder.train()
    total, result = loop.total, loop.result
    bar = tqdm(
        total=total,
        initial=loop.start_step,
        desc=f"train {cfg.loss} seed {cfg.seed}",
        disable=not progress,
        dynamic_ncols=True,
    )
    step_times: list[float] = []
    for step, idx in enumerate(loop.batches[loop.start_step :], start=loop.start_step + 1):
        t0 = time.perf_counter()
        try:
            loss, lr, grad_norm, parts = _step(loop, cfg, idx, parallel, step)
        except NonFiniteLossError:
            bar.close()
            raise
        step_times.append(time.perf_counter() - t0)
        result.train_seconds += step_times[-1]
        result.sentences_seen += len(idx)
        if step % cfg.log_every == 0 or step == total:
            metrics = {"loss": float(loss.item()), "lr": float(lr), "grad_norm": grad_norm, **parts}
            result.history.append({"step": step, **metrics})
            log_metrics(metrics, step)
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}", best=f"{result.best_dev:.2f}")
        if dev_evaluator is not None and (step % cfg.eval_steps == 0 or step == total):
            evaluate(step)
            encoder.train()
        if step % loop.ckpt_every == 0 and step < total:
            # every rank's RNG (its own dropout masks): a resumed job continues each rank's stream
            rng = parallel.all_gather_object(rng_state())
            if parallel.is_main:
                loop.ckpt.save(step, encoder, loop.optimizer, loop.scheduler, result, rng_ranks=rng)
    bar.close()
    result.step_seconds_median = statistics.median(step_times) if step_times else 0.0
    _finish(loop, output_dir, parallel, keep_last=dev_evaluator is None, save_extra=save_extra)
    return result


def _finish(
    loop: _Loop,
    output_dir: Path,
    parallel: DistributedContext,
    keep_last: bool,
    save_extra: dict[str, Any] | None,
) -> None:
    """Publish the kept model (the last one when there was no dev selection), drop the checkpoints,
    and fill in the run's throughput and memory."""
    result = loop.result
    if parallel.is_main:
        if keep_last:
            result.best_step = loop.total
            loop.encoder.save(loop.best_dir, extra=_extra(save_extra, loop.total, None))
        replace_dir(loop.best_dir, output_dir)
        shutil.rmtree(loop.work, ignore_errors=True)
    parallel.barrier()  # the other ranks return once the model is in place
    t = result.train_seconds
    result.sentences_per_second = result.sentences_seen / t if t > 0 else 0.0
    result.peak_memory_mb = _peak_memory_mb(loop.device)


def _setup(
    encoder: SentenceEncoder,
    corpus: Any,
    cfg: TrainConfig,
    work: Path,
    parallel: DistributedContext,
    resume: bool,
    framework: FrameworkStep | None = None,
) -> _Loop:
    """Seed, place the model, build loss / optimizer / schedule / batches, and restore a checkpoint.
    ``framework`` None: the default framework's step (the registry's ``default_framework()``, whose
    module's ``step(encoder, cfg)`` builds it)."""
    if framework is None:
        framework = framework_module(default_framework()).step(encoder, cfg)
    refuses = framework_spec(framework.name).refuses
    if parallel.distributed and "ddp" in refuses:
        raise ValueError(
            f"framework {framework.name!r} trains in one process only: torchrun/DDP is not supported for "
            "it (docs/frameworks.md); run the stage without torchrun"
        )
    if cfg.grad_cache_chunk and "gradcache" in refuses:
        raise ValueError(
            f"framework {framework.name!r} does not support GradCache: set train.grad_cache_chunk: 0 for "
            f"its items (got {cfg.grad_cache_chunk}; docs/frameworks.md)"
        )
    framework.attach(encoder)
    encoder.unpad = _use_unpad(encoder, cfg, framework)
    torch.manual_seed(parallel.rank_seed(cfg.seed))  # rank 0 keeps cfg.seed
    device = torch.device(cfg.device)
    if device.type == "cpu":
        keep_freed_memory()  # the step's large tensors reuse the heap instead of fresh mappings
    encoder.to(device)
    model = parallel.wrap_model(encoder)  # DDP under torchrun; `encoder` is evaluated and saved
    loss_fn = parallel.wrap_loss(build_loss(cfg.loss, cfg.temperature, **cfg.loss_kwargs()))
    ids_column = corpus["input_ids"] if not isinstance(corpus, list) else corpus
    n = len(ids_column)
    batches = batch_order(n, cfg.batch_size, cfg.epochs, cfg.seed)
    # ConfigError (a ValueError) when max_steps exceeds the batches or there is none: the check stage
    # applies the same function to every item from params, before DVC deletes any output
    batches = batches[: training_steps(cfg, n)]
    batches = parallel.usable_batches(batches)  # all ranks: same global batches, same step count
    total = len(batches)
    if total == 0:
        raise ValueError(f"no training batch: {n} sentences with batch_size {cfg.batch_size}")
    # HF Trainer's AdamW settings (SimCSE), written out so a torch default change cannot move them.
    # The fused kernel (CPU and CUDA): the same update in one pass over each tensor, 4.5x faster than
    # the default on the 2-core CPU for all-MiniLM-L6-v2 (docs/performance.md).
    optimizer = torch.optim.AdamW(
        encoder.parameters(),
        lr=cfg.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=cfg.weight_decay,
        fused=device.type in ("cpu", "cuda") or None,
    )
    # Linear decay to 0 over the run, no warm-up (SimCSE / HF Trainer defaults).
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total))
    result = TrainResult(
        best_step=-1,
        best_dev=-math.inf,
        steps=total,
        train_seconds=0.0,
        sentences_per_second=0.0,
        peak_memory_mb=0.0,
    )
    fingerprint = {"config": cfg.to_dict(), "sentences": n, "steps": total}
    if parallel.distributed:  # the sharding depends on it: resume only with the same number of ranks
        fingerprint["world_size"] = parallel.world_size
    if framework.settings:  # a checkpoint of other framework settings is not resumed
        fingerprint["framework"] = framework.settings
    ckpt = Checkpointer(work / "last", fingerprint=fingerprint)  # keeps work/last and work/previous
    start_step = ckpt.load(encoder, optimizer, scheduler, result, rank=parallel.rank) if resume else 0
    return _Loop(
        encoder=encoder,
        model=model,
        loss_fn=loss_fn,
        optimizer=optimizer,
        scheduler=scheduler,
        batches=batches,
        ids_column=ids_column,
        device=device,
        ckpt=ckpt,
        ckpt_every=cfg.checkpoint_steps or cfg.eval_steps,
        best_dir=work / "best",
        work=work,
        result=result,
        start_step=start_step,
        framework=framework,
    )


def _use_unpad(encoder: SentenceEncoder, cfg: TrainConfig, framework: FrameworkStep) -> bool:
    """Whether this run's train-mode forwards skip the padding (``train.unpad``), as
    :func:`focalcse.core.settings.padded_reason` decides it (the recorded config asks the same): items
    of a framework whose step takes it (its SPEC's ``unpad``) on a backbone the unpadded forward covers."""
    reason = padded_reason(cfg, framework.name, encoder.backbone.config.to_dict())
    if reason is not None and cfg.unpad and framework_spec(framework.name).unpad:
        warnings.warn(
            f"train.unpad: training padded, the unpadded forward does not cover {reason}", stacklevel=3
        )
    return reason is None


def _step(
    loop: _Loop, cfg: TrainConfig, idx: list[int], parallel: DistributedContext, step: int
) -> tuple[torch.Tensor, float, float, dict[str, float]]:
    """One optimizer step on global batch ``idx``.

    After ``loss.backward()`` the gradients are complete on every path: GradCache's re-forward runs
    inside that backward, and DDP all-reduces (averages) them during it, so the norm clipped here is
    the global one, equal on every rank.

    Returns:
        The loss, the learning rate the step used, the total gradient norm before clipping, and a
        framework's extra numbers (its loss parts; empty for SimCSE).

    Raises:
        NonFiniteLossError: the loss or the gradient norm is NaN or inf (before the optimizer step, so
            the weights stay finite).
    """
    rows = [loop.ids_column[i] for i in parallel.shard(idx)]  # this rank's part (all of it in one process)
    with autocast_context(loop.device, cfg.precision):
        # the framework's loss of the batch; ``loop.model`` is the DDP wrapper under torchrun (only a
        # framework that does not refuse DDP gets one) and the encoder itself otherwise
        loss, parts = loop.framework.loss(loop.model, loop.loss_fn, rows, loop.device)
    if not torch.isfinite(loss):
        raise NonFiniteLossError(
            f"loss is {loss.item()} at step {step} (loss={cfg.loss}, lr={cfg.lr}, temperature={cfg.temperature}); "
            f"training stopped. Last good checkpoint: {loop.ckpt.folder} (step {loop.ckpt.step}); "
            f"best model so far: {loop.best_dir} (step {loop.result.best_step})"
        )
    loop.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    # max_norm inf (clipping off) still returns the norm; the scale factor is then clamped to 1.0
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_(loop.encoder.parameters(), max_norm))
    if not math.isfinite(grad_norm):
        raise NonFiniteLossError(
            f"gradient norm is {grad_norm} at step {step} (loss {loss.item():.6g}, loss={cfg.loss}, lr={cfg.lr}, "
            f"temperature={cfg.temperature}, precision={cfg.precision}); training stopped before the "
            f"optimizer step. Last good checkpoint: {loop.ckpt.folder} (step {loop.ckpt.step}); "
            f"best model so far: {loop.best_dir} (step {loop.result.best_step})"
        )
    loop.optimizer.step()
    lr = loop.scheduler.get_last_lr()[0]
    loop.scheduler.step()
    return loss, lr, grad_norm, parts


def _evaluate_dev(
    loop: _Loop,
    step: int,
    dev_evaluator: Callable[[SentenceEncoder], float],
    log_metrics: MetricsCallback,
    save_extra: dict[str, Any] | None,
) -> None:
    """Score STS-B dev; keep the model in ``best_dir`` if it is the best so far (never at step 0)."""
    result = loop.result
    with loop.encoder.selection_mode():  # PromptBERT: denoised, as its official dev selection
        dev = float(dev_evaluator(loop.encoder))
    result.dev_curve.append({"step": step, "stsb_dev_spearman": dev})
    log_metrics({"stsb_dev_spearman": dev}, step)
    if step > 0 and dev > result.best_dev:
        result.best_step, result.best_dev = step, dev
        loop.encoder.save(loop.best_dir, extra=_extra(save_extra, step, dev))


def _extra(extra: dict[str, Any] | None, step: int, dev: float | None) -> dict[str, Any]:
    return {**(extra or {}), "best_step": step, "stsb_dev_spearman": dev}


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:  # peak resident set of this process (Linux: KiB)
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:  # pragma: no cover
        return float("nan")
