"""Peak memory of one training step with and without GradCache chunking (CPU).

Each setting runs in its own subprocess (a fresh allocator, a fresh high-water mark). In it: build a
randomly initialised MiniLM-L6-shaped BERT (hidden 384, 6 layers, vocabulary 30522: the project's
default backbone's shape), run one warm-up step on 2 sentences (allocates the ``.grad`` buffers and
loads kernels), reset the kernel's peak-RSS counter (``/proc/self/clear_refs``), run one step
(forward, Focal-InfoNCE, backward) on ``--batch`` sentences x ``--max-len`` tokens, and report
``VmHWM - VmRSS before the step``: the step's peak extra resident memory.

glibc is told to ``mmap`` every allocation above 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so freed tensors
leave the resident set at once; without it the heap keeps freed blocks and RSS over-states the live
peak. RSS counts everything the step touches (activations, autograd buffers, temporaries, allocator
slack), so it is an upper bound on live tensor bytes, measured the same way for every setting.

    python benchmarks/gradcache_memory.py                    # batch 256, plain vs chunks 256/64/32
    python benchmarks/gradcache_memory.py --batch 64 --chunks 0 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def child(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoConfig

    from focalcse.core.gradcache import two_view_loss
    from focalcse.core.model import SentenceEncoder
    from focalcse.losses import FocalInfoNCE

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        "bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512,
    )  # fmt: skip
    encoder = SentenceEncoder.from_config(cfg, None, pooler="cls", mlp_only_train=True).train()
    loss_fn = FocalInfoNCE(0.05, 0.3)
    ids = torch.randint(1000, 30000, (args.batch, args.max_len))  # (B, L): full-length sentences
    ids2, mask2 = torch.cat([ids, ids]), torch.ones(2 * args.batch, args.max_len, dtype=torch.long)

    def step(n: int) -> float:
        encoder.zero_grad(set_to_none=False)  # keep the .grad buffers: same baseline for every setting
        loss = two_view_loss(encoder, loss_fn, ids2[: 2 * n], mask2[: 2 * n], args.chunk)
        loss.backward()
        return float(loss)

    step(2)  # warm-up: .grad buffers, kernels
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    t0 = time.perf_counter()
    loss = step(args.batch)
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    print(
        json.dumps(
            {
                "batch": args.batch,
                "sequences": 2 * args.batch,
                "chunk": args.chunk,
                "step_peak_mib": round((peak - before) / 1024, 1),
                "rss_before_mib": round(before / 1024, 1),
                "seconds": round(seconds, 2),
                "loss": loss,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=256, help="sentences (each encoded twice)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 256, 64, 32], help="0 = plain step")
    parser.add_argument("--max-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child-chunk", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_chunk is not None:
        args.chunk = args.child_chunk
        child(args)
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "HF_HUB_OFFLINE": "1"}
    rows = []
    print("| batch | sequences | chunk | step peak RSS (MiB) | step time (s) |\n|---|---|---|---|---|")
    for chunk in args.chunks:
        cmd = [sys.executable, __file__, "--batch", str(args.batch), "--max-len", str(args.max_len)]
        cmd += ["--threads", str(args.threads), "--child-chunk", str(chunk)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"chunk {chunk} failed:\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        label = "plain" if chunk == 0 else str(chunk)
        print(
            f"| {row['batch']} | {row['sequences']} | {label} | {row['step_peak_mib']} | {row['seconds']} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
