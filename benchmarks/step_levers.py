"""The step levers of commit 363e1df, each timed on its own against what it replaced
(docs/performance.md, "Closer to the machine").

Usage (a quiet machine, about a minute)::

    .venv/bin/python benchmarks/step_levers.py [--threads 2] [--reps 30] [--out-json benchmarks/step_levers.json]

Shapes are the full preset's: batch 64 x 2 views x 32 tokens through all-MiniLM-L6-v2 (hidden 384,
12 heads, vocabulary 30522), so a hidden-state tensor is (3264, 384) (the packed tokens of a typical
batch) and an attention tensor (128, 12, 32, 32). Each figure is the median milliseconds of ``--reps``
calls after two warm-up calls:

- **freed memory kept in the heap** (:func:`focalcse.core.heap.keep_freed_memory`): the word
  embedding's forward + backward (its dense 30522 x 384 gradient, allocated anew each call), in a child
  process with glibc's default malloc thresholds and in one with the thresholds raised;
- **the dropout keep mask**: ``torch.rand(shape) >= p`` (the previous draw) against
  :func:`focalcse.core.unpad.keep_mask` (32-bit halves of 64-bit draws); and the whole dropout, forward
  + backward, the previous formula against :func:`focalcse.core.unpad.dropout`;
- **attention with dropout 0.1**, forward + backward in bf16 autocast as the default trains: the
  previous written-out attention (scores, scale, mask fill, softmax, dropout, weighted sum, in
  float32; reproduced here) against :func:`focalcse.core.unpad._attend` (scale and mask inside
  ``baddbmm``, the dropout scale as the weighted sum's factor).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit_report, machine_info, script_command, short_commit  # noqa: E402

TOKENS, HIDDEN, VOCAB, HEADS, BATCH, LENGTH = 3264, 384, 30522, 12, 128, 32
P = 0.1


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def embedding_backward(reps: int) -> float:
    """The word embedding's forward + backward: a fresh (VOCAB, HIDDEN) fp32 gradient each call."""
    weight = torch.randn(VOCAB, HIDDEN, requires_grad=True)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=torch.Generator().manual_seed(0))
    grad = torch.randn(TOKENS, HIDDEN)

    def step() -> None:
        weight.grad = None
        F.embedding(ids, weight).backward(grad)

    return timed(step, reps)


def previous_dropout(x: torch.Tensor) -> torch.Tensor:
    """The dropout before 363e1df: a float32 uniform draw compared with p, then two products."""
    keep = torch.rand(x.shape, device=x.device) >= P
    return x * keep.to(x.dtype) * (1.0 / (1.0 - P))


def previous_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The written-out attention before 363e1df (float32, separate scale, mask fill and dropout)."""
    with torch.autocast(q.device.type, enabled=False):
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = previous_dropout(torch.softmax(scores, dim=-1))
        return torch.matmul(probs, v.float()).to(q.dtype)


def dropout_levers(reps: int) -> dict[str, float]:
    from focalcse.core.unpad import dropout, keep_mask

    x = torch.randn(TOKENS, HIDDEN, requires_grad=True)
    g = torch.randn(TOKENS, HIDDEN)

    def fwd_bwd(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            fn(x).backward(g)

        return run

    return {
        "keep mask, torch.rand(shape) >= p (before)": timed(lambda: torch.rand(TOKENS, HIDDEN) >= P, reps),
        "keep mask, keep_mask (32-bit halves of 64-bit draws)": timed(
            lambda: keep_mask((TOKENS, HIDDEN), P, "cpu"), reps
        ),
        "dropout fwd+bwd, fp32 (before)": timed(fwd_bwd(previous_dropout), reps),
        "dropout fwd+bwd, fp32 (focalcse.core.unpad.dropout)": timed(
            fwd_bwd(lambda t: dropout(t, P, True)), reps
        ),
    }


def attention_levers(reps: int) -> dict[str, float]:
    from focalcse.core.unpad import _attend

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, LENGTH, HIDDEN // HEADS, generator=gen) for _ in range(3))
    q16, k16, v16 = (t.bfloat16().requires_grad_() for t in (q, k, v))  # as autocast hands them over
    mask = torch.ones(BATCH, 1, 1, LENGTH, dtype=torch.bool)
    mask[: BATCH // 2, ..., 24:] = False  # half the rows padded after 24 tokens

    def run(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            for t in (q16, k16, v16):
                t.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = fn()
            out.float().sum().backward()

        return step

    return {
        "attention fwd+bwd with dropout, bf16 inputs (before)": timed(
            run(lambda: previous_attend(q16, k16, v16, mask)), reps
        ),
        "attention fwd+bwd with dropout, bf16 inputs (focalcse.core.unpad._attend)": timed(
            run(lambda: _attend(q16, k16, v16, mask, P, (HIDDEN // HEADS) ** -0.5)), reps
        ),
    }


def child(heap: str, threads: int, reps: int) -> dict[str, Any]:
    """One process's embedding timing, with glibc's default thresholds or the trainer's."""
    torch.set_num_threads(threads)
    setting = 0
    if heap == "keep":
        from focalcse.core.heap import keep_freed_memory

        setting = keep_freed_memory()
    return {"ms": embedding_backward(reps), "mmap_threshold": setting}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out-json", default=None)
    ap.add_argument("--child", choices=("default", "keep"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.threads, args.reps)))
        return 0
    heap = {}
    for setting in ("default", "keep"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                setting,
                "--threads",
                str(args.threads),
                "--reps",
                str(args.reps),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        heap[setting] = json.loads(out.stdout.strip().splitlines()[-1])
    torch.set_num_threads(args.threads)
    ms = {
        "word-embedding fwd+bwd, glibc's default malloc thresholds (before)": heap["default"]["ms"],
        "word-embedding fwd+bwd, freed memory kept in the heap (keep_freed_memory)": heap["keep"]["ms"],
        **dropout_levers(args.reps),
        **attention_levers(args.reps),
    }
    report = {
        "command": script_command("step_levers.py", argv),
        "commit": short_commit(),
        "machine": {k: v for k, v in machine_info().items() if k in ("cpu_model", "cpu_bf16", "torch")},
        "threads": args.threads,
        "reps": args.reps,
        "mmap_threshold_set": heap["keep"]["mmap_threshold"],
        "ms": {k: round(v, 3) for k, v in ms.items()},
    }
    return emit_report(report, args.out_json)


if __name__ == "__main__":
    sys.exit(main())
