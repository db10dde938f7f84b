"""DiffCSE's own settings (``frameworks.diffcse`` in ``params.yaml``), torch-free: its generator,
masking, RTD weight and projector, and the small MLM its generator stage trains. The framework module
(:mod:`focalcse.core.frameworks.diffcse`, its generator included) consumes them; its ``SPEC`` names
this class, so its items alone depend on this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from focalcse.core.settings import (
    HUB_ID,
    TrainConfig,
    _check_train_layers,
    _fail,
    _finite,
    _section,
    _with,
    from_dict,
)


@dataclass(frozen=True)
class GeneratorConfig:
    """``frameworks.diffcse.pretrain``: the small MLM the ``pretrain_generator`` stage trains on the
    corpus with the backbone's tokenizer (random init; no MLM can be downloaded offline)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    steps: int = (
        1500  # about 4 minutes on 2 cores (held-out MLM loss 6.9 from 10.3; distilbert is far better)
    )
    batch_size: int = 64
    lr: float = 2.0e-3
    mask_ratio: float = 0.15  # BERT's MLM rate
    max_seq_len: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        s = "frameworks.diffcse.pretrain"
        for key in ("hidden", "layers", "heads", "steps", "max_seq_len"):
            if getattr(self, key) < 1:
                _fail(s, key, getattr(self, key), "an integer >= 1")
        if self.batch_size < 2:  # a batch of one sentence is dropped (batch_spans): no MLM batch at all
            _fail(s, "batch_size", self.batch_size, "an integer >= 2")
        if self.hidden % self.heads:
            _fail(s, "hidden", self.hidden, f"a multiple of heads ({self.heads})")
        if not (_finite(self.lr) and self.lr > 0):
            _fail(s, "lr", self.lr, "a number > 0")
        if self.seed < 0:
            _fail(s, "seed", self.seed, "an integer >= 0")
        if not 0 < self.mask_ratio < 1:
            _fail(s, "mask_ratio", self.mask_ratio, "a number in (0, 1)")


