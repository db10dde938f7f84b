"""Focal-InfoNCE overhead: its training step time against InfoNCE's, in our trainer.

Three figures, all on the same batches (same seed): the median step time per loss over alternating
``train()`` runs; the same training step on two model copies alternating step by step on the same
batch (the paired ratio, robust to other load on the machine); and the loss alone (forward + backward
on (N, d) tensors).

``bench.py --only loss``.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    BACKBONE,
    TARGETS,
    Bench,
    mark,
    median,
    ratio,
    run_worker,
    set_threads,
    step_intervals,
    train_config,
)

NAME = "loss"
LOSSES = ("infonce", "focal_infonce")


def worker_loss(spec: dict[str, Any]) -> dict[str, Any]:
    """Focal-InfoNCE vs InfoNCE: our trainer, same batches, alternating runs; and the loss alone."""
    import torch

    from focalcse.core.encode import autocast_context, pad_batch
    from focalcse.core.model import SentenceEncoder
    from focalcse.core.training import tokenize_corpus, train
    from focalcse.losses import build_loss

    set_threads(spec)
    base = SentenceEncoder.from_pretrained(
        BACKBONE, pooler="cls", mlp_only_train=True, max_seq_len=spec["max_len"], seed=spec["seed"]
    )
    corpus = tokenize_corpus(spec["sample_file"], base.tokenizer, spec["max_len"])
    steps: dict[str, list[float]] = {name: [] for name in LOSSES}
    cpu: dict[str, list[float]] = {name: [] for name in LOSSES}
    for rep in range(spec["reps"]):
        for loss in LOSSES if rep % 2 == 0 else LOSSES[::-1]:
            stamps: list[tuple[float, float]] = []
            with tempfile.TemporaryDirectory() as tmp:
                train(
                    copy.deepcopy(base),
                    corpus,
                    train_config(spec, loss),
                    Path(tmp) / "m",
                    log_metrics=lambda m, s, st=stamps: st.append((time.perf_counter(), time.process_time())),
                    progress=False,
                )
            steps[loss] += step_intervals([w for w, _ in stamps], spec["warmup"])
            cpu[loss] += step_intervals([c for _, c in stamps], spec["warmup"])
            print(f"  loss {loss} rep {rep + 1}: median step {median(steps[loss]) * 1e3:.0f} ms", flush=True)

    # Paired steps: the training step (2N forward, loss, backward, AdamW) on two model copies, one per
    # loss, alternating step by step on the same batch, so both see the same load; ratio per pair.
    ids_column = corpus["input_ids"]
    models = {name: copy.deepcopy(base).train() for name in LOSSES}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=spec["lr"]) for name, m in models.items()}
    fns = {name: build_loss(name, spec["temperature"], m=spec["m"]) for name in LOSSES}
    pair_ratios: list[float] = []
    n = spec["batch_size"]
    for k in range(spec["paired_steps"] + 2):
        rows = [list(ids_column[i]) for i in range((k % spec["steps"]) * n, (k % spec["steps"] + 1) * n)]
        ids, mask = pad_batch(rows, base.tokenizer.pad_token_id or 0)  # (N, L)
        ids2, mask2 = torch.cat([ids, ids]), torch.cat([mask, mask])  # (2N, L): two views
        took = {}
        for name in LOSSES if k % 2 == 0 else LOSSES[::-1]:
            t = time.perf_counter()
            with autocast_context(torch.device("cpu"), spec["precision"]):
                z = models[name](input_ids=ids2, attention_mask=mask2)  # (2N, d)
                loss = fns[name](z[:n].float(), z[n:].float())
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            took[name] = time.perf_counter() - t
        if k >= 2:  # first steps: one-off allocations
            pair_ratios.append(took["focal_infonce"] / took["infonce"])

    # The loss alone on (N, d) tensors, forward + backward, alternating, many iterations.
    gen = torch.Generator().manual_seed(0)
    d = base.backbone.config.hidden_size
    z1 = torch.randn(n, d, generator=gen, requires_grad=True)
    z2 = torch.randn(n, d, generator=gen, requires_grad=True)
    alone: dict[str, list[float]] = {name: [] for name in LOSSES}
    for i in range(400):
        for name in LOSSES if i % 2 == 0 else LOSSES[::-1]:
            t = time.perf_counter()
            fns[name](z1, z2).backward()
            alone[name].append(time.perf_counter() - t)
    return {
        "step_seconds": steps,
        "step_cpu_seconds": cpu,
        "paired_step_ratios": pair_ratios,
        "loss_alone_seconds": {k: v[50:] for k, v in alone.items()},
    }


def run(bench: Bench) -> dict[str, Any]:
    """The loss worker at ``--loss-precision``: ``--loss-reps`` x 2 trainer runs, then the paired steps."""
    args = bench.args
    print("focal vs infonce ...", flush=True)
    spec = {
        **bench.base,
        "precision": args.loss_precision,
        "steps": args.loss_steps,
        "warmup": 2,
        "reps": args.loss_reps,
        "paired_steps": args.loss_paired_steps,
    }
    raw = run_worker(worker_loss, spec, bench.work, "loss")
    return {"loss": summarise(raw), "loss_raw": raw}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    step = {k: median(v) for k, v in result["step_seconds"].items()}
    cpu = {k: median(v) for k, v in result.get("step_cpu_seconds", {}).items()}
    alone = {k: median(v) for k, v in result["loss_alone_seconds"].items()}
    return {
        "median_step_ms": {k: v * 1e3 for k, v in step.items()},
        "step_ratio_focal_over_infonce": ratio(step["focal_infonce"], step["infonce"]),
        "median_step_cpu_ms": {k: v * 1e3 for k, v in cpu.items()},
        "cpu_step_ratio_focal_over_infonce": ratio(cpu["focal_infonce"], cpu["infonce"]) if cpu else None,
        "paired_step_ratio": median(result.get("paired_step_ratios", [])),
        "n_paired_steps": len(result.get("paired_step_ratios", [])),
        "n_steps": {k: len(v) for k, v in result["step_seconds"].items()},
        "loss_alone_us": {k: v * 1e6 for k, v in alone.items()},
    }


def markdown(lo: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """RESULTS.md's Focal-InfoNCE vs InfoNCE section (``lo`` = ``report['loss']``)."""
    cfg = report["config"]
    r, pr = lo["step_ratio_focal_over_infonce"], lo["paired_step_ratio"]
    ms, us, cms = lo["median_step_ms"], lo["loss_alone_us"], lo.get("median_step_cpu_ms", {})
    target = TARGETS["focal_step_ratio"]
    return [
        f"## Focal-InfoNCE vs InfoNCE ({cfg['loss_precision']}, our trainer, same batches, alternating)",
        "",
        "| loss | median step ms (CPU ms) | steps timed | loss alone fwd+bwd us |",
        "|---|---:|---:|---:|",
        *(
            f"| {k} | {ms[k]:.0f} ({cms.get(k, float('nan')):.0f}) | {lo['n_steps'][k]} | {us[k]:.0f} |"
            for k in LOSSES
        ),
        "",
        f"Paired step-time ratio focal / infonce (median over {lo['n_paired_steps']} adjacent step pairs, same batch, "
        f"the trainer's step mirrored on two model copies): {pr:.3f}{mark(pr <= target)}. "
        f"Ratio of the trainer's median step times (alternating `train()` runs): {r:.3f}{mark(r <= target)} "
        f"(target <= {target}; CPU-time ratio {lo.get('cpu_step_ratio_focal_over_infonce') or float('nan'):.3f}).",
        "",
    ]
