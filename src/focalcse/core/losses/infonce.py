"""InfoNCE of unsupervised SimCSE (Gao et al., 2021, Eq. 1): the paper's baseline."""

from __future__ import annotations

import torch

from focalcse.core.losses.base import ContrastiveLoss

SPEC = {
    "name": "infonce",
    "class": "InfoNCE",
    "label": "InfoNCE (SimCSE)",
    "color": "#1f77b4",
    "hyper": {},
}


def infonce_logits(sim: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCSE logits: ``s / tau`` for every entry of the (N, M) cosine matrix."""
    return sim / temperature


class InfoNCE(ContrastiveLoss):
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

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        return infonce_logits(sim, self.temperature)
