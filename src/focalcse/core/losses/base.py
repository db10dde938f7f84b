"""What every contrastive loss shares: the cosine matrix, the cross-entropy, the two-view checks.

A loss of this project is a cross-entropy-style objective over the (N, M) matrix of cosine
similarities between first views (rows) and second views (columns) of a batch. A subclass of
:class:`ContrastiveLoss` defines how similarities become logits (:meth:`ContrastiveLoss.logits`) or,
for losses that are not a plain softmax over logits, the whole per-batch value
(:meth:`ContrastiveLoss.loss_from_sim`). The single-process, GradCache and DDP paths all go through
:meth:`ContrastiveLoss.loss_from_sim`, so a new loss works on every path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def cosine_matrix(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``z1`` with every row of ``z2``.

    Args:
        z1: (N, d) first-view embeddings, any scale.
        z2: (M, d) second-view embeddings, any scale.

    Returns:
        (N, M) matrix ``s[i, j] = cos(z1_i, z2_j)``.
    """
    if z1.ndim != 2 or z2.ndim != 2 or z1.shape[1] != z2.shape[1]:
        raise ValueError(
            f"expected z1 (N, d) and z2 (M, d) with equal d, got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    # eps keeps a zero vector finite; it never changes the cosine of a real embedding.
    return F.normalize(z1, dim=-1, eps=1e-12) @ F.normalize(z2, dim=-1, eps=1e-12).T  # (N, M)


def loss_from_logits(logits: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
    """Mean cross-entropy of an (N, M) logit matrix whose row ``i`` has its positive at ``i + offset``."""
    labels = torch.arange(logits.shape[0], device=logits.device) + positive_offset  # (N,)
    # Softmax in float32 at least: under bf16 autocast the matmul may come back in bf16.
    return F.cross_entropy(
        logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, labels
    )


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

    Args:
        temperature: :math:`\\tau > 0`.
    """

    def __init__(self, temperature: float = 0.05) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature)

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        """(N, M) logits from the (N, M) cosine matrix ``sim``."""
        raise NotImplementedError(f"{type(self).__name__} defines neither logits() nor loss_from_sim()")

    def loss_from_sim(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        """Mean loss of the rows of the (N, M) cosine matrix; row ``i``'s positive at ``i + offset``."""
        return loss_from_logits(self.logits(sim, positive_offset), positive_offset)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        check_views(z1, z2)
        return self.loss_from_sim(cosine_matrix(z1, z2))

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"
