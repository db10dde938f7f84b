"""HCL: hard-negative contrastive loss of Robinson et al., "Contrastive Learning with Hard Negative
Samples" (ICLR 2021), on SimCSE's in-batch negatives."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from focalcse.core.losses.base import ContrastiveLoss, positive_mask

# beta = 1.0 is the default of the reference code (joshr17/HCL, image/main.py `--beta`, also its
# README's example run); tau_plus = 0 turns the debiasing off, so the default is pure hard-negative
# importance weighting.
SPEC = {
    "name": "hcl",
    "class": "HCL",
    "label": "HCL (Robinson et al.)",
    "color": "#2ca02c",
    "hyper": {
        "beta": {"default": 1.0, "min": 0.0, "help": "concentration beta of the hardness weights"},
        "tau_plus": {"default": 0.0, "min": 0.0, "max": 0.99, "help": "debiasing prior tau+ (0 = off)"},
    },
}


def hcl_weights(neg_logits: torch.Tensor, is_neg: torch.Tensor, beta: float) -> torch.Tensor:
    """Log importance weights ``log w_ij = beta n_ij - log mean_k exp(beta n_ik)`` of each row's
    negatives (``n = s / tau``); 0 where ``beta = 0``. Shape of ``neg_logits``; -inf off ``is_neg``."""
    masked = torch.where(is_neg, beta * neg_logits, float("-inf"))  # (N, M)
    zeros = torch.where(is_neg, torch.zeros_like(neg_logits), float("-inf"))  # (N, M)
    # log mean = logsumexp(beta n) - log(#negatives); the count as a logsumexp of zeros, so beta = 0
    # gives exactly 0 (the weights of InfoNCE).
    log_mean = torch.logsumexp(masked, dim=1, keepdim=True) - torch.logsumexp(zeros, dim=1, keepdim=True)
    return masked - log_mean


class HCL(ContrastiveLoss):
    r"""Hard-negative contrastive loss (Robinson et al., 2021, Eq. 6 with the "hard" estimator).

    .. math::
        \ell_i = -\log \frac{e^{s_{ii}/\tau}}{e^{s_{ii}/\tau} + N_g^i}, \qquad
        N_g^i = \max\Big(\frac{-\tau^+ Q\, e^{s_{ii}/\tau} + \sum_{j \ne i} w_{ij} e^{s_{ij}/\tau}}
            {1 - \tau^+},\; Q e^{-1/\tau}\Big), \qquad
        w_{ij} = \frac{e^{\beta s_{ij}/\tau}}{\frac{1}{Q}\sum_{k \ne i} e^{\beta s_{ik}/\tau}}

    over SimCSE's in-batch negatives: row ``i`` (first view) against the second views ``j != i``,
    :math:`Q = M - 1` negatives per row. The importance weights are not detached (as the reference
    code). The clamp at :math:`Q e^{-1/\tau}` (the reference code's) applies only when
    :math:`\tau^+ > 0`; without debiasing :math:`N_g \ge Q e^{-1/\tau}` holds anyway. With
    :math:`\beta = 0` and :math:`\tau^+ = 0` the loss is InfoNCE exactly.

    Args:
        temperature: :math:`\tau > 0`.
        beta: concentration :math:`\beta \ge 0` (reference default 1.0; 0 = uniform weights).
        tau_plus: class prior :math:`\tau^+ \in [0, 1)` (0 = no debiasing).

    Shape:
        - z1, z2: (N, d), un-normalised embeddings of the two views (the loss L2-normalises).
        - Output: scalar, the mean of :math:`\ell_i`.

    Examples::
        >>> loss = HCL(0.05, beta=1.0)
        >>> loss(torch.randn(8, 16), torch.randn(8, 16)).shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.05, beta: float = 1.0, tau_plus: float = 0.0) -> None:
        super().__init__(temperature)
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta!r}")
        if not 0 <= tau_plus < 1:
            raise ValueError(f"tau_plus must be in [0, 1), got {tau_plus!r}")
        self.beta, self.tau_plus = float(beta), float(tau_plus)

    def loss_from_sim(self, sim: torch.Tensor, positive_offset: int = 0) -> torch.Tensor:
        # float32 at least and autocast off: ContrastiveLoss wraps this override (fp32_loss_math)
        logits = sim / self.temperature  # (N, M)
        is_pos = positive_mask(sim, positive_offset)  # (N, M)
        log_w = hcl_weights(logits, ~is_pos, self.beta)  # (N, M), -inf at the positives
        weighted = torch.where(is_pos, logits, logits + log_w)  # (N, M)
        if self.tau_plus == 0:
            labels = torch.arange(sim.shape[0], device=sim.device) + positive_offset  # (N,)
            return F.cross_entropy(weighted, labels)
        pos = logits[is_pos]  # (N,) s_ii / tau
        log_reweight = torch.logsumexp(torch.where(is_pos, float("-inf"), weighted), dim=1)  # (N,)
        q = sim.shape[1] - 1  # negatives per row
        c = torch.maximum(pos, log_reweight).detach()  # (N,) scale for a stable log
        ng = (-self.tau_plus * q * torch.exp(pos - c) + torch.exp(log_reweight - c)) / (1 - self.tau_plus)
        floor = q * torch.exp(-1.0 / self.temperature - c)  # (N,) the clamp Q e^{-1/tau}, scaled
        log_ng = c + torch.log(torch.maximum(ng, floor))  # (N,)
        return (torch.logaddexp(pos, log_ng) - pos).mean()

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, beta={self.beta}, tau_plus={self.tau_plus}"
