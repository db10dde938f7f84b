"""SimCSE (Gao et al., 2021), unsupervised: a batch encoded twice, dropout the only augmentation, the
registry's contrastive loss between the two views. The paper's own framework, and the one every
parameter set runs by default (``sweep.frameworks: [simcse]``).

Its step is the training loop's plain two-view forward (:func:`focalcse.core.gradcache.two_view_loss`):
the one step that trains data-parallel (each rank encodes its shard of the global batch), with
GradCache (``train.grad_cache_chunk``) and with the unpadded forward (``train.unpad``). Its folders are
plain :class:`~focalcse.core.model.SentenceEncoder` folders: the step records nothing of its own, so
they load with ``transformers`` and ``SentenceTransformer(path)`` like any encoder's.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from focalcse.core.encode import pad_batch
from focalcse.core.gradcache import two_view_loss
from focalcse.core.model import SentenceEncoder

SPEC = {
    "name": "simcse",
    "label": "SimCSE",
    "settings": "focalcse.core.frameworks.settings.simcse:SimCSEConfig",
    "unpad": True,
    "default": True,
}


class SimCSEStep:
    """SimCSE's training step (:class:`focalcse.core.training.FrameworkStep`): the rows padded to one
    (N, L) batch, stacked twice to (2N, L) and encoded in one forward, so dropout makes the two views."""

    name = SPEC["name"]
    settings: dict[str, Any] = {}  # nothing of its own: the saved folder is a plain encoder's

    def __init__(self, pad_id: int, grad_cache_chunk: int = 0) -> None:
        self.pad_id = pad_id
        self.grad_cache_chunk = grad_cache_chunk

    def attach(self, encoder: nn.Module) -> None:
        return None

    def loss(
        self, encoder: nn.Module, loss_fn: nn.Module, rows: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        ids, mask = pad_batch(rows, self.pad_id)
        ids2, mask2 = (
            torch.cat([ids, ids]).to(device),
            torch.cat([mask, mask]).to(device),
        )  # (2N, L): two views
        # forward (2N, L) -> (2N, d), loss of view 1 vs view 2; in chunks with GradCache
        return two_view_loss(encoder, loss_fn, ids2, mask2, self.grad_cache_chunk), {}


def step(encoder: SentenceEncoder, cfg: Any) -> SimCSEStep:
    """The step for ``encoder`` under train config ``cfg`` (:func:`focalcse.core.training.train` takes it
    when given no framework step: SimCSE is the registry's default framework)."""
    return SimCSEStep(encoder.tokenizer.pad_token_id or 0, cfg.grad_cache_chunk)


def training_setup(
    source: str, cfg: Any, settings: Any = None, prepared_dir: str | os.PathLike | None = None
) -> tuple[SentenceEncoder, SimCSEStep, int]:
    """``(encoder, step, corpus_max_len)`` for one SimCSE item: the backbone with ``cfg``'s pooler and
    MLP (:meth:`SentenceEncoder.for_training`), the corpus cut to ``train.max_seq_len``. ``settings``
    and ``prepared_dir`` are unused (SimCSE has no settings of its own and needs no stage output)."""
    encoder = SentenceEncoder.for_training(source, cfg)
    return encoder, step(encoder, cfg), cfg.max_seq_len
