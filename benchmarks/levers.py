"""The training step's cheap levers, each timed on its own (docs/performance.md, "Cheap levers").

Usage::

    .venv/bin/python benchmarks/levers.py [--threads 2] [--reps 20] [--out-json benchmarks/levers.json]

Shapes are the full preset's: batch 64 x 2 views x 32 tokens through all-MiniLM-L6-v2 (hidden 384,
12 heads), so a hidden-state tensor is (128 x 32, 384) and an attention-probability tensor
(128, 12, 32, 32). Each figure is the median of ``--reps`` calls after one warm-up call:

- the dropout mask: ``torch.nn.functional.dropout`` (its ``bernoulli_``) against
  :func:`focalcse.core.unpad.dropout` (a float32 uniform draw compared with p);
- attention with dropout 0.1: PyTorch's SDPA against :func:`focalcse.core.unpad._attend` (written out:
  scores, softmax, dropout, weighted sum), in bf16 autocast as the default trains, forward + backward;
- AdamW over all-MiniLM-L6-v2's parameters: the default implementation, ``foreach=True``, and
  ``fused=True`` (what the trainer uses);
- gradient clipping: ``clip_grad_norm_`` with and without ``foreach``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import BACKBONE  # noqa: E402


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def dropout_levers(reps: int) -> dict[str, float]:
    from focalcse.core.unpad import dropout

    x = torch.randn(128 * 32, 384)
    return {
        "dropout torch.nn.functional.dropout (bernoulli_)": timed(lambda: F.dropout(x, 0.1, True), reps),
        "dropout focalcse.core.unpad.dropout (uniform draw)": timed(lambda: dropout(x, 0.1, True), reps),
    }


def attention_levers(reps: int) -> dict[str, float]:
    from focalcse.core.unpad import _attend

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(128, 12, 32, 32, generator=gen, requires_grad=True) for _ in range(3))
    mask = torch.ones(128, 1, 1, 32, dtype=torch.bool)
    mask[:64, ..., 24:] = False  # half the rows padded after 24 tokens

    def sdpa() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
        out.float().sum().backward()

    def written_out() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = _attend(q, k, v, mask, 0.1, 32**-0.5)
        out.float().sum().backward()

    def no_dropout() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.float().sum().backward()

    return {
        "attention fwd+bwd, SDPA with dropout 0.1": timed(sdpa, reps),
        "attention fwd+bwd, written out with dropout 0.1 (focalcse.core.unpad._attend)": timed(
            written_out, reps
        ),
        "attention fwd+bwd, SDPA without dropout (for scale)": timed(no_dropout, reps),
    }


def optimizer_levers(reps: int) -> dict[str, float]:
    from focalcse.core.model import SentenceEncoder

    params = list(SentenceEncoder.from_pretrained(BACKBONE, pooler="cls", seed=0).parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    out = {}
    for label, kw in (("default", {}), ("foreach=True", {"foreach": True}), ("fused=True", {"fused": True})):
        opt = torch.optim.AdamW(params, lr=3e-5, betas=(0.9, 0.999), eps=1e-8, **kw)
        out[f"AdamW step, {label}"] = timed(opt.step, reps)
    out["clip_grad_norm_"] = timed(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), reps)
    out["clip_grad_norm_, foreach=True"] = timed(
        lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True), reps
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out-json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {**dropout_levers(args.reps), **attention_levers(args.reps), **optimizer_levers(args.reps)}
    print(f"| lever ({args.threads} threads, median of {args.reps}) | ms |\n|---|---:|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.1f} |")
    if args.out_json:
        report = {"torch": torch.__version__, "threads": args.threads, "reps": args.reps, "ms": results}
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
