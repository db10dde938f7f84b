"""Contrastive losses of unsupervised SimCSE (InfoNCE) and Focal-InfoNCE (Hou & Li, 2023).

Both losses are a cross-entropy over the (N, N) matrix of cosine similarities between the first and
second dropout views of a batch; they differ only in how each similarity becomes a logit. The tensor
math lives in plain functions (:func:`cosine_matrix`, :func:`infonce_logits`, :func:`focal_logits`)
so it can be tested on raw tensors and reused by the distributed and chunked code paths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LOSS_NAMES = ("infonce", "focal_infonce")


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


def infonce_logits(sim: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCSE logits: ``s / tau`` for every entry of the (N, M) cosine matrix."""
    return sim / temperature


def focal_logits(sim: torch.Tensor, temperature: float, m: float, positive_offset: int = 0) -> torch.Tensor:
    """Focal-InfoNCE logits (paper Eq. 2).

    Positive (row ``i``, column ``i + positive_offset``): ``s_p^2 / tau``; every negative:
    ``s_n (s_n + m) / tau``. ``positive_offset`` places the positives when the columns span a larger
    (e.g. all-gathered) batch than the rows.

    Args:
        sim: (N, M) cosine matrix, M >= N + positive_offset.
        temperature: tau > 0.
        m: hardness margin m >= 0.
        positive_offset: column of row 0's positive.

    Returns:
        (N, M) logits.
    """
    n = sim.shape[0]
    rows = torch.arange(n, device=sim.device)
    is_pos = torch.zeros_like(sim, dtype=torch.bool)
    is_pos[rows, rows + positive_offset] = True  # (N, M) mask of positive pairs
    # Positives: s_p^2 / tau; negatives: s_n (s_n + m) / tau (no stop-gradient, as the official code).
    return torch.where(is_pos, sim * sim, sim * (sim + m)) / temperature


def _check_temperature(temperature: float) -> float:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    return float(temperature)


def _check_views(z1: torch.Tensor, z2: torch.Tensor) -> None:
    # The two views of one batch: a different row count would silently add negatives or fail late.
    if z1.ndim != 2 or z1.shape != z2.shape:
        raise ValueError(f"expected z1 and z2 both (N, d), got {tuple(z1.shape)} and {tuple(z2.shape)}")


class InfoNCE(nn.Module):
    r"""Unsupervised SimCSE loss (Gao et al., 2021, Eq. 1).

    .. math::
        \ell_i = -\log \frac{e^{s(h_i, h_i^+)/\tau}}{\sum_{j=1}^{N} e^{s(h_i, h_j^+)/\tau}},
        \qquad L = \frac{1}{N}\sum_i \ell_i

    with :math:`s` the cosine similarity. Equivalent to cross-entropy over the (N, N) matrix
    :math:`\cos(z1_i, z2_j)/\tau` with target ``i``; computed through log-sum-exp, so it stays finite
    for small :math:`\tau` and identical embeddings.

    Args:
        temperature: :math:`\tau > 0` (SimCSE: 0.05).

    Shape:
        - z1, z2: (N, d), un-normalised embeddings of the two views (the loss L2-normalises).
        - Output: scalar, the mean of :math:`\ell_i` over the batch.

    Examples::
        >>> loss = InfoNCE(0.05)
        >>> z1, z2 = torch.randn(8, 16), torch.randn(8, 16)
        >>> loss(z1, z2).shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.05) -> None:
        super().__init__()
        self.temperature = _check_temperature(temperature)

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        return infonce_logits(sim, self.temperature)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        _check_views(z1, z2)
        return loss_from_logits(self.logits(cosine_matrix(z1, z2)))

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"


class FocalInfoNCE(nn.Module):
    r"""Focal-InfoNCE (Hou & Li, 2023, Eq. 2).

    .. math::
        \ell_i = -\log \frac{e^{(s_p^i)^2/\tau}}
            {\sum_{j \ne i} e^{s_n^{ij}(s_n^{ij}+m)/\tau} + e^{(s_p^i)^2/\tau}},
        \qquad L = \frac{1}{N}\sum_i \ell_i

    :math:`s_p^i = \cos(h_i, h_i^+)`, :math:`s_n^{ij} = \cos(h_i, h_j^+)`. Negatives with
    :math:`s_n > 1 - m` get a larger logit than under InfoNCE (hard negatives up-weighted), the rest
    a smaller one. The mean over ``i`` follows the official code (the paper's Eq. 3 sums).

    Args:
        temperature: :math:`\tau > 0`.
        m: hardness margin :math:`m \ge 0` (paper: 0.3).

    Shape:
        - z1, z2: (N, d), un-normalised embeddings of the two views (the loss L2-normalises).
        - Output: scalar.

    Examples::
        >>> loss = FocalInfoNCE(0.05, m=0.3)
        >>> loss(torch.randn(8, 16), torch.randn(8, 16)).shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.05, m: float = 0.3) -> None:
        super().__init__()
        self.temperature = _check_temperature(temperature)
        if not m >= 0:
            raise ValueError(f"m must be >= 0, got {m!r}")
        self.m = float(m)

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        return focal_logits(sim, self.temperature, self.m, positive_offset)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        _check_views(z1, z2)
        return loss_from_logits(self.logits(cosine_matrix(z1, z2)))

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, m={self.m}"


def loss_from_logits(logits: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
    """Mean cross-entropy of an (N, M) logit matrix whose row ``i`` has its positive at ``i + offset``."""
    labels = torch.arange(logits.shape[0], device=logits.device) + positive_offset  # (N,)
    # Softmax in float32 at least: under bf16 autocast the matmul may come back in bf16.
    return F.cross_entropy(
        logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, labels
    )


def build_loss(name: str, temperature: float, m: float = 0.3) -> nn.Module:
    """The loss named ``name`` (one of :data:`LOSS_NAMES`)."""
    if name == "infonce":
        return InfoNCE(temperature)
    if name == "focal_infonce":
        return FocalInfoNCE(temperature, m)
    raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(LOSS_NAMES)}")