@dataclass(frozen=True)
class DiffCSEConfig:
    """``frameworks.diffcse``: DiffCSE's generator, masking, RTD weight and projector
    (core/frameworks/diffcse/; official bert-base values: mask 0.30, lambda 0.005, BatchNorm)."""

    # The official unsupervised script the report checks its items against (docs/frameworks.md cites
    # it): voidism/DiffCSE run_diffcse.sh @f724b2c (bert-base-uncased; lines 3-30).
    OFFICIAL_RECIPE: ClassVar[dict[str, Any]] = {
        "source": "voidism/DiffCSE run_diffcse.sh (bert-base-uncased)",
        "train": {
            "epochs": 2,
            "batch_size": 64,
            "lr": 7e-6,
            "max_seq_len": 32,
            "eval_steps": 125,
            "temperature": 0.05,
        },
        "settings": {
            "mask_ratio": 0.30,
            "lambda_weight": 0.005,
            "batchnorm": True,
            "generator": "distilbert-base-uncased",
        },
    }

    generator: str = ""  # "" = the pretrain_generator stage's MLM; else a hub id or an MLM folder
    mask_ratio: float = 0.30
    lambda_weight: float = 0.005
    batchnorm: bool = True
    pretrain: GeneratorConfig = field(default_factory=GeneratorConfig)
    train: dict[str, Any] = field(default_factory=dict)
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = "frameworks.diffcse"
        if not 0 < self.mask_ratio < 1:
            _fail(s, "mask_ratio", self.mask_ratio, "a number in (0, 1)")
        if not (_finite(self.lambda_weight) and self.lambda_weight >= 0):
            _fail(s, "lambda_weight", self.lambda_weight, "a number >= 0 (0 = SimCSE's loss)")
        if self.generator and not (Path(self.generator).is_dir() or HUB_ID.match(self.generator)):
            _fail(
                s,
                "generator",
                self.generator,
                "'' (the pretrain_generator stage's MLM), an MLM folder or a hub id",
            )
        _check_train_layers(s, self.train, self.backbones)

    @classmethod
    def from_mapping(cls, section: str, data: Mapping[str, Any] | None) -> DiffCSEConfig:
        """Build from the params section, with its nested ``pretrain`` block."""
        data = dict(_section(section, data))
        pretrain = from_dict(GeneratorConfig, f"{section}.pretrain", data.pop("pretrain", None))
        return _with(from_dict(cls, section, data), section, pretrain=pretrain)

    def refusal(self, cfg: TrainConfig) -> tuple[str, Any, str] | None:
        """``(train key, value, what is expected)`` that this framework refuses of an item's train
        config, or None; the check stage says it before any training starts."""
        if cfg.pooler != "cls":
            return (
                "pooler",
                cfg.pooler,
                "cls: DiffCSE feeds the discriminator the pooled [CLS] after the projector",
            )
        if self.batchnorm and not cfg.mlp_only_train:
            return (
                "mlp_only_train",
                cfg.mlp_only_train,
                "true with frameworks.diffcse.batchnorm: true (the BatchNorm projector is used in training only)",
            )
        return None

    def recipe_phrase(self, key: str, have: Any, want: Any) -> tuple[str, str] | None:
        """The report's (match, departure) wording of official setting ``key``, where the plain
        ``key value (official: value)`` would not say what differs; None: the plain wording."""
        if key != "generator":
            return None
        bad = (
            f"generator `{have}`"
            if have
            else "generator: the small MLM the `pretrain_generator` stage trains on the sample"
        )
        return f"generator `{want}`", f"{bad} (official: `{want}`)"

    # The paper's claim about DiffCSE, as the report checks it (report/prose.py ``framework_claim``):
    # a paragraph after each backbone's Table 3 on these tests of DiffCSE + loss against DiffCSE
    # (key, ``_direction`` options); :meth:`claim_paragraph` words it.
    PAPER_CLAIM: ClassVar[dict[str, Any]] = {
        "where": "table3",
        "measures": [
            ("STSBenchmark", {}),
            ("alignment", {"lower_is_better": True, "digits": 4}),
            ("uniformity", {"lower_is_better": True, "digits": 3}),
        ],
    }
    # what the published-rows caption says of the paper's own DiffCSE numbers
    PUBLISHED_NOTE: ClassVar[str] = (
        "The Focal-InfoNCE paper's own DiffCSE and DiffCSE + Focal-InfoNCE numbers (its Table 3) were lost "
        "in the captured text, so none is shown"
    )

    def claim_paragraph(self, facts: Mapping[str, Any]) -> str:
        """What the measured DiffCSE numbers on one backbone do and do not say about the paper's
        Table 3 claim (Focal-InfoNCE improves DiffCSE's alignment, uniformity and STS-B). ``facts``
        (the report's): ``backbone``, ``measured`` (run label, {measure: its verdict phrase}) per
        tested loss, ``size``, ``device``, ``small`` (the backbone is not one of the paper's)."""
        parts = [
            f"{label} against DiffCSE: STS-B {said['STSBenchmark']}, alignment {said['alignment']}, "
            f"uniformity {said['uniformity']}"
            for label, said in facts["measured"]
        ]
        measured = "; ".join(parts) if parts else "no loss was tested against DiffCSE's baseline-loss runs"
        generator = self.generator or "the small MLM of the pretrain_generator stage"
        small = facts["small"]
        setting = f"in {'small ' if small else ''}runs from `{facts['backbone']}` ({facts['size']}, generator: {generator})"
        return (
            f"Measured here, {setting}: {measured} (alignment and uniformity: lower is better). The paper's "
            "Table 3 reports that Focal-InfoNCE improves DiffCSE on BERT-base in alignment, uniformity and "
            "STS-B Spearman; its numbers were lost in the captured text, so only the direction can be "
            "compared. These runs test that direction for this setting only: "
            + (
                "a backbone already tuned for sentence similarity, a short run and a weak stand-in generator "
                "(distilbert-base-uncased cannot be downloaded here) are far from the paper's, so agreement does "
                "not confirm the BERT-base result and disagreement does not refute it; "
                if small
                else ""
            )
            + "a difference not significant after Holm from so few seeds is not evidence of no effect."
        )

    def report_notes(self) -> list[str]:
        """What DiffCSE is here, for the report: its loss, masking, projector and generator."""
        if self.generator:
            gen = f"the generator is `{self.generator}` (`frameworks.diffcse.generator`)"
        else:
            g = self.pretrain
            gen = (
                "the generator is the small MLM the `pretrain_generator` stage trained on the training "
                f"corpus with the backbone's tokenizer ({g.layers} layers, hidden {g.hidden}, {g.steps} steps from "
                "random weights), not `distilbert-base-uncased` (the official generator for BERT, which "
                'cannot be downloaded here), because `frameworks.diffcse.generator` is ""; its edits are '
                "therefore cruder than the official ones"
            )
        return [
            "DiffCSE (Chuang et al., 2022): SimCSE's contrastive loss (the loss under test) plus "
            f"λ = {self.lambda_weight:g} × a conditional replaced-token-detection loss on sentences masked at "
            f"{self.mask_ratio:g} and refilled by a frozen MLM generator"
            f"{', BatchNorm projector' if self.batchnorm else ''}; {gen}."
        ]
