"""PromptBERT's training step: the loss of :class:`PromptEncoder`'s two template views, and
:func:`training_setup`, which the training loop calls through the registry."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig
from focalcse.core.frameworks.promptbert.encoder import FRAMEWORK_NAME, PromptEncoder


class PromptBERTStep:
    """PromptBERT's training step (:class:`focalcse.core.frameworks.FrameworkStep`): the loss of the
    two template views of :meth:`PromptEncoder.training_views` with the registry's loss."""

    name = FRAMEWORK_NAME

    def __init__(self, encoder: PromptEncoder) -> None:
        self.settings = encoder.framework_record()

    def attach(self, encoder: nn.Module) -> None:
        if not isinstance(encoder, PromptEncoder):
            raise ValueError(f"PromptBERT trains a PromptEncoder, got {type(encoder).__name__}")

    def loss(
        self, encoder: nn.Module, loss_fn: nn.Module, rows: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        z1, z2 = encoder.training_views(rows)  # on the encoder's device
        return loss_fn(z1.float(), z2.float()), {}


def training_setup(
    source: str, cfg: Any, settings: PromptBERTConfig | Any, prepared_dir: str | os.PathLike | None = None
) -> tuple[PromptEncoder, PromptBERTStep, int]:
    """``(encoder, step, corpus_max_len)`` for one PromptBERT item (:func:`focalcse.steps.train.framework_encoder`).

    The encoder is :meth:`PromptEncoder.from_pretrained_backbone` with ``cfg``'s pooler,
    ``mlp_only_train``, ``max_seq_len`` and seed; the corpus is tokenized with ``max_seq_len + 2``
    tokens (the special tokens that :meth:`PromptEncoder.training_views` drops), so every sentence keeps
    the official ``max_seq_len`` budget. ``prepared_dir`` is unused (PromptBERT needs no stage output).
    """
    encoder = PromptEncoder.from_pretrained_backbone(
        source,
        settings,
        pooler=cfg.pooler,
        mlp_only_train=cfg.mlp_only_train,
        max_seq_len=cfg.max_seq_len,
        seed=cfg.seed,
    )
    return encoder, PromptBERTStep(encoder), cfg.max_seq_len + 2
