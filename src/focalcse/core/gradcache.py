"""GradCache-style chunking (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup"): the contrastive loss of a large batch with activation memory of one chunk.

A contrastive loss couples every row of the batch, so the batch cannot simply be split into
micro-batches with gradient accumulation. Instead, for the (2N, L) two-view batch:

1. embed it chunk by chunk **without** an autograd graph, recording each chunk's RNG state;
2. compute the loss on the full (2N, d) embedding matrix and its gradient ``g = dL/dz`` (cheap: the
   graph is only the loss);
3. when the loss is back-propagated, re-run each chunk's forward **with** its graph, replaying the
   recorded RNG state so dropout draws the same masks as in step 1, and back-propagate ``g`` of that
   chunk's rows into the parameters (gradients accumulate over chunks).

Parameter gradients equal those of one forward over the same chunks with graph (exactly, up to float
rounding), for any loss; peak activation memory is that of one chunk, at the cost of one extra forward.
Under DDP every chunk but the last runs under ``no_sync()``, so gradients are all-reduced once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from focalcse.core.losses.base import fp32_loss_math

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class RandState:
    """The RNG state that dropout reads for tensors on ``device``, captured now, replayable later.

    CPU ops draw from the CPU generator; CUDA ops from the device's generator (captured too). As
    GradCache's ``RandContext``: replay inside :meth:`replay` and the process RNG is left as it was.
    """

    def __init__(self, device: torch.device) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda_index: int | None = None
        self.cuda: torch.Tensor | None = None
        if device.type == "cuda":
            self.cuda_index = device.index if device.index is not None else torch.cuda.current_device()
            self.cuda = torch.cuda.get_rng_state(self.cuda_index)

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        devices = [self.cuda_index] if self.cuda_index is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.cuda_index)
            yield


def _upcast(z: torch.Tensor) -> torch.Tensor:
    """Half-precision embeddings (autocast) to float32 for the loss, as the plain training step does."""
    return z.float() if z.dtype in (torch.float16, torch.bfloat16) else z


def _chunks(rows: int, chunk_size: int) -> list[slice]:
    return [slice(start, min(start + chunk_size, rows)) for start in range(0, rows, chunk_size)]


def _unwrap(model: nn.Module) -> tuple[nn.Module, bool]:
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return model.module, True
    return model, False


def cached_contrastive_loss(
    model: nn.Module,
    loss_fn: LossFn,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """The two-view contrastive loss of a batch, computed in chunks of ``chunk_size`` sequences.

    Call it where the plain code computes ``z = model(...)`` and ``loss_fn(z1, z2)`` (inside the same
    autocast context; half-precision embeddings are cast to float32 for the loss, whose value and
    gradient ``dL/dz`` are computed in float32 as on the plain path); then ``loss.backward()`` as
    usual: the backward re-runs each
    chunk's forward with its replayed RNG state and back-propagates the cached embedding gradients,
    accumulating into the parameters' ``.grad``.

    Args:
        model: the encoder, or a DDP wrapper of it: ``model(input_ids=, attention_mask=) -> (B, d)``.
        loss_fn: ``loss_fn(z1, z2) -> scalar``, e.g. a :mod:`focalcse.core.losses` module or a
            :class:`focalcse.core.distributed.GlobalBatchLoss`.
        input_ids: (2N, L) token ids, first views then second views.
        attention_mask: (2N, L).
        chunk_size: sequences per forward (each sentence counts twice, once per view).

    Returns:
        The scalar loss (same value as the plain computation). It is a leaf whose backward hook runs
        the chunked re-forward; back-propagate it once.
    """
    rows = input_ids.shape[0]
    if rows % 2 or rows < 2:
        raise ValueError(f"expected the (2N, L) two-view batch, got {rows} rows")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if input_ids.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"GradCache replays the dropout RNG on cpu and cuda only, not {input_ids.device.type}"
        )
    n = rows // 2
    encoder, is_ddp = _unwrap(model)
    slices = _chunks(rows, chunk_size)
    device = input_ids.device
    # The re-forward runs inside backward, outside the caller's autocast block: remember its state.
    autocast_on = torch.is_autocast_enabled(device.type)
    autocast_dtype = torch.get_autocast_dtype(device.type)

    # 1. Embeddings without graph, one chunk at a time (the RNG state before each chunk is kept).
    states: list[RandState] = []
    parts: list[torch.Tensor] = []
    with torch.no_grad():
        for sl in slices:
            states.append(RandState(device))
            parts.append(encoder(input_ids=input_ids[sl], attention_mask=attention_mask[sl]))
    z = torch.cat(parts).detach().requires_grad_()  # (2N, d)
    del parts

    # 2. Loss over the whole batch and its gradient w.r.t. the embeddings. Backward ops run under the
    # autocast state of the thread: inside the caller's bf16 block this backward would redo the loss's
    # fp32 matmuls in bf16, so it runs with autocast off (as the plain path's backward, after the block).
    with torch.enable_grad():
        loss = loss_fn(_upcast(z[:n]), _upcast(z[n:]))
        with fp32_loss_math(device):
            (grad_z,) = torch.autograd.grad(loss, z)  # (2N, d)

    # 3. On backward: re-forward each chunk with graph and the same dropout, push grad_z through it.
    def replay(grad_loss: torch.Tensor) -> None:
        scale = None if bool(grad_loss == 1) else grad_loss
        for k, (sl, state) in enumerate(zip(slices, states)):
            last = k == len(slices) - 1
            sync = contextlib.nullcontext() if (last or not is_ddp) else model.no_sync()
            with sync:
                with (
                    state.replay(),
                    torch.enable_grad(),
                    torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_on),
                ):
                    z_chunk = model(input_ids=input_ids[sl], attention_mask=attention_mask[sl])  # (c, d)
                g = grad_z[sl].to(z_chunk.dtype)
                torch.autograd.backward(z_chunk, g if scale is None else g * scale)

    out = loss.detach().requires_grad_()
    out.register_hook(replay)
    return out


def two_view_loss(
    model: nn.Module,
    loss_fn: LossFn,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk_size: int = 0,
) -> torch.Tensor:
    """The training step's loss for a (2N, L) two-view batch; ``loss.backward()`` gives the gradients.

    ``chunk_size`` 0: one forward with graph, as plain SimCSE; otherwise
    :func:`cached_contrastive_loss` (even with one chunk: under DDP every rank must take the same
    path, since the two issue their collectives in a different order).
    """
    if chunk_size:
        return cached_contrastive_loss(model, loss_fn, input_ids, attention_mask, chunk_size)
    rows = input_ids.shape[0]
    z = model(input_ids=input_ids, attention_mask=attention_mask)  # (2N, d)
    return loss_fn(_upcast(z[: rows // 2]), _upcast(z[rows // 2 :]))
