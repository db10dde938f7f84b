"""PromptBERT's own settings (``frameworks.promptbert`` in ``params.yaml``), torch-free: its templates
and denoising. :mod:`focalcse.core.frameworks.promptbert` consumes them; its ``SPEC`` names this class,
so its items alone depend on this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from focalcse.core.settings import TrainConfig, _check_train_layers, _fail

PROMPTBERT_TEMPLATES = ("auto", "bert", "roberta")
# train.pooler -> the sentence vector PromptBERT reads: the template's mask token ("mask", the official
# "mask_embedding_sentence"), with SimCSE's MLP for cls and without it for cls_before_pooler, named as
# SimCSE's cls / cls_before_pooler are (avg is refused, :meth:`PromptBERTConfig.refusal`)
MASK_POOLERS = {"cls": "mask", "cls_before_pooler": "mask_before_pooler"}


@dataclass(frozen=True)
class PromptBERTConfig:
    """``frameworks.promptbert``: PromptBERT's templates and denoising (core/frameworks/promptbert/)."""

    # The official unsupervised script the report checks its items against (docs/frameworks.md cites
    # each line): kongds/Prompt-BERT run.sh @690ba6e (unsup-bert 91-108, unsup-roberta 73-90, shared
    # arguments 155-166; test scoring eval_only.sh 21-35 / evaluation.py 145-146, 297-302).
    OFFICIAL_RECIPE: ClassVar[dict[str, Any]] = {
        "source": "kongds/Prompt-BERT run.sh (unsup-bert / unsup-roberta)",
        "train": {
            "epochs": 1,
            "batch_size": 256,
            "lr": 1e-5,
            "max_seq_len": 32,
            "eval_steps": 125,
            "temperature": 0.05,
        },
        "settings": {"denoise": True, "eval_denoise": False},
    }

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

    def recipe_phrase(self, key: str, have: Any, want: Any) -> tuple[str, str] | None:
        """The report's (match, departure) wording of official setting ``key`` (see DiffCSEConfig)."""
        if key != "eval_denoise":
            return None
        return (
            "test sets scored without template denoising (official evaluation.py), dev selection denoised",
            "test sets scored *with* template denoising (`eval_denoise: true`): a variant; the official "
            "evaluation.py scores the unsupervised models without it",
        )

    # The paper's claim about PromptBERT (§5.3), as the report checks it (report/prose.py
    # ``framework_claim``): a section of its own, per backbone a table of these measures of PromptBERT
    # + loss against PromptBERT (key, ``_direction`` options) and :meth:`claim_paragraph` under it.
    PAPER_CLAIM: ClassVar[dict[str, Any]] = {
        "where": "section",
        "heading": "PromptBERT with Focal-InfoNCE (§5.3)",
        "table": "PromptBERT + Focal-InfoNCE (§5.3)",
        "measures": [("avg", {}), ("STSBenchmark", {})],
    }
    # what the published-rows caption says of the paper's own PromptBERT numbers
    PUBLISHED_NOTE: ClassVar[str] = "§5.3 reports no gain of Focal-InfoNCE with PromptBERT without a table"

    def claim_paragraph(self, facts: Mapping[str, Any]) -> str:
        """What the measured PromptBERT numbers on one backbone do and do not say about §5.3 (no gain
        from Focal-InfoNCE with PromptBERT; the paper's guess why). ``facts``: see DiffCSEConfig."""
        parts = [
            f"{label} against PromptBERT: 7-task average {said['avg']}, STS-B {said['STSBenchmark']}"
            for label, said in facts["measured"]
        ]
        measured = "; ".join(parts) if parts else "no loss was tested against PromptBERT's baseline-loss runs"
        runs = f"{facts['device']}runs from `{facts['backbone']}` ({facts['size']})"
        setting = f"in small {runs}, not from the paper's BERT-base" if facts["small"] else f"in {runs}"
        return (
            f"Measured here, {setting}: {measured}. The paper (§5.3) saw no improvement from Focal-InfoNCE "
            "with PromptBERT and guessed that PromptBERT's positives come from two different templates, not "
            "from dropout alone. These numbers can agree or disagree with the paper's finding only for this "
            "setting: a difference not significant after Holm from so few seeds is not evidence of no "
            "effect, a significant one on this backbone and corpus need not carry over to BERT-base, and "
            "nothing here "
            "tests the paper's explanation (that would need PromptBERT runs that change how positives are "
            "made)."
        )

    def report_notes(self) -> list[str]:
        """What PromptBERT is here, for the report: its templates, denoising and test scoring."""
        return [
            "PromptBERT (Jiang et al., 2022): the sentence vector is the [MASK] state of a template "
            f"(templates `{self.templates}`); the two views of a sentence use two different templates, "
            f"{'denoised' if self.denoise else 'not denoised'} in training (`frameworks.promptbert.denoise`), "
            "and the loss under test replaces InfoNCE. The dev checkpoint is selected "
            f"{'with' if self.denoise else 'without'} template denoising (as the official training run, "
            "CLTrainer.evaluate). "
            + (
                "**Variant:** the test sets are scored *with* template denoising "
                "(`frameworks.promptbert.eval_denoise: true`); the official unsupervised evaluation "
                "(evaluation.py, eval_only.sh) scores them without it, so these PromptBERT scores are not "
                "comparable with the published ones."
                if self.eval_denoise
                else "The test sets are scored without template denoising, as the official unsupervised "
                "evaluation (evaluation.py, eval_only.sh; `frameworks.promptbert.eval_denoise: false`)."
            )
        ]
