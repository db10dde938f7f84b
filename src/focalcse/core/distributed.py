"""Data-parallel training (``torchrun`` + DDP) with negatives drawn from the global batch.

Each of the W ranks encodes its shard of the global batch (n_r sentences, N = sum n_r). The second
views are all-gathered **with gradient**, so rank r scores its n_r first views against all N second
views: the loss of every rank sees the global batch's negatives, exactly as one process with batch N
would. Positive of local row i: global column ``offset_r + i``, ``offset_r = n_0 + ... + n_{r-1}``.

Gradient scaling (checked by ``tests/test_distributed.py``): the single-process loss is
``L = (1/N) sum_i l_i``. Rank r back-propagates ``J_r = (W/N) sum_{i in r} l_i``; the gather's backward
all-reduces (sums) the column gradients of every rank's ``J``, so rank r's embedding gradients are
``W * dL/dz`` of its own shard, and DDP's gradient averaging (divide by W) gives exactly ``dL/dtheta``.
The tensor returned by :func:`global_contrastive_loss` carries ``J_r``'s gradient but the value of the
global ``L`` (one scalar all-reduce), so every rank logs, and NaN-checks, the same number.

The training loop needs only a :class:`DistributedContext` (see :func:`init_distributed`): it shards
batches, seeds each rank, wraps the model in DDP and the loss in :class:`GlobalBatchLoss`, and says
which rank evaluates, saves and logs. With one process every method is the identity.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from focalcse.core.losses.base import cosine_matrix

RANK_SEED_STRIDE = 1_000_003  # rank r seeds its RNG with seed + r * stride: rank 0 keeps the run's seed


def _world(group: Any = None) -> tuple[int, int]:
    """(rank, world size) of ``group``; (0, 1) without an initialised process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


