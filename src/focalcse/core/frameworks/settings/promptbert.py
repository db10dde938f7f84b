"""PromptBERT's own settings (``frameworks.promptbert`` in ``params.yaml``), torch-free: its templates
and denoising. :mod:`focalcse.core.frameworks.promptbert` consumes them; its ``SPEC`` names this class,
so its items alone depend on this file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from focalcse.core.settings import TrainConfig, _check_train_layers, _fail

PROMPTBERT_TEMPLATES = ("auto", "bert", "roberta")
# train.pooler -> the sentence vector PromptBERT reads: the template's mask token ("mask", the official
# "mask_embedding_sentence"), with SimCSE's MLP for cls and without it for cls_before_pooler, named as
# SimCSE's cls / cls_before_pooler are (avg is refused, :meth:`PromptBERTConfig.refusal`)
MASK_POOLERS = {"cls": "mask", "cls_before_pooler": "mask_before_pooler"}


@dataclass(frozen=True)
class PromptBERTConfig:
    """``frameworks.promptbert``: PromptBERT's templates and denoising (core/frameworks/promptbert/)."""

    # auto: the official pair of the backbone's family (roberta for RoBERTa models, else bert)
    templates: str = "auto"
    # template denoising in training and in the dev checkpoint selection (official unsupervised runs: yes)
    denoise: bool = True
    # ... in scoring the test sets (official evaluation.py for the unsupervised models: no); true is a
    # variant the report labels as such
    eval_denoise: bool = False
    train: dict[str, Any] = field(default_factory=dict)  # train keys for every PromptBERT item
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)  # <backbone>: train keys

    def __post_init__(self) -> None:
        if self.templates not in PROMPTBERT_TEMPLATES:
            _fail(
                "frameworks.promptbert",
                "templates",
                self.templates,
                f"one of {', '.join(PROMPTBERT_TEMPLATES)}",
            )
        _check_train_layers("frameworks.promptbert", self.train, self.backbones)

    def recorded_pooler(self, pooler: str) -> str:
        """The name the recorded config gives ``train.pooler``'s sentence vector
        (:func:`focalcse.core.settings.recorded_train`): the template's mask token, not [CLS]."""
        return MASK_POOLERS.get(pooler, pooler)

    def refusal(self, cfg: TrainConfig) -> tuple[str, Any, str] | None:
        """``(train key, value, what is expected)`` that this framework refuses of an item's train
        config, or None; the check stage says it before any training starts."""
        if cfg.pooler == "avg":
            return (
                "pooler",
                cfg.pooler,
                "cls or cls_before_pooler: PromptBERT's sentence vector is the template's mask token",
            )
        return None
