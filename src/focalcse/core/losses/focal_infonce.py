"""Focal-InfoNCE (Hou & Li, 2023, Eq. 2): the paper's loss."""

from __future__ import annotations

import torch

from focalcse.core.losses.base import ContrastiveLoss, positive_mask

SPEC = {
    "name": "focal_infonce",
    "class": "FocalInfoNCE",
    "label": "Focal-InfoNCE",
    "color": "#d62728",
    "hyper": {"m": {"default": 0.3, "min": 0.0, "help": "hardness margin m (paper: 0.3)"}},
}


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
    is_pos = positive_mask(sim, positive_offset)  # (N, M)
    # Positives: s_p^2 / tau; negatives: s_n (s_n + m) / tau (no stop-gradient, as the official code).
    return torch.where(is_pos, sim * sim, sim * (sim + m)) / temperature


class FocalInfoNCE(ContrastiveLoss):
    r"""Focal-InfoNCE (Hou & Li, 2023, Eq. 2).

    .. math::
        \ell_i = -\log \frac{e^{(s_p^i)^2/\tau}}
            {\sum_{j \ne i} e^{s_n^{ij}(s_n^{ij}+m)/\tau} + e^{(s_p^i)^2/\tau}},
        \qquad L = \frac{1}{N}\sum_i \ell_i

    :math:`s_p^i = \cos(h_i, h_i^+)`, :math:`s_n^{ij} = \cos(h_i, h_j^+)`. Against InfoNCE's
    negative logit :math:`s/\tau`, the difference is :math:`(s(s+m) - s)/\tau = s(s+m-1)/\tau`
    (for :math:`0 \le m < 1`): negative for :math:`0 < s < 1 - m` (a lower logit: easy negatives
    down-weighted), zero at :math:`s = 0` and :math:`s = 1 - m`, and positive for :math:`s > 1 - m`
    (hard negatives up-weighted) and for :math:`s < 0` (a higher logit, though such a pair is already
    far apart; the paper counts it as easy). The mean over ``i`` follows the official code (the paper's
    Eq. 3 sums).

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
        super().__init__(temperature)
        if not m >= 0:
            raise ValueError(f"m must be >= 0, got {m!r}")
        self.m = float(m)

    def logits(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        return focal_logits(sim, self.temperature, self.m, positive_offset)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, m={self.m}"
