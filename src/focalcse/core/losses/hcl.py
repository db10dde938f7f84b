"""HCL: hard-negative contrastive loss of Robinson et al., "Contrastive Learning with Hard Negative
Samples" (ICLR 2021), on SimCSE's in-batch negatives."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from focalcse.core.losses.base import ContrastiveLoss, positive_mask

# Defaults, from the reference code (joshr17/HCL, commit 7b4647f, image/main.py):
# - beta = 0.1. The reference's hardness weight is imp = exp(beta * s / t) (main.py:43, neg.log() = s/t),
#   so its concentration per unit cosine is beta / t = 1.0 / 0.5 = 2 (defaults --beta 1.0 at
#   main.py:139, --temperature 0.5 at main.py:132). This project trains at t = 0.05; a fixed
#   beta = 0.1 keeps that concentration: 0.1 / 0.05 = 2. (beta = 1.0 at t = 0.05 would be 20 per unit
#   cosine, ten times the reference's.) beta does not follow train.temperature: it is a fixed value.
# - tau_plus = 0.1, the reference's --tau_plus default (main.py:133, also its README's and launch.sh's
#   run), with its clamp N_g >= N e^{-1/t} (main.py:47).
SPEC = {
    "name": "hcl",
    "class": "HCL",
    "label": "HCL (Robinson et al.)",
    "color": "#2ca02c",
    "hyper": {
        "beta": {
            "default": 0.1,
            "min": 0.0,
            "help": "concentration beta of the hardness weights exp(beta s / tau); 0.1 keeps the reference's "
            "beta / tau = 1.0 / 0.5 = 2 at tau 0.05 (fixed, not rescaled with tau)",
        },
        "tau_plus": {
            "default": 0.1,
            "min": 0.0,
            "max": 0.99,
            "help": "debiasing prior tau+ (reference default 0.1, with its clamp; 0 = off)",
        },
    },
    # docs/method.md ("A third loss: HCL") gives the line numbers behind each sentence
    "reference": "joshr17/HCL @7b4647f (image/main.py)",
    "departures": [
        "negatives: SimCSE's in-batch ones, row i (first view) against the other sentences' second views, "
        "N - 1 per row and one direction; the reference uses both views of every other image, 2N - 2 per "
        "anchor, with both views as anchors",
        "beta = {beta:g} at tau = {temperature:g} (the reference: beta 1.0 at tau 0.5, a concentration "
        "beta / tau of 2 per unit cosine), fixed: it does not follow train.temperature",
        "tau+ = {tau_plus:g}, the reference's default, not rescaled for tau = {temperature:g} (the reference "
        "trains at 0.5)",
        "the clamp N_g >= Q e^(-1/tau) only when tau+ > 0 (the reference clamps always; without debiasing "
        "the bound holds anyway)",
    ],
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
    :math:`Q = M - 1` negatives per row. This is a departure from the reference code (joshr17/HCL,
    ``image/main.py`` ``criterion``): for a batch of :math:`N` images it contrasts each anchor with both
    views of the other images, :math:`2N - 2` negatives (``N = batch_size * 2 - 2``, main.py:42); here
    each row has SimCSE's :math:`N - 1` negatives (the other sentences' second views), and :math:`Q`
    takes the place of the reference's ``N`` in the debiasing term and in the clamp. The importance
    weights are not detached (as the reference code). The reference clamps :math:`N_g` from below at
    ``N * e^(-1/t)`` whatever :math:`\tau^+` (main.py:47); here the clamp :math:`Q e^{-1/\tau}` is
    applied only when :math:`\tau^+ > 0`, because without debiasing
    :math:`N_g = \sum_j w_{ij} e^{s_{ij}/\tau} \ge e^{-1/\tau} \sum_j w_{ij} = Q e^{-1/\tau}` holds
    anyway (:math:`s \ge -1`, the weights average 1). With :math:`\beta = 0` and :math:`\tau^+ = 0`
    the loss is InfoNCE exactly.

    Defaults (reference ``image/main.py``): :math:`\tau^+ = 0.1` (``--tau_plus``, main.py:133) and
    :math:`\beta = 0.1`, a fixed value. The reference weight is :math:`e^{\beta s/\tau}`, so its
    concentration per unit cosine is :math:`\beta/\tau = 1.0/0.5 = 2` (``--beta 1.0``, main.py:139, at
    ``--temperature 0.5``, main.py:132); :math:`\beta = 0.1` keeps it at this project's
    :math:`\tau = 0.05` (:math:`0.1/0.05 = 2`). It is not rescaled when ``temperature`` changes.

    Args:
        temperature: :math:`\tau > 0`.
        beta: concentration :math:`\beta \ge 0` (default 0.1: the reference's :math:`\beta/\tau = 2` at
            :math:`\tau = 0.05`; 0 = uniform weights).
        tau_plus: class prior :math:`\tau^+ \in [0, 1)` (default 0.1, the reference's; 0 = no debiasing).

    Shape:
        - z1, z2: (N, d), un-normalised embeddings of the two views (the loss L2-normalises).
        - Output: scalar, the mean of :math:`\ell_i`.

    Examples::
        >>> loss = HCL(0.05)  # beta 0.1, tau_plus 0.1
        >>> loss(torch.randn(8, 16), torch.randn(8, 16)).shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.05, beta: float = 0.1, tau_plus: float = 0.1) -> None:
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
