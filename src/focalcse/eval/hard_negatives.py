"""§5.1's hard negatives: STS-B train pairs of low gold score that a model still finds similar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch.nn.functional as F

from focalcse.core.encode import encode


def hardest_negatives(cosines: Any, gold: Any, max_gold: float, k: int) -> list[int]:
    """Indices of the ``k`` pairs with the highest cosine among those with ``gold <= max_gold``
    (ties broken by index, so the choice is deterministic)."""
    cos, gold = np.asarray(cosines, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if cos.shape != gold.shape:
        raise ValueError(f"cosines {cos.shape} and gold {gold.shape} differ in shape")
    candidates = np.flatnonzero(gold <= max_gold)
    order = sorted(candidates.tolist(), key=lambda i: (-cos[i], i))
    return order[:k]


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
