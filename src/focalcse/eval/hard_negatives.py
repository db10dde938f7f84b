"""§5.1's hard negatives: STS-B train pairs of low gold score that a model still finds similar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch.nn.functional as F

from focalcse.core.encode import encode
from focalcse.data.sts import StsSplit


def hardest_negatives(cosines: Any, gold: Any, max_gold: float, k: int) -> list[int]:
    """Indices of the ``k`` pairs with the highest cosine among those with ``gold <= max_gold``
    (ties broken by index, so the choice is deterministic)."""
    cos, gold = np.asarray(cosines, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if cos.shape != gold.shape:
        raise ValueError(f"cosines {cos.shape} and gold {gold.shape} differ in shape")
    candidates = np.flatnonzero(gold <= max_gold)
    order = sorted(candidates.tolist(), key=lambda i: (-cos[i], i))
    return order[:k]


def candidate_pairs(split: StsSplit, max_gold: float) -> tuple[list[int], list[str], list[str], list[float]]:
    """The pairs of ``split`` (subsets concatenated) with gold ``<= max_gold``: their indices, both
    sentences, and the gold scores of every pair (indexed like the split)."""
    s1, s2, gold = [], [], []
    for a, b, g in split.subsets.values():
        s1 += a
        s2 += b
        gold += g
    cand = [i for i, g in enumerate(gold) if g <= max_gold]
    if not cand:
        raise ValueError(f"no STS-B train pair has gold <= report.hard_negative_max_gold={max_gold}")
    return cand, [s1[i] for i in cand], [s2[i] for i in cand], gold


def pair_cosines(
    encoder: Any, s1: Sequence[str], s2: Sequence[str], device: str, batch_size: int, precision: str
) -> list[float]:
    """Cosine of every pair ``(s1[i], s2[i])`` under ``encoder`` (its evaluation pooler)."""
    encoder.to(device)
    v = encode(encoder, list(s1) + list(s2), batch_size=batch_size, precision=precision)  # (2n, d)
    return F.cosine_similarity(v[: len(s1)], v[len(s1) :], dim=-1).tolist()  # (n,)


def start_eval_pooler(pooler: str, mlp_only_train: bool) -> str:
    """The pooler a trained model is evaluated with (``cls_before_pooler`` for SimCSE unsup)."""
    return "cls_before_pooler" if pooler == "cls" and mlp_only_train else pooler