class _GatherWithGrad(torch.autograd.Function):
    """All-gather of (n_r, d) shards into the (N, d) global matrix; backward sums every rank's
    gradient of the global matrix (all-reduce) and returns this rank's rows.

    Shards may differ in length (padded to the longest for the collective). All-reduce rather than
    reduce-scatter because gloo has no reduce-scatter; the (N, d) tensor is small.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sizes: tuple[int, ...], group: Any) -> torch.Tensor:
        rank, world = _world(group)
        ctx.sizes, ctx.rank, ctx.group = sizes, rank, group
        longest = max(sizes)
        padded = x.new_zeros((longest, *x.shape[1:]))  # (max n_r, d)
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous(), group=group)
        return torch.cat([p[:s] for p, s in zip(parts, sizes)])  # (N, d) in rank order

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.contiguous().clone()  # (N, d); all_reduce works in place
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None, None


def gather_sizes(n: int, device: torch.device, group: Any = None) -> tuple[int, ...]:
    """Every rank's local row count, in rank order."""
    _, world = _world(group)
    if world == 1:
        return (n,)
    local = torch.tensor([n], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(sizes, local, group=group)
    return tuple(int(s.item()) for s in sizes)


def all_gather_with_grad(
    x: torch.Tensor, group: Any = None, sizes: Sequence[int] | None = None
) -> torch.Tensor:
    """Concatenate every rank's ``x`` (n_r, ...) into (N, ...); gradients flow back to each shard.

    Args:
        x: this rank's shard.
        group: process group (default: the world).
        sizes: every rank's ``n_r`` if already known (saves one collective).
    """
    _, world = _world(group)
    if world == 1:
        return x
    sizes = tuple(sizes) if sizes is not None else gather_sizes(x.shape[0], x.device, group)
    return _GatherWithGrad.apply(x, sizes, group)


def global_contrastive_loss(
    loss_module: nn.Module, z1: torch.Tensor, z2: torch.Tensor, group: Any = None
) -> torch.Tensor:
    """The contrastive loss of this rank's rows against the global batch's second views.

    Rows: the local first views ``z1`` (n_r, d); columns: all ranks' second views (N, d), gathered
    with gradient; row i's positive is column ``offset_r + i``. Works for any loss module with
    ``loss_from_sim(sim, positive_offset)``: every :class:`~focalcse.core.losses.base.ContrastiveLoss`.

    Args:
        loss_module: the single-process loss.
        z1: (n_r, d) local first-view embeddings, un-normalised.
        z2: (n_r, d) local second-view embeddings.
        group: process group (default: the world).

    Returns:
        A scalar whose value is the global-batch loss ``L`` (equal on every rank) and whose gradient is
        that of ``J_r = (W/N) sum_{i in r} l_i``: after DDP's gradient averaging, parameters get
        ``dL/dtheta``. Without a process group (or with one rank): ``loss_module(z1, z2)``.
    """
    rank, world = _world(group)
    if world == 1:
        return loss_module(z1, z2)
    if z1.ndim != 2 or z1.shape != z2.shape:
        raise ValueError(f"expected z1 and z2 both (n, d), got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if z1.shape[0] == 0:
        raise ValueError(f"rank {rank} has an empty shard; every rank needs at least one sentence")
    sizes = gather_sizes(z1.shape[0], z1.device, group)
    total = sum(sizes)
    offset = sum(sizes[:rank])
    z2_all = _GatherWithGrad.apply(z2, sizes, group)  # (N, d): every rank's second views
    sim = cosine_matrix(z1, z2_all)  # (n_r, N)
    local = loss_module.loss_from_sim(sim, positive_offset=offset) * (z1.shape[0] * world / total)  # J_r
    with torch.no_grad():
        mean = local.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.SUM, group=group)
        mean /= world  # = L, the global-batch mean
    return local + (mean - local).detach()  # value L, gradient of J_r


class GlobalBatchLoss(nn.Module):
    """``loss(z1, z2)`` with negatives from every rank: :func:`global_contrastive_loss` as a module.

    Drop-in for the single-process loss in the training loop (same call, same value on one rank).
    """

    def __init__(self, base: nn.Module, group: Any = None) -> None:
        super().__init__()
        self.base = base
        self.group = group

    def loss_from_sim(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        return self.base.loss_from_sim(sim, positive_offset)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        return global_contrastive_loss(self.base, z1, z2, self.group)


def shard(idx: Sequence[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous slice of a global batch; slice lengths differ by at most one."""
    n = len(idx)
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return list(idx[start : start + base + (rank < extra)])


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in a data-parallel job, and the few things training does with it.

    ``DistributedContext()`` is the single-process context: every method is the identity.

    Attributes:
        rank: global rank (0 evaluates, saves and logs).
        world_size: number of processes.
        local_rank: rank on this machine (its GPU index).
        device: this rank's device.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def rank_seed(self, seed: int) -> int:
        """Per-rank RNG seed (different dropout masks on each rank); rank 0 keeps ``seed``."""
        return seed + self.rank * RANK_SEED_STRIDE

    def usable_batches(self, batches: Sequence[Sequence[int]]) -> list[list[int]]:
        """The global batches every rank can share: one with fewer sentences than ranks (only ever the
        last) is dropped on every rank, so all ranks run the same number of steps."""
        return [list(b) for b in batches if len(b) >= self.world_size]

    def shard(self, idx: Sequence[int]) -> list[int]:
        """This rank's slice of a global batch. Every rank computes the same global batch order (same
        seed), so the slices partition the data."""
        return shard(idx, self.rank, self.world_size) if self.distributed else list(idx)

    def shard_batches(self, batches: Sequence[Sequence[int]]) -> list[list[int]]:
        """This rank's slice of every usable global batch."""
        return [self.shard(b) for b in self.usable_batches(batches)]

    def wrap_model(self, model: nn.Module, **ddp_kwargs: Any) -> nn.Module:
        """The module to call in the training forward: ``model`` itself, or a DDP wrapper of it.

        Evaluate and save ``model`` (the unwrapped one). The backbone's own pooler layer is frozen:
        the encoder never uses its output (the MLP pooler is separate), so it gets no gradient in any
        mode and AdamW never changes it; freezing only tells DDP not to wait for its gradient.
        The per-forward buffer broadcast is off: BERT-style buffers are constants, and a broadcast in
        every forward would deadlock GradCache when ranks run different numbers of chunks.
        """
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        backbone_pooler = getattr(getattr(model, "backbone", None), "pooler", None)
        if isinstance(backbone_pooler, nn.Module):
            backbone_pooler.requires_grad_(False)
        # torch >= 2.13 names the per-forward buffer sync `forward_sync_buffers` (init sync is kept).
        params = inspect.signature(DistributedDataParallel.__init__).parameters
        sync_key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
        kwargs: dict[str, Any] = {sync_key: False}
        if self.device.type == "cuda":
            kwargs["device_ids"] = [self.device.index]
        kwargs.update(ddp_kwargs)
        return DistributedDataParallel(model, **kwargs)

    def wrap_loss(self, loss: nn.Module) -> nn.Module:
        """The loss with global-batch negatives (:class:`GlobalBatchLoss`); ``loss`` on one rank."""
        return GlobalBatchLoss(loss) if self.distributed else loss

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank; ``[obj]`` in one process."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (e.g. fills a cache), then the others."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()


def init_distributed(backend: str | None = None) -> DistributedContext:
    """Join the job that ``torchrun`` started (env ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``); without them, the single-process context.

    Args:
        backend: ``nccl`` (default with CUDA) or ``gloo`` (default on CPU).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistributedContext()  # the training config's device applies
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistributedContext(rank=rank, world_size=world, local_rank=local_rank, device=device)


def cleanup() -> None:
    """Leave the process group (end of a ``torchrun`` worker)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
