"""GPU check: a short paper-setting Focal-InfoNCE run; prints throughput and peak memory.

The paper's BERT-base setting: batch 64, max_len 32, AdamW lr 3e-5 with linear decay, Focal-InfoNCE
(tau 0.05, m 0.3), here with bf16 autocast. The model is BERT-base-shaped (hidden 768, 12 layers,
12 heads, vocabulary 30522) and randomly initialised from a config, so no hub access is needed;
``--backbone`` loads real weights instead (a hub id in the HF cache or a local folder). Sentences are
random token ids (throughput and memory do not depend on the words) of ``--lengths``: ``ragged`` (the
default) draws each length as the stand-in corpus's at length 32 roughly are, 43 % at ``--max-len``
and the rest uniform in [max_len / 4, max_len - 1] (mean ~25 tokens, ~21 % of a batch padding);
``full`` gives every sentence ``--max-len`` tokens (no padding). ``--unpad`` / ``--no-unpad`` picks
the training forward (``train.unpad``; default on, as the trainer). AdamW is the trainer's fused one.

It also checks that the unpadded forward agrees with the padded ``transformers`` forward on the
device (``--verify-unpad``, on by default): fp32, eval mode, one ragged batch; the largest relative
difference of the last hidden states is reported as ``unpad_max_rel_diff``; and that its dropout
draws the keep rate asked and its written-out attention with dropout is the formula on the device
(``dropout_keep_rate``, ``attention_dropout_max_rel_diff``).

On CUDA it first checks GradCache on the device (``--verify-gradcache``, on by default there): one
fp32 step with dropout, plain autograd over the chunks vs the cached re-forward; this exercises the
CUDA RNG replay that the CPU tests cannot reach.

    python benchmarks/gpu_check.py                          # 300 steps on cuda
    python benchmarks/gpu_check.py --steps 3 --device cpu   # smoke test (slow)
    python benchmarks/gpu_check.py --batch-size 512 --grad-cache-chunk 64   # GradCache memory
    python benchmarks/gpu_check.py --no-unpad --loss infonce   # padded forward (compare with --unpad)
    torchrun --nproc_per_node=4 benchmarks/gpu_check.py     # DDP, global batch 64 over 4 GPUs

Prints one JSON line at the end (also written to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10, help="untimed first steps (at most steps // 3)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch (sentences)")
    p.add_argument("--max-len", type=int, default=32)
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="bf16",
        help="fp16 training is refused (no GradScaler)",
    )
    p.add_argument("--loss", choices=["infonce", "focal_infonce"], default="focal_infonce")
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--m", type=float, default=0.3)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--grad-cache-chunk", type=int, default=0, help="sequences per forward; 0 = plain")
    p.add_argument("--backbone", default="", help="hub id or folder; default: BERT-base shape from config")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--verify-gradcache", action=argparse.BooleanOptionalAction, default=None, help="default: on for cuda"
    )
    p.add_argument(
        "--lengths", choices=["ragged", "full"], default="ragged", help="sentence lengths (see above)"
    )
    p.add_argument("--unpad", action=argparse.BooleanOptionalAction, default=True, help="train.unpad")
    p.add_argument("--verify-unpad", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--json", default="", help="write the result here too")
    return p.parse_args(argv)


def build_encoder(args: argparse.Namespace):
    from focalcse.core.model import SentenceEncoder

    if args.backbone:
        return SentenceEncoder.from_pretrained(
            args.backbone, pooler="cls", mlp_only_train=True, max_seq_len=args.max_len, seed=args.seed
        )
    from transformers import AutoConfig

    config = AutoConfig.for_model(
        "bert",
        vocab_size=30522,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden,
        max_position_embeddings=512,
    )
    torch.manual_seed(args.seed)
    return SentenceEncoder.from_config(
        config, None, pooler="cls", mlp_only_train=True, max_seq_len=args.max_len
    )


def verify_gradcache(encoder, device: torch.device, vocab: int) -> float:
    """Max |grad difference| / max |grad| between plain autograd and GradCache (fp32, dropout on)."""
    from focalcse.core.gradcache import _chunks, cached_contrastive_loss
    from focalcse.losses import FocalInfoNCE

    n, chunk = 16, 8
    loss_fn = FocalInfoNCE(0.05, 0.3)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab, (n, 32), generator=gen)
    ids2, mask2 = torch.cat([ids, ids]).to(device), torch.ones(2 * n, 32, dtype=torch.long, device=device)
    encoder.train()

    def grads() -> dict[str, torch.Tensor]:
        out = {k: p.grad.detach().clone() for k, p in encoder.named_parameters() if p.grad is not None}
        encoder.zero_grad(set_to_none=True)
        return out

    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    z = torch.cat([encoder(input_ids=ids2[s], attention_mask=mask2[s]) for s in _chunks(2 * n, chunk)])
    loss_fn(z[:n], z[n:]).backward()
    ref = grads()
    torch.manual_seed(7)
    cached_contrastive_loss(encoder, loss_fn, ids2, mask2, chunk).backward()
    got = grads()
    scale = max(g.abs().max().item() for g in ref.values())
    return max((got[k] - ref[k]).abs().max().item() for k in ref) / scale


def ragged_mask(batch: int, max_len: int, gen: torch.Generator) -> torch.Tensor:
    """(batch, max_len) right-padded attention mask: 43 % of rows full, the rest uniform in
    [max_len // 4, max_len - 1] tokens."""
    full = torch.rand(batch, generator=gen) < 0.43
    lengths = torch.randint(max(1, max_len // 4), max_len, (batch,), generator=gen)
    lengths = torch.where(full, torch.full_like(lengths, max_len), lengths)
    return (torch.arange(max_len)[None] < lengths[:, None]).long()


def verify_unpad(encoder, device: torch.device, vocab: int) -> float:
    """Max relative difference of the last hidden states (real tokens), unpadded against padded
    ``transformers`` forward, fp32, eval mode, one ragged batch of 32 on ``device``."""
    from focalcse.core.unpad import packed_hidden

    gen = torch.Generator().manual_seed(1)
    mask = ragged_mask(32, 32, gen).to(device)
    ids = torch.randint(1000, vocab, (32, 32), generator=gen).to(device) * mask
    was, tf32 = encoder.training, torch.backends.cuda.matmul.allow_tf32
    encoder.eval()
    torch.backends.cuda.matmul.allow_tf32 = False  # full fp32: the two paths' GEMM shapes differ
    try:
        with torch.no_grad():
            ref = encoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
            got = packed_hidden(encoder.backbone, ids, mask)
    finally:
        encoder.train(was)
        torch.backends.cuda.matmul.allow_tf32 = tf32
    real = mask.bool()
    return float((got[real] - ref[real]).abs().max() / ref[real].abs().max())


def verify_dropout(device: torch.device) -> dict[str, float]:
    """The unpadded forward's dropout on ``device`` (:func:`focalcse.core.unpad.keep_mask`'s 64-bit
    draws split into 32-bit halves): the keep rate of 2**24 elements at p = 0.1 (its distance from 0.9
    in standard deviations), and the written-out attention with dropout against the formula on the same
    mask (the device generator reseeded), fp32, as the largest relative difference."""
    from focalcse.core.unpad import _attend, keep_mask

    torch.manual_seed(7)
    kept = keep_mask((2**24,), 0.1, device).double().mean().item()
    sigma = math.sqrt(0.9 * 0.1 / 2**24)
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(8, 4, 32, 16, generator=gen).to(device) for _ in range(3))
    mask = ragged_mask(8, 32, gen).bool().to(device)[:, None, None, :]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.manual_seed(11)
        got = _attend(q, k, v, mask, 0.1, 0.25)
        torch.manual_seed(11)
        probs = ((q @ k.transpose(-1, -2)) * 0.25).masked_fill(~mask, float("-inf")).softmax(-1)
        keep = keep_mask(probs.shape, 0.1, device)
        ref = torch.where(keep, probs / 0.9, torch.zeros_like(probs)) @ v
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return {
        "dropout_keep_rate": kept,
        "dropout_keep_rate_sigmas": (kept - 0.9) / sigma,
        "attention_dropout_max_rel_diff": float((got - ref).abs().max() / ref.abs().max()),
    }


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource  # CPU: peak resident set of the process (Linux: KiB)

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from focalcse.core.distributed import cleanup, init_distributed
    from focalcse.core.encode import autocast_context
    from focalcse.core.gradcache import two_view_loss
    from focalcse.losses import build_loss

    ctx = init_distributed()
    if ctx.distributed:
        device = ctx.device
    elif args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.batch_size < 2 * ctx.world_size:
        sys.exit(f"--batch-size {args.batch_size} must give every one of {ctx.world_size} ranks 2 sentences")

    encoder = build_encoder(args).to(device)
    vocab = encoder.backbone.config.vocab_size
    verify = args.verify_gradcache if args.verify_gradcache is not None else device.type == "cuda"
    gradcache_error = verify_gradcache(encoder, device, vocab) if verify and not ctx.distributed else None
    unpad_error = verify_unpad(encoder, device, vocab) if args.verify_unpad else None
    dropout_checks = verify_dropout(device) if args.verify_unpad else {}
    encoder.unpad = args.unpad  # the training loop's setting (SimCSE items, BERT/RoBERTa backbones)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    torch.manual_seed(ctx.rank_seed(args.seed))
    model = ctx.wrap_model(encoder)
    loss_fn = ctx.wrap_loss(build_loss(args.loss, args.temperature, m=args.m)).to(device)
    fused = device.type in ("cpu", "cuda") or None  # as the trainer
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=args.lr, eps=1e-8, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / args.steps))
    (local,) = ctx.shard_batches([list(range(args.batch_size))])
    data_gen = torch.Generator().manual_seed(args.seed)  # same global batches on every rank
    warmup = min(args.warmup, args.steps // 3)
    losses: list[float] = []
    encoder.train()
    t0 = time.perf_counter()
    for step in range(args.steps):
        if step == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
        ids = torch.randint(1000, vocab, (args.batch_size, args.max_len), generator=data_gen)
        if args.lengths == "ragged":
            mask = ragged_mask(args.batch_size, args.max_len, data_gen)
            ids = ids * mask  # pad id 0
        else:
            mask = torch.ones_like(ids)
        ids, mask = ids[local], mask[local]
        ids2 = torch.cat([ids, ids]).to(device, non_blocking=True)  # (2n, L): two views
        mask2 = torch.cat([mask, mask]).to(device, non_blocking=True)
        with autocast_context(device, args.precision):
            loss = two_view_loss(model, loss_fn, ids2, mask2, args.grad_cache_chunk)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))  # a sync per step, as the training loop's logging does
        if not math.isfinite(losses[-1]):
            print(f"non-finite loss {losses[-1]} at step {step + 1}", file=sys.stderr)
            cleanup()
            return 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    timed = args.steps - warmup
    result = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "world_size": ctx.world_size,
        "torch": torch.__version__,
        "model": args.backbone or f"bert config hidden {args.hidden} x {args.layers} layers",
        "parameters_m": round(sum(p.numel() for p in encoder.parameters()) / 1e6, 1),
        "loss": args.loss,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "max_len": args.max_len,
        "grad_cache_chunk": args.grad_cache_chunk,
        "lengths": args.lengths,
        "unpad": args.unpad,
        "unpad_max_rel_diff": unpad_error,
        **dropout_checks,
        "steps": args.steps,
        "timed_steps": timed,
        "seconds": round(seconds, 3),
        "sentences_per_second": round(timed * args.batch_size / seconds, 1) if seconds > 0 else None,
        "peak_memory_mb_rank0": round(peak_memory_mb(device), 1),
        "peak_memory_kind": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "ru_maxrss",
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "gradcache_max_rel_grad_diff": gradcache_error,
    }
    if ctx.is_main:
        line = json.dumps(result)
        print(line)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    cleanup()
    if unpad_error is not None and unpad_error > 1e-4:
        print(f"unpad check failed: relative hidden-state difference {unpad_error:.2e}", file=sys.stderr)
        return 3
    if dropout_checks and (
        abs(dropout_checks["dropout_keep_rate_sigmas"]) > 5
        or dropout_checks["attention_dropout_max_rel_diff"] > 1e-4
    ):
        print(f"dropout check failed: {dropout_checks}", file=sys.stderr)
        return 3
    if gradcache_error is not None and gradcache_error > 1e-4:
        print(f"GradCache check failed: relative gradient difference {gradcache_error:.2e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
