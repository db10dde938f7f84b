"""A training step's arithmetic against this machine's matmul peak: how far from the limit the step runs.

Three things, each written to the JSON:

* the machine's **matmul peak**: ``torch.mm`` TFLOP/s in bf16 and fp32 on ``--threads`` threads, at
  the step's own GEMM shapes (the packed real tokens of a training step times the layer widths of the
  backbone) and at a large square, median of ``--reps`` timed calls after a warm-up;
* the step's **matmul FLOPs**, counted from the backbone's config and the token lengths of the
  pipeline's sample in the trainer's batches (the linear layers on the packed tokens, rounded up to a
  multiple of 64 as ``core/unpad.py`` packs them; attention on each batch padded to its longest row,
  as the unpadded path re-pads around it; the pooler MLP); the backward is counted as twice the
  forward (a gradient for the input and one for the weight per matmul);
* the **achieved** TFLOP/s: those FLOPs over the median step time of our trainer's sides in a
  training benchmark file (``bench.py --only train``), and its share of the peak.

and two more for the memory side:

* the step's **bytes moved**, estimated (:func:`step_bytes`): every operation reads its inputs and
  writes its output once from memory, no reuse in cache and no fusion, at the dtype it runs in (the
  activations in the side's precision, the attention probabilities in float32 as ``core/unpad.py``
  computes them, the parameters and AdamW's state in float32); the backward counted as twice the
  forward, as for the FLOPs;
* the machine's **element-wise rate**: ``torch.add(a, b, out=c)`` GB/s (two reads and a write) at the
  step's activation shapes, in each precision, median of ``--reps`` calls; the bytes over the best
  rate are the time the step cannot go under if it moves those bytes at that rate.

Run it on an otherwise idle machine (a minute or two)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python benchmarks/roofline.py \
        --train-json benchmarks/train_compiled_results.json --out-json benchmarks/roofline.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import (
    REPO,
    backbone_path,
    data_paths,
    emit_report,
    script_command,
    short_commit,
    train_batch_lengths,
)

from focalcse.core.unpad import PACK_MULTIPLE as PACK  # the packed token count is rounded up to this


def step_flops(
    lengths: Sequence[Sequence[int]], hidden: int, ffn: int, layers: int, mlp: bool = True
) -> dict[str, float]:
    """Matmul FLOPs of one training step, averaged over the given batches (each a list of the token
    lengths of its sentences; both views of a sentence are counted: 2 rows each).

    Forward per layer: the Q, K, V and output projections (4 d²) and the FFN (2 d f) on the packed
    tokens T (rounded up to :data:`PACK`), 2 FLOPs per multiply-add; attention scores and context
    (2 × 2 L² d per row, L the batch's longest row). Pooler MLP: 2 d² per row. Backward: 2 × forward."""
    out = {"linear": 0.0, "attention": 0.0, "pooler": 0.0}
    for batch in lengths:
        rows = 2 * len(batch)  # two views
        tokens = 2 * sum(batch)
        packed = -(-tokens // PACK) * PACK
        longest = max(batch)
        out["linear"] += layers * 2 * packed * (4 * hidden * hidden + 2 * hidden * ffn)
        out["attention"] += layers * 4 * rows * longest * longest * hidden
        out["pooler"] += 2 * rows * hidden * hidden if mlp else 0.0
    n = len(lengths)
    forward = {k: v / n for k, v in out.items()}
    total_forward = sum(forward.values())
    return {
        **{f"forward_{k}": v for k, v in forward.items()},
        "forward": total_forward,
        "step": 3 * total_forward,
        "packed_tokens": statistics.mean(-(-2 * sum(b) // PACK) * PACK for b in lengths),
    }


def step_bytes(
    lengths: Sequence[Sequence[int]],
    hidden: int,
    ffn: int,
    layers: int,
    heads: int,
    params: int,
    elem: int,
) -> dict[str, float]:
    """Estimated bytes one training step moves, averaged over the given batches (as :func:`step_flops`),
    by part, with activations of ``elem`` bytes (2 in bf16, 4 in fp32). Each operation reads its inputs
    and writes its output once; the backward moves twice what the forward does. Per layer, with T the
    packed tokens, P = rows × longest row the re-padded positions, S = heads × rows × longest² the
    attention scores:

    * ``elementwise``: two dropouts (read, write: 2 T d each), two residual adds (3 T d), two layer
      norms (2 T d), GELU (2 T f): (14 T d + 2 T f) × elem;
    * ``attention``: the scores' GEMM output (S), the softmax (2 S), the dropout mask (1 byte a score,
      written and read) and its product (3 S), the weighted sum's read (S): 7 S × 4 + 2 S;
    * ``packing``: Q, K and V re-padded (read T d, write P d, each) and cast to float32 (read P d × elem,
      write P d × 4, each), the context cast back (P d × (4 + elem)) and unpacked (P d + T d) × elem;
    * ``matmul``: the linear layers' inputs (Q, K and V read the layer input each), outputs and
      weights: (10 T d + 2 T f + 4 d² + 2 d f) × elem;
    * ``optimizer``: the fused AdamW over all ``params`` in float32 (reads the parameter, its gradient
      and two moments, writes the parameter and the moments: 28 bytes each), the gradient-norm clip
      (reads and scales each gradient: 12 bytes) and ``zero_grad`` (nothing: the gradients are set to
      None); not doubled, it has no backward."""
    out = {"elementwise": 0.0, "attention": 0.0, "packing": 0.0, "matmul": 0.0}
    d, f = hidden, ffn
    for batch in lengths:
        rows = 2 * len(batch)
        t = -(-2 * sum(batch) // PACK) * PACK
        longest = max(batch)
        pos = rows * longest
        scores = heads * rows * longest * longest
        out["elementwise"] += layers * (14 * t * d + 2 * t * f) * elem
        out["attention"] += layers * (7 * scores * 4 + 2 * scores)
        qkv = 3 * ((t * d + pos * d) * elem + pos * d * (elem + 4))
        out["packing"] += layers * (qkv + pos * d * (4 + elem) + (pos * d + t * d) * elem)
        out["matmul"] += layers * ((10 * t * d + 2 * t * f) + (4 * d * d + 2 * d * f)) * elem
    n = len(lengths)
    step = {k: 3 * v / n for k, v in out.items()}
    step["optimizer"] = params * (28 + 12)
    step["step"] = sum(step.values())
    return step


def elementwise_gbps(numel: int, dtype: Any, reps: int, warmup: int = 3) -> float:
    """Median GB/s of ``torch.add(a, b, out=c)`` on ``numel`` elements of ``dtype`` (2 reads, 1 write)."""
    import torch

    a, b, c = (torch.randn(numel).to(dtype) for _ in range(3))
    for _ in range(warmup):
        torch.add(a, b, out=c)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(a, b, out=c)
        times.append(time.perf_counter() - t0)
    return 3 * numel * a.element_size() / statistics.median(times) / 1e9


def matmul_tflops(m: int, k: int, n: int, dtype: Any, reps: int, warmup: int = 3) -> float:
    """Median TFLOP/s of ``torch.mm`` of an (m, k) by (k, n) matrix in ``dtype``."""
    import torch

    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    for _ in range(warmup):
        torch.mm(a, b)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return 2 * m * k * n / statistics.median(times) / 1e12


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-mirror", default=os.environ.get("FOCALCSE_DATA_MIRROR"))
    ap.add_argument("--params", default=str(REPO / "params.yaml"), help="the sample, batch and length")
    ap.add_argument("--train-json", default=str(REPO / "benchmarks/train_compiled_results.json"))
    ap.add_argument(
        "--profile-json",
        nargs="*",
        default=[],
        help="profile_step.py files whose median plain step stands for ours-<precision> (instead of --train-json)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--square", type=int, default=2048, help="the large square GEMM's size")
    ap.add_argument("--order-seed", type=int, default=1, help="the trainer's batch-order seed")
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args(argv)
    if not args.data_mirror:
        ap.error("--data-mirror (or FOCALCSE_DATA_MIRROR) is required: the folder with corpus/")

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from focalcse.config import load_params
    from focalcse.data.corpus import read_sentences, sample_sentences

    t0 = time.perf_counter()
    torch.set_num_threads(args.threads)
    params = load_params(args.params)
    train = params.train
    backbone = backbone_path()
    config = AutoConfig.from_pretrained(backbone)
    tok = AutoTokenizer.from_pretrained(backbone)
    corpus = read_sentences(data_paths(args.data_mirror, None, None)[0])
    sentences = sample_sentences(corpus, params.data.num_sentences, params.data.seed)
    lengths, order = train_batch_lengths(tok, sentences, train.batch_size, train.max_seq_len, args.order_seed)
    batches = [[lengths[i] for i in b] for b in order]
    d, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads = config.num_attention_heads
    flops = step_flops(batches, d, f, layers)
    from transformers import AutoModel

    # the backbone's own pooler is the trained MLP (core/model.py), so its parameters are all the step updates
    n_params = sum(p.numel() for p in AutoModel.from_config(config).parameters())
    moved = {
        prec: {k: round(v, 1) for k, v in step_bytes(batches, d, f, layers, heads, n_params, elem).items()}
        for prec, elem in (("bf16", 2), ("fp32", 4))
    }
    t = int(flops["packed_tokens"] // PACK * PACK)
    shapes = {
        f"projection ({t}x{d} by {d}x{d})": (t, d, d),
        f"FFN up ({t}x{d} by {d}x{f})": (t, d, f),
        f"FFN down ({t}x{f} by {f}x{d})": (t, f, d),
        f"square {args.square}": (args.square, args.square, args.square),
    }
    peak: dict[str, dict[str, float]] = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        peak[name] = {label: round(matmul_tflops(*mkn, dtype, args.reps), 4) for label, mkn in shapes.items()}
        print(f"{name}: " + ", ".join(f"{k} {v:.3f} TFLOP/s" for k, v in peak[name].items()), flush=True)
    bw_shapes = {f"activations ({t}x{d})": t * d, f"FFN activations ({t}x{f})": t * f}
    bandwidth: dict[str, dict[str, float]] = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        bandwidth[name] = {
            label: round(elementwise_gbps(n, dtype, args.reps), 2) for label, n in bw_shapes.items()
        }
        print(f"{name}: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bandwidth[name].items()), flush=True)
    achieved: dict[str, dict[str, float]] = {}
    train_json = Path(args.train_json)
    steps: dict[str, float] = {}  # side -> median step seconds
    if args.profile_json:
        for path in args.profile_json:
            prof = json.loads(Path(path).read_text())
            steps[f"ours-{prof['precision']}"] = prof["step_seconds_plain"]
    elif train_json.is_file():
        tr = json.loads(train_json.read_text())["train"]
        steps = {side: tr[side]["median_step_ms"] / 1e3 for side in ("ours-bf16", "ours-fp32") if side in tr}
    for side, step_s in steps.items():
        tflops = flops["step"] / step_s / 1e12
        prec = side.split("-")[1]
        floor = moved[prec]["step"] / (max(bandwidth[prec].values()) * 1e9)
        achieved[side] = {
            "median_step_seconds": step_s,
            "tflops": round(tflops, 4),
            "share_of_peak": round(tflops / max(peak[prec].values()), 4),
            "bytes_floor_seconds": round(floor, 4),
            "matmul_floor_seconds": round(flops["step"] / (max(peak[prec].values()) * 1e12), 4),
        }
    from focalcse.provenance import cpu_info

    report = {
        "command": script_command("roofline.py", argv),
        "commit": short_commit(),
        "cpu": cpu_info(),
        "torch": torch.__version__,
        "threads": args.threads,
        "backbone": {"name": "all-MiniLM-L6-v2", "hidden": d, "ffn": f, "layers": layers},
        "batch": {
            "sentences": train.batch_size,
            "views": 2,
            "max_seq_len": train.max_seq_len,
            "batches": len(batches),
        },
        "step_flops": {k: round(v, 1) for k, v in flops.items()},
        "peak_tflops": peak,
        "parameters": n_params,
        "step_bytes": moved,
        "elementwise_gbps": bandwidth,
        "achieved": achieved,
        "train_json": (
            None if args.profile_json or not train_json.is_file() else os.path.relpath(train_json, REPO)
        ),
        "profile_json": [os.path.relpath(Path(p).resolve(), REPO) for p in args.profile_json],
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    return emit_report(report, args.out_json)


if __name__ == "__main__":
    raise SystemExit(main())
