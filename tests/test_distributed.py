"""Data-parallel loss: 2 gloo processes on CPU give the loss and gradients of one process on the
global batch (InfoNCE and Focal-InfoNCE, equal and unequal shards, with and without GradCache); the
training loop under 2 ranks logs the single process's losses and (clipped-on) gradient norms."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from focalcse.core.distributed import DistributedContext, global_contrastive_loss, shard
from focalcse.losses import FocalInfoNCE, InfoNCE, build_loss

WORLD = 2
VOCAB, LENGTH = 64, 8
# (name, loss, global batch, GradCache chunk, dtype); batch 7 makes shards of 4 and 3 sentences (8 and
# 6 sequences), and with GradCache the ranks run different numbers of chunks (3 and 2; 2 and 1).
SCENARIOS = [
    ("infonce-equal", "infonce", 8, 0, torch.float32),
    ("focal-unequal", "focal_infonce", 7, 0, torch.float32),
    ("focal-gradcache-unequal", "focal_infonce", 7, 3, torch.float32),
    ("focal-equal-f64", "focal_infonce", 8, 0, torch.float64),
    ("infonce-gradcache-unequal-f64", "infonce", 7, 6, torch.float64),
]


def _encoder(dtype: torch.dtype, dropout: float = 0.0) -> torch.nn.Module:
    """A tiny BERT + MLP pooler, by default without dropout (so one batch's rows are independent)."""
    from focalcse.core.model import SentenceEncoder, tiny_config

    cfg = tiny_config(VOCAB, hidden=16, layers=1, heads=2)
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = dropout
    torch.manual_seed(0)
    return SentenceEncoder.from_config(cfg, None, pooler="cls").to(dtype).train()


def _batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(size)
    ids = torch.randint(1, VOCAB, (size, LENGTH), generator=gen)  # (B, L)
    mask = torch.ones_like(ids)
    mask[::2, LENGTH - 3 :] = 0  # some padding
    return ids, mask


def _train_run(out: Path, parallel=None) -> list[dict[str, float]]:
    """3 steps of the real training loop on a tiny corpus (global batch 7, dropout off, the default
    clipping at 1.0, which binds at this lr: the steps after the first depend on it)."""
    from transformers import AutoTokenizer

    from focalcse.config import TrainConfig
    from focalcse.core.model import resolve_backbone
    from focalcse.core.training import train

    encoder = _encoder(torch.float32)
    encoder.tokenizer = AutoTokenizer.from_pretrained(resolve_backbone("all-MiniLM-L6-v2"))
    gen = torch.Generator().manual_seed(1)
    corpus = [torch.randint(1, VOCAB, (int(k),), generator=gen).tolist() for k in torch.randint(3, 9, (21,))]
    cfg = TrainConfig(loss="focal_infonce", batch_size=7, lr=1e-4, max_steps=3, eval_at_start=False, seed=3)
    result = train(encoder, corpus, cfg, out / "model", progress=False, parallel=parallel)
    return result.history


class _Stop(Exception):
    """The simulated crash of every rank in the resume scenario."""


def _dropout_run(out: Path, parallel, stop_at: int = 0) -> list[float]:
    """4 steps with dropout on (each rank draws its own masks), a checkpoint every 2 steps; with
    ``stop_at``, every rank crashes at the start of that step (after the step-2 checkpoint)."""
    from transformers import AutoTokenizer

    from focalcse.config import TrainConfig
    from focalcse.core import training
    from focalcse.core.model import resolve_backbone

    encoder = _encoder(torch.float32, dropout=0.2)
    encoder.tokenizer = AutoTokenizer.from_pretrained(resolve_backbone("all-MiniLM-L6-v2"))
    gen = torch.Generator().manual_seed(2)
    corpus = [torch.randint(1, VOCAB, (int(k),), generator=gen).tolist() for k in torch.randint(3, 9, (32,))]
    cfg = TrainConfig(
        loss="focal_infonce",
        batch_size=8,
        lr=1e-3,
        max_steps=4,
        eval_at_start=False,
        seed=5,
        checkpoint_steps=2,
    )
    from focalcse.core.frameworks import simcse  # the default framework's step calls two_view_loss

    real, calls = simcse.two_view_loss, []

    def crashing(*args, **kwargs):
        calls.append(1)
        if len(calls) == stop_at:
            raise _Stop
        return real(*args, **kwargs)

    simcse.two_view_loss = crashing
    try:
        return [
            h["loss"]
            for h in training.train(encoder, corpus, cfg, out, progress=False, parallel=parallel).history
        ]
    finally:
        simcse.two_view_loss = real


def _resume_scenario(root: Path, ctx) -> dict:
    """An uninterrupted 2-rank run, and one that crashes at step 3 and is resumed from step 2."""
    from safetensors.torch import load_file

    straight = _dropout_run(root / "straight", ctx)
    try:
        _dropout_run(root / "resumed", ctx, stop_at=3)
        raise AssertionError("the crash did not happen")
    except _Stop:
        pass
    resumed = _dropout_run(root / "resumed", ctx)
    ctx.barrier()
    out = {"straight": straight, "resumed": resumed}
    if ctx.is_main:
        a, b = (load_file(root / n / "model.safetensors") for n in ("straight", "resumed"))
        out["same_weights"] = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return out


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from focalcse.core.distributed import cleanup, init_distributed
    from focalcse.core.gradcache import two_view_loss

    ctx = init_distributed("gloo")
    results = {}
    try:
        for name, loss_name, size, chunk, dtype in SCENARIOS:
            encoder = _encoder(dtype)
            model = ctx.wrap_model(encoder)
            loss_fn = ctx.wrap_loss(build_loss(loss_name, 0.05, m=0.3))
            (local,) = ctx.shard_batches([list(range(size))])
            ids, mask = _batch(size)
            ids, mask = ids[local], mask[local]
            for _ in range(2):  # a second iteration: DDP's reducer must be ready again
                encoder.zero_grad(set_to_none=True)
                loss = two_view_loss(model, loss_fn, torch.cat([ids, ids]), torch.cat([mask, mask]), chunk)
                loss.backward()
            results[name] = {"loss": loss.detach(), "grads": _grads(encoder)}
        history = _train_run(Path(out_dir) / "train", parallel=ctx)
        model_dir = Path(out_dir) / "train" / "model"  # rank 0 saves; the others wait for it
        results["train"] = {
            "history": [h["loss"] for h in history],
            "grad_norm": [h["grad_norm"] for h in history],
            "saved": (model_dir / "focalcse.json").is_file(),
        }
        results["resume"] = _resume_scenario(Path(out_dir) / "resume", ctx)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_process(loss_name: str, size: int, dtype: torch.dtype) -> dict:
    encoder = _encoder(dtype)
    ids, mask = _batch(size)
    z = encoder(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))  # (2B, d)
    loss = build_loss(loss_name, 0.05, m=0.3)(z[:size], z[size:])
    loss.backward()
    return {"loss": loss.detach(), "grads": _grads(encoder)}


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    procs = mp.start_processes(
        _worker, args=(_free_port(), str(out)), nprocs=WORLD, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + 180
    while not procs.join(timeout=1):
        if time.monotonic() > deadline:
            for p in procs.processes:
                p.kill()
            pytest.fail("DDP workers did not finish within 180 s (deadlock?)")
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.mark.parametrize(
    ("name", "loss_name", "size", "chunk", "dtype"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
@pytest.mark.slow
def test_ddp_matches_single_process(ddp_results, name, loss_name, size, chunk, dtype) -> None:
    ref = _single_process(loss_name, size, dtype)
    # float32: the gradients reach ~20 (1/tau = 20), where one ulp is ~2e-6, so the bound is relative.
    tol = {"atol": 1e-12, "rtol": 0.0} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    assert ref["grads"], "reference has no gradients"
    for rank, res in enumerate(ddp_results):
        got = res[name]
        # every rank reports the global-batch loss ...
        torch.testing.assert_close(got["loss"], ref["loss"], **tol)
        # ... and after DDP's averaging holds the single-process gradient of it
        assert set(got["grads"]) == set(ref["grads"]), f"rank {rank}: different parameters got gradients"
        for key, g in ref["grads"].items():
            torch.testing.assert_close(got["grads"][key], g, **tol, msg=f"rank {rank} {key}")


def test_shard_partitions_batch() -> None:
    idx = list(range(10, 17))  # 7 sentences over 3 ranks: 3 + 2 + 2
    parts = [shard(idx, r, 3) for r in range(3)]
    assert parts == [[10, 11, 12], [13, 14], [15, 16]]
    ctxs = [DistributedContext(rank=r, world_size=3) for r in range(3)]
    batches = [idx, [1, 2]]  # the 2-sentence batch cannot give every rank a sentence: dropped
    assert [c.shard_batches(batches) for c in ctxs] == [[p] for p in parts]


def test_single_process_context_is_identity() -> None:
    ctx = DistributedContext()
    model, loss = torch.nn.Linear(2, 2), InfoNCE(0.05)
    assert ctx.is_main and ctx.wrap_model(model) is model and ctx.wrap_loss(loss) is loss
    assert ctx.shard_batches([[3, 1, 2]]) == [[3, 1, 2]] and ctx.rank_seed(7) == 7
    assert DistributedContext(rank=1, world_size=2).rank_seed(7) != 7
    z1, z2 = torch.randn(5, 4), torch.randn(5, 4)
    focal = FocalInfoNCE(0.05, 0.3)
    assert torch.equal(global_contrastive_loss(focal, z1, z2), focal(z1, z2))


@pytest.mark.slow
def test_train_ddp_matches_single_process(ddp_results, tmp_path) -> None:
    """The training loop under 2 ranks logs the single process's losses and pre-clip gradient norms
    (clipping sees the all-reduced gradient: the global norm, the same on every rank) and saves one
    model."""
    history = _train_run(tmp_path)
    single = [h["loss"] for h in history]
    single_norm = [h["grad_norm"] for h in history]
    assert single_norm[0] > 1.0, "the default max_grad_norm 1.0 should bind in this run"
    for res in ddp_results:
        torch.testing.assert_close(
            torch.tensor(res["train"]["history"]), torch.tensor(single), atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(
            torch.tensor(res["train"]["grad_norm"]), torch.tensor(single_norm), atol=1e-5, rtol=1e-5
        )
        assert res["train"]["saved"]


@pytest.mark.slow
def test_resumed_ddp_run_equals_an_uninterrupted_one(ddp_results) -> None:
    """Every rank's RNG is checkpointed: after a crash at step 3 and a resume from the step-2
    checkpoint, both ranks log the uninterrupted run's losses and rank 0 saves identical weights."""
    for res in ddp_results:
        assert len(res["resume"]["straight"]) == 4
        assert res["resume"]["resumed"] == res["resume"]["straight"]
    assert ddp_results[0]["resume"]["same_weights"] is True
