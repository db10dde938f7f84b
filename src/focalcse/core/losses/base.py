"""What every contrastive loss shares: the cosine matrix, the cross-entropy, the two-view checks.

A loss of this project is a cross-entropy-style objective over the (N, M) matrix of cosine
similarities between first views (rows) and second views (columns) of a batch. A subclass of
:class:`ContrastiveLoss` defines how similarities become logits (:meth:`ContrastiveLoss.logits`) or,
for losses that are not a plain softmax over logits, the whole per-batch value
(:meth:`ContrastiveLoss.loss_from_sim`). The single-process, GradCache and DDP paths all go through
:func:`cosine_matrix` and :meth:`ContrastiveLoss.loss_from_sim`, so a new loss works on every path.

The loss math is fp32 (at least) on every path: :func:`cosine_matrix` and every ``loss_from_sim``
(a subclass's override included, wrapped by :class:`ContrastiveLoss`) run with autocast disabled and
half-precision inputs cast to float32 (:func:`fp32_loss_math`). Under bf16/fp16 autocast the encoder
runs in half precision, but the cosines, logits and cross-entropy do not: as in SimCSE, whose
``nn.CosineSimilarity`` runs in fp32 under autocast. With 1/tau = 20 a bf16 cosine (8 bits of
mantissa) would move the logits by ~0.1.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_HALF = (torch.float16, torch.bfloat16)


def to_fp32(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32 if it is half precision (differentiable: the gradient flows back in ``x``'s
    dtype); float32 and float64 pass unchanged."""
    return x.float() if x.dtype in _HALF else x


@contextlib.contextmanager
def fp32_loss_math(device: torch.device) -> Iterator[None]:
    """Autocast off on ``device``'s type: inside, a matmul of float32 tensors stays float32."""
    with torch.autocast(device.type, enabled=False):
        yield


def _fp32_sim_loss(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss_from_sim`` run under :func:`fp32_loss_math` on a float32 (at least) cosine matrix."""

    @functools.wraps(fn)
    def wrapper(self: Any, sim: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        with fp32_loss_math(sim.device):
            return fn(self, to_fp32(sim), *args, **kwargs)

    return wrapper


def cosine_matrix(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``z1`` with every row of ``z2``.

    Args:
        z1: (N, d) first-view embeddings, any scale.
        z2: (M, d) second-view embeddings, any scale.

    Returns:
        (N, M) matrix ``s[i, j] = cos(z1_i, z2_j)``, float32 for half-precision inputs and under
        autocast (float64 inputs stay float64).
    """
    if z1.ndim != 2 or z2.ndim != 2 or z1.shape[1] != z2.shape[1]:
        raise ValueError(
            f"expected z1 (N, d) and z2 (M, d) with equal d, got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    with fp32_loss_math(z1.device):  # autocast would run the matmul in bf16
        z1, z2 = to_fp32(z1), to_fp32(z2)
        # eps keeps a zero vector finite; it never changes the cosine of a real embedding.
        return F.normalize(z1, dim=-1, eps=1e-12) @ F.normalize(z2, dim=-1, eps=1e-12).T  # (N, M)


def loss_from_logits(logits: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
    """Mean cross-entropy of an (N, M) logit matrix whose row ``i`` has its positive at ``i + offset``."""
    labels = torch.arange(logits.shape[0], device=logits.device) + positive_offset  # (N,)
    with fp32_loss_math(logits.device):  # softmax in float32 at least, also when called on its own
        return F.cross_entropy(to_fp32(logits), labels)


def positive_mask(sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
    """(N, M) boolean mask, True at each row's positive (row ``i``, column ``i + positive_offset``)."""
    n = sim.shape[0]
    rows = torch.arange(n, device=sim.device)
    mask = torch.zeros_like(sim, dtype=torch.bool)
    mask[rows, rows + positive_offset] = True
    return mask


def check_temperature(temperature: float) -> float:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    return float(temperature)


def check_views(z1: torch.Tensor, z2: torch.Tensor) -> None:
    # The two views of one batch: a different row count would silently add negatives or fail late.
    if z1.ndim != 2 or z1.shape != z2.shape:
        raise ValueError(f"expected z1 and z2 both (N, d), got {tuple(z1.shape)} and {tuple(z2.shape)}")


class ContrastiveLoss(nn.Module):
    """Base of the registered losses: ``forward(z1, z2) -> scalar`` over in-batch negatives.

    Subclasses implement :meth:`logits` (a softmax over logits) or override :meth:`loss_from_sim`.
    Every ``loss_from_sim`` (the base's and each subclass's override, wrapped when the subclass is
    defined) runs with autocast off on a float32 (at least) cosine matrix, so a loss is fp32 math
    under any autocast without doing anything itself.

    Args:
        temperature: :math:`\\tau > 0`.
    """

    def __init__(self, temperature: float = 0.05) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # An override of loss_from_sim gets the fp32 guarantee too (DDP and plugins call it directly).
        if "loss_from_sim" in cls.__dict__:
            cls.loss_from_sim = _fp32_sim_loss(cls.__dict__["loss_from_sim"])

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        """(N, M) logits from the (N, M) cosine matrix ``sim``."""
        raise NotImplementedError(f"{type(self).__name__} defines neither logits() nor loss_from_sim()")

    @_fp32_sim_loss
    def loss_from_sim(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        """Mean loss of the rows of the (N, M) cosine matrix; row ``i``'s positive at ``i + offset``.

        Runs with autocast off on ``sim`` cast to float32 if it is half precision.
        """
        return loss_from_logits(self.logits(sim, positive_offset), positive_offset)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """Scalar loss of first views ``z1`` (N, d) against second views ``z2`` (N, d), any dtype;
        the loss math is float32 (float64 for float64 inputs) under any autocast."""
        check_views(z1, z2)
        return self.loss_from_sim(cosine_matrix(z1, z2))

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"
