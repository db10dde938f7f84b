"""Where one training step's time goes: our SimCSE step on all-MiniLM-L6-v2, batch 64 x 2 views x 32 tokens.

The tool to read before and after a change to the training step (docs/performance.md, "Where a
training step's time goes"); ``tests/test_profile_step.py`` runs it on a tiny model.

Usage (the full preset's shape; bf16 autocast, the CPU default's precision)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python benchmarks/profile_step.py \\
        --precision bf16 --steps 20 --out-json benchmarks/profile_step.json

The step is the trainer's own (:func:`focalcse.core.training._setup` builds the model, loss, AdamW and
schedule; the phases below are :func:`focalcse.core.training._step`'s, in its order), timed phase by
phase with ``time.perf_counter`` (CPU: every op is synchronous):

- **data**: ``pad_batch`` of the batch's token ids and the two views' ``torch.cat``;
- **forward**, split by forward hooks on the encoder's modules: the Q/K/V and attention-output
  projections (``attention.self.{query,key,value}``, ``attention.output.dense``), the FFN
  (``intermediate.dense``, ``output.dense``), the attention itself (each self-attention module's time
  less its Q/K/V projections), layer norms and element-wise modules (LayerNorm, dropout, GELU),
  the embeddings (the whole embeddings module), and the rest of the forward (residual adds, masks,
  the pooler MLP);
- **loss**: the contrastive loss on the two views' vectors;
- **backward**: ``loss.backward()`` (one figure: autograd runs every layer's backward in one call);
- **optimizer**: ``zero_grad``, gradient clipping, ``AdamW.step`` and the schedule.

``--steps`` steps are timed after ``--warmup`` untimed ones, on sentences sampled from the mirror's
corpus. The hooks cost a little; the same steps are also timed without them (``step_seconds_plain``).
Prints a Markdown table of each part's share of the hooked step. ``--backbone`` takes another hub id
or HF folder (same pooler and loss).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (  # noqa: E402
    BACKBONE,
    data_paths,
    machine_info,
    sample_corpus,
    script_command,
    short_commit,
    train_config,
)

QKV = ("attention.self.query", "attention.self.key", "attention.self.value")
FFN = ("intermediate.dense", "output.dense")
ORDER = (
    "data",
    "forward: Q/K/V + attention-output projections",
    "forward: FFN",
    "forward: attention",
    "forward: layer norms + element-wise",
    "forward: embeddings",
    "forward: packing (pack / re-pad around attention; unpadded only)",
    "forward: rest (residual adds, masks, pooler MLP)",
    "loss",
    "backward",
    "optimizer (zero_grad, clip, AdamW, schedule)",
)


class Timers:
    """Seconds per category, accumulated by hooks and phases."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.on = False

    def add(self, key: str, seconds: float) -> None:
        if self.on:
            self.total[key] += seconds


def category(name: str, module: torch.nn.Module) -> str | None:
    """The category of a leaf-ish module by its qualified name (None: not timed on its own)."""
    if ".embeddings." in f".{name}." and not name.endswith("embeddings"):
        return None  # inside the embeddings module: counted with it
    if name.endswith("embeddings") and name.split(".")[-1] == "embeddings":
        return "forward: embeddings"
    if name.endswith(QKV):
        return "qkv"  # inside attention.self: subtracted from it
    if name.endswith("attention.output.dense"):
        return "output projection"
    if name.endswith(FFN) and "attention" not in name:
        return "forward: FFN"
    if name.endswith("attention.self"):
        return "attention.self"  # its projections are subtracted
    kind = type(module).__name__
    if "attention.self" in name:
        return None  # e.g. its attention-probability dropout: part of the attention
    if kind == "LayerNorm" or kind.startswith("Dropout") or kind.endswith("Activation") or kind == "GELU":
        return "forward: layer norms + element-wise"
    return None


def hook(encoder: torch.nn.Module, timers: Timers) -> list[Any]:
    handles = []
    for name, module in encoder.named_modules():
        cat = category(name, module)
        if cat is None:
            continue
        start: list[float] = []

        def pre(_m: Any, _args: Any, start: list[float] = start) -> None:
            start.append(time.perf_counter())

        def post(_m: Any, _args: Any, _out: Any, start: list[float] = start, cat: str = cat) -> None:
            timers.add(cat, time.perf_counter() - start.pop())

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles


def instrument_unpad(timers: Timers) -> None:
    """Time the unpadded forward's own functions (:mod:`focalcse.core.unpad`), which run no module the
    hooks see: its embeddings, its attention (scores, softmax, dropout, weighted sum), its dropout
    (an element-wise op) and the packing around attention. A function called inside another timed one
    (a dropout inside the attention, a pack inside the embeddings) counts with the outer one."""
    from focalcse.core import unpad

    depth = [0]

    def timed(fn: Any, cat: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    timers.add(cat, time.perf_counter() - t)

        return wrapper

    unpad._embed = timed(unpad._embed, "forward: embeddings")
    unpad._attend = timed(unpad._attend, "attend")
    unpad.dropout = timed(unpad.dropout, "forward: layer norms + element-wise")
    pack = "forward: packing (pack / re-pad around attention; unpadded only)"
    unpad.Packing.pack = timed(unpad.Packing.pack, pack)
    unpad.Packing.repad = timed(unpad.Packing.repad, pack)
    unpad.Packing.to_heads = timed(unpad.Packing.to_heads, pack)
    unpad.Packing.from_heads = timed(unpad.Packing.from_heads, pack)


def one_step(loop: Any, cfg: Any, idx: list[int], timers: Timers) -> float:
    """``_step``'s SimCSE path, phase by phase; returns the loss."""
    from focalcse.core.encode import autocast_context, pad_batch
    from focalcse.core.gradcache import _upcast

    t = time.perf_counter()
    ids, mask = pad_batch([loop.ids_column[i] for i in idx], loop.encoder.tokenizer.pad_token_id or 0)
    ids2, mask2 = torch.cat([ids, ids]).to(loop.device), torch.cat([mask, mask]).to(loop.device)
    now = time.perf_counter()
    timers.add("data", now - t)
    t = now
    with autocast_context(loop.device, cfg.precision):
        vectors = loop.model(input_ids=ids2, attention_mask=mask2)  # (2N, d), as two_view_loss
        now = time.perf_counter()
        timers.add("forward", now - t)
        t = now
        n = ids.shape[0]
        loss = loop.loss_fn(_upcast(vectors[:n]), _upcast(vectors[n:]))
    now = time.perf_counter()
    timers.add("loss", now - t)
    t = now
    loop.optimizer.zero_grad(set_to_none=True)
    z = time.perf_counter()
    loss.backward()
    now = time.perf_counter()
    timers.add("backward", now - z)
    torch.nn.utils.clip_grad_norm_(loop.encoder.parameters(), cfg.max_grad_norm)
    loop.optimizer.step()
    loop.scheduler.step()
    timers.add("optimizer (zero_grad, clip, AdamW, schedule)", (z - t) + time.perf_counter() - now)
    return float(loss.detach())


def _compiled_report(args: argparse.Namespace, plain_steps: list[float], first_step: float) -> int:
    """``--compile``: the plain steps' median and the first step (compilation included) only."""
    report = {
        "command": script_command("profile_step.py", args.argv),
        "commit": short_commit(),
        "machine": {k: v for k, v in machine_info().items() if k in ("cpu_model", "cpu_bf16", "torch")},
        "backbone": args.backbone,
        "precision": args.precision,
        "forward": "unpadded",
        "compile": True,
        "batch": f"{args.batch_size} x 2 views x {args.max_len} tokens",
        "threads": args.threads,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "steps": args.steps,
        "first_step_seconds": first_step,
        "step_seconds_plain": statistics.median(plain_steps),
    }
    print(
        f"{args.backbone}, {args.precision}, unpadded forward with compiled layers, batch {report['batch']}, "
        f"{args.threads} threads, {args.steps} steps: median step {report['step_seconds_plain']:.3f} s; "
        f"first step {first_step:.1f} s (compilation included)"
    )
    if args.out_json:
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", default=BACKBONE, help=f"hub id or HF folder (default {BACKBONE})")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-json", type=Path, default=None)
    ap.add_argument(
        "--padded", action="store_true", help="train.unpad false: the padded transformers forward"
    )
    ap.add_argument(
        "--malloc-keep",
        action="store_true",
        help="glibc only: mallopt(M_MMAP_THRESHOLD, M_TRIM_THRESHOLD = 1 GiB) before the model and data are "
        "loaded, so freed blocks stay in the heap instead of going back to the OS (a lever measured, not used "
        "by the trainer)",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile (inductor, dynamic shapes) each encoder layer of the unpadded forward "
        "(focalcse.core.unpad.encoder_layer): a lever measured, not used by the trainer",
    )
    args = ap.parse_args(argv)
    args.argv = argv
    if args.compile:
        from focalcse.core import unpad

        unpad.encoder_layer = torch.compile(unpad.encoder_layer, dynamic=True)
    if args.malloc_keep:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
        if not (libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 1 << 30)):
            print("error: --malloc-keep: mallopt refused", file=sys.stderr)
            return 2
    mirror = os.environ.get("FOCALCSE_DATA_MIRROR", "")
    if not mirror or not Path(mirror).is_dir():
        print(f"error: FOCALCSE_DATA_MIRROR={mirror!r}: set it to the data mirror folder", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)

    from focalcse.core.distributed import DistributedContext
    from focalcse.core.model import SentenceEncoder
    from focalcse.core.training import _setup, tokenize_corpus

    total_steps = 2 * (args.warmup + args.steps)
    spec = {
        "temperature": 0.05,
        "m": 0.3,
        "batch_size": args.batch_size,
        "lr": 3e-5,
        "steps": total_steps,
        "max_len": args.max_len,
        "seed": 1,
        "precision": args.precision,
        "unpad": not args.padded,
    }
    cfg = train_config(spec, "infonce")
    encoder = SentenceEncoder.from_pretrained(
        args.backbone, pooler="cls", mlp_only_train=True, max_seq_len=args.max_len, mlp_init="fresh", seed=1
    )
    corpus_file, _ = data_paths(mirror, None, None)
    with tempfile.TemporaryDirectory() as tmp:
        sample = sample_corpus(corpus_file, args.batch_size * total_steps, 42, Path(tmp) / "sample.txt")
        corpus = tokenize_corpus(sample, encoder.tokenizer, args.max_len)
        loop = _setup(encoder, corpus, cfg, Path(tmp) / "work", DistributedContext(), resume=False)
        encoder.train()
        batches = iter(loop.batches)

        # plain steps first (no hooks), then the same number with hooks
        plain = Timers()
        plain_steps, first_step = [], None
        for i in range(args.warmup + args.steps):
            t = time.perf_counter()
            plain.on = i >= args.warmup
            one_step(loop, cfg, next(batches), plain)
            first_step = first_step if first_step is not None else time.perf_counter() - t
            if plain.on:
                plain_steps.append(time.perf_counter() - t)
        if args.compile:  # hooks inside compiled layers would time nothing: the plain steps only
            return _compiled_report(args, plain_steps, first_step)
        timers = Timers()
        handles = hook(encoder, timers)
        if encoder.unpad:
            instrument_unpad(timers)
        hooked_steps = []
        for i in range(args.warmup + args.steps):
            timers.on = i >= args.warmup
            t = time.perf_counter()
            one_step(loop, cfg, next(batches), timers)
            if timers.on:
                hooked_steps.append(time.perf_counter() - t)
        for h in handles:
            h.remove()

    tot = timers.total
    parts = dict.fromkeys(ORDER, 0.0)
    parts.update({k: v for k, v in tot.items() if k in parts})
    parts["forward: Q/K/V + attention-output projections"] = tot["qkv"] + tot["output projection"]
    # padded: the self-attention module less its Q/K/V; unpadded: the attention function (no module)
    parts["forward: attention"] = (
        tot["attention.self"] - tot["qkv"] if tot["attention.self"] else 0.0
    ) + tot["attend"]
    named = sum(v for k, v in parts.items() if k.startswith("forward: ") and "rest" not in k)
    parts["forward: rest (residual adds, masks, pooler MLP)"] = max(0.0, tot["forward"] - named)
    step_total = sum(hooked_steps)
    rows = [(k, parts[k], parts[k] / step_total) for k in ORDER]
    report = {
        "command": script_command("profile_step.py", args.argv),
        "commit": short_commit(),
        "machine": {k: v for k, v in machine_info().items() if k in ("cpu_model", "cpu_bf16", "torch")},
        "backbone": args.backbone,
        "precision": args.precision,
        "forward": "unpadded" if encoder.unpad else "padded",
        "malloc_keep": args.malloc_keep,
        "compile": False,
        "first_step_seconds": first_step,
        "batch": f"{args.batch_size} x 2 views x {args.max_len} tokens",
        "threads": args.threads,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "steps": args.steps,
        "step_seconds_plain": statistics.median(plain_steps),
        "step_seconds_hooked": statistics.median(hooked_steps) if hooked_steps else None,
        "seconds": {k: round(v, 4) for k, v in parts.items()},
        "unaccounted_seconds": round(step_total - sum(parts.values()), 4),
        "share": {k: round(s, 4) for k, _, s in rows},
    }
    print(
        f"{args.backbone}, {args.precision}, {report['forward']} forward, batch {report['batch']}, {args.threads} threads, {args.steps} steps: "
        f"median step {report['step_seconds_plain']:.3f} s without hooks, "
        f"{report['step_seconds_hooked']:.3f} s with them"
    )
    print("\n| part of the step | seconds per step | share |\n|---|---:|---:|")
    for k, v, s in rows:
        print(f"| {k} | {v / args.steps:.3f} | {100 * s:.1f} % |")
    print(f"| (unaccounted) | {report['unaccounted_seconds'] / args.steps:.3f} | |")
    if args.out_json:
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
