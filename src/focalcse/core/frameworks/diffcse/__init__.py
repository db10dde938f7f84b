"""DiffCSE (Chuang et al., 2022): SimCSE plus conditional replaced-token detection (RTD).

Follows the official code, github.com/voidism/DiffCSE (commit f724b2c), whose files are cited as
``diffcse/models.py``, ``train.py``, ``diffcse/trainers.py``, ``modeling_bert.py``, ``run_diffcse.sh``
and ``README.md``:

* **Masking** (``train.py`` 512-544, ``OurDataCollatorWithPadding.mask_tokens``; ratio set from
  ``--masking_ratio`` in ``trainers.py`` 482 and read in ``train.py`` 521): every token that is not a
  special token (the tokenizer's ``get_special_tokens_mask``, which covers [CLS]/[SEP]/[PAD]) is
  selected independently with probability ``ratio`` (a Bernoulli rate, not an exact count); of the
  selected, 80% become [MASK], half of the rest a uniformly random id in ``[0, len(tokenizer))``,
  the rest stay. Each view of a sentence is masked independently. See :func:`mask_tokens`.
* **Generator** (``models.py`` 122 and 181-187): a frozen MLM (``distilbert-base-uncased`` by
  default) run under ``torch.no_grad()`` on the masked ids; the corrupted sentence is the
  **argmax** at **every** position (not sampling, and not only at masked positions); position 0 is
  reset to the [CLS]/<s> id; padding becomes id 0 (``g_pred * attention_mask``). The labels are
  ``(g_pred != input_ids) * attention_mask``: a generated token equal to the original is labelled 0.
  See :func:`replace_with_generator`.
* **Conditional discriminator** (``models.py`` 189-200, ``modeling_bert.py`` 952-961,
  ``modeling_roberta.py`` 799-800; initialised from the backbone's pretrained weights,
  ``train.py`` 371-388): a separate, trained BERT/RoBERTa whose *embedding-layer output* (word +
  position + type embeddings after LayerNorm and dropout) at position 0 is replaced by the sentence
  vector; the sentence vector is the pooled [CLS] after the projector (``--before_mlp`` off) and is
  **not detached**, so the RTD loss trains the sentence encoder. See :class:`ConditionalDiscriminator`.
* **RTD loss** (``models.py`` 259-273, ``train.py`` 373/387): a ``Linear(hidden, 2)`` head and
  ``nn.CrossEntropyLoss()`` over ``(B*L, 2)`` with the 0/1 labels: the mean over **all** B*L
  positions, padding (label 0) and position 0 included. ``loss = contrastive + lambda_weight * rtd``.
  A one-logit head with binary cross-entropy is the same loss (CE over logits ``(a, b)`` is BCE on
  ``b - a``). See :func:`rtd_loss` and :func:`diffcse_loss`.
* **BatchNorm projector** (``models.py`` 35-50, ``ProjectionMLP``; chosen by ``--batchnorm``,
  ``models.py`` 119): ``Linear(h, 2h, bias=False) - BN(2h) - ReLU - Linear(2h, h, bias=False) -
  BN(h, affine=False)``. See :class:`BatchNormProjector`.

Plain torch plus a Hugging Face encoder.

* **Generator, trained here** (the ``pretrain_generator`` stage, :func:`focalcse.core.generator.pretrain_mlm`):
  no MLM can be downloaded offline, so a small BERT MLM is trained from random weights on the corpus
  with the backbone's tokenizer. That job is its own module, which this one does not import: DiffCSE's
  items see a change to the pre-training only through the generator folder they depend on. The masking both use is :func:`focalcse.core.masking.mask_tokens`.

This package is the training step only (one job, one module); a framework item's DVC deps name its
folder (``src/focalcse/core/frameworks/${item.framework}``, beside its settings module).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from focalcse.core.masking import mask_tokens
from focalcse.layout import GENERATOR_RECORD

SPEC = {
    "name": "diffcse",
    "label": "DiffCSE",
    "settings": "focalcse.core.frameworks.settings.diffcse:DiffCSEConfig",
    "needs": [
        "generator"
    ],  # the pretrain_generator stage's MLM (or the one frameworks.diffcse.generator names)
    "refuses": ["ddp", "gradcache"],
    "encoder": False,  # its folders are SimCSE-shaped: pooled [CLS], loadable by sentence-transformers
}


@dataclass(frozen=True)
class DiffCSEHyper:
    """Official DiffCSE training hyper-parameters of one backbone family.

    ``None`` means the official repository does not state the value for that backbone (only the
    paper does; not copied here unverified).
    """

    backbone: str
    generator: str
    mask_ratio: float | None
    lambda_weight: float | None
    lr: float | None
    batch_size: int | None
    temperature: float
    batchnorm: bool | None
    pooler: str = "cls"
    mlp_only_train: bool = True
    epochs: int = 2
    max_seq_len: int = 32


# bert-base: run_diffcse.sh 3-30 (LR=7e-6, MASK=0.30, LAMBDA=0.005, --generator_name
# distilbert-base-uncased, --per_device_train_batch_size 64, --temp 0.05, --batchnorm, --pooler_type cls,
# --mlp_only_train, --num_train_epochs 2, --max_seq_length 32), repeated in README.md 72-95.
# roberta-base: README.md 101 names the generator (distilroberta-base) and README.md 107 the temperature
# ("We always use 0.05"); the repository gives no roberta-base learning rate, mask ratio, lambda, batch
# size or projector choice. Code defaults if a flag is left out: train.py 118-123 (lambda_weight 0.1),
# 136-139 (masking_ratio 0.15), models.py 122 (generator distilbert-base-uncased).
OFFICIAL: dict[str, DiffCSEHyper] = {
    "bert-base": DiffCSEHyper(
        backbone="bert-base-uncased",
        generator="distilbert-base-uncased",
        mask_ratio=0.30,
        lambda_weight=0.005,
        lr=7e-6,
        batch_size=64,
        temperature=0.05,
        batchnorm=True,
    ),
    "roberta-base": DiffCSEHyper(
        backbone="roberta-base",
        generator="distilroberta-base",
        mask_ratio=None,
        lambda_weight=None,
        lr=None,
        batch_size=None,
        temperature=0.05,
        batchnorm=None,
    ),
}


def replace_with_generator(
    generator_logits: torch.Tensor,
    masked_ids: torch.Tensor,
    original_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    cls_token_id: int,
    *,
    sample: bool = False,
    only_masked: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input ids and the replaced-token labels, as ``models.py`` 183-187.

    Official (the defaults): ``g_pred = logits.argmax(-1)`` at every position; ``g_pred[:, 0] =
    cls_token`` (101 for BERT, 0 for RoBERTa: ``models.py`` 384 and 444); labels ``(g_pred !=
    original) * attention_mask``; ids ``g_pred * attention_mask`` (padding becomes id 0, whatever the
    tokenizer's pad id).

    Args:
        generator_logits: (B, L, V) the frozen MLM's logits on ``masked_ids`` (computed without grad).
        masked_ids: (B, L) the generator's input (:func:`mask_tokens`); used only with ``only_masked``.
        original_ids: (B, L) the uncorrupted ids.
        attention_mask: (B, L).
        cls_token_id: the id put back at position 0.
        sample: draw from ``softmax(logits)`` instead of the argmax (the paper's wording; *not* the
            official code).
        only_masked: keep the original id wherever ``masked_ids == original_ids`` (ELECTRA-style;
            *not* the official code, which lets the generator rewrite unmasked tokens too).
        generator: the random source for ``sample``.

    Returns:
        ``(corrupted_ids, labels)``, both (B, L) long; labels 1 = replaced, 0 = original (a generated
        token equal to the original counts as original), 0 on padding.
    """
    logits = generator_logits.detach()
    if sample:
        probs = logits.float().softmax(-1).reshape(-1, logits.size(-1))
        pred = torch.multinomial(probs, 1, generator=generator).view(logits.shape[:-1])
    else:
        pred = logits.argmax(-1)
    pred = pred.to(original_ids.dtype)
    if only_masked:
        pred = torch.where(masked_ids == original_ids, original_ids, pred)
    pred[:, 0] = cls_token_id
    mask = attention_mask.to(original_ids.dtype)
    labels = (pred != original_ids).to(original_ids.dtype) * mask
    return pred * mask, labels


@torch.no_grad()
def generator_logits(mlm: nn.Module, masked_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The frozen generator's logits, without grad, as ``models.py`` 183-184 (``generator(ids, mask)[0]``)."""
    return mlm(input_ids=masked_ids, attention_mask=attention_mask).logits


def rtd_loss(
    disc_logits: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    include_padding: bool = True,
) -> torch.Tensor:
    """Replaced-token-detection loss, as ``models.py`` 262-272.

    Args:
        disc_logits: (B, L) one logit per token (the replaced class), or (B, L, 2) the official
            two-class head's scores (then cross-entropy, exactly the official formula).
        labels: (B, L) 1 = replaced, 0 = original (:func:`replace_with_generator`; 0 on padding).
        attention_mask: (B, L); used only with ``include_padding=False``.
        include_padding: official ``True``: the mean over all B*L positions, padding and position 0
            included (``nn.CrossEntropyLoss()`` over ``e_labels.view(-1)``, no ignore index hit).
            ``False``: the mean over real tokens only.

    Returns:
        scalar.
    """
    if disc_logits.dim() == labels.dim() + 1 and disc_logits.size(-1) == 2:
        per_token = F.cross_entropy(
            disc_logits.reshape(-1, 2).float(), labels.reshape(-1).long(), reduction="none"
        ).view(labels.shape)
    elif disc_logits.shape == labels.shape:
        per_token = F.binary_cross_entropy_with_logits(disc_logits.float(), labels.float(), reduction="none")
    else:
        raise ValueError(f"disc_logits {tuple(disc_logits.shape)} do not fit labels {tuple(labels.shape)}")
    if include_padding:
        return per_token.mean()
    weight = attention_mask.to(per_token.dtype)
    return (per_token * weight).sum() / weight.sum().clamp_min(1.0)


def diffcse_loss(contrastive: torch.Tensor, rtd: torch.Tensor, lam: float) -> torch.Tensor:
    """``contrastive + lam * rtd`` (``models.py`` 273; ``lam`` is ``--lambda_weight``)."""
    return contrastive + lam * rtd


class BatchNormProjector(nn.Module):
    """The ``--batchnorm`` projector, ``models.py`` 35-50 (``ProjectionMLP``).

    ``Linear(h, 2h, bias=False) - BatchNorm1d(2h) - ReLU - Linear(2h, h, bias=False) -
    BatchNorm1d(h, affine=False)``. Official use: on both views together (``models.py`` 177-178), in
    training only (``--mlp_only_train``).

    Initialised as the official ``cl_init`` leaves it: ``cl_init`` builds ``ProjectionMLP`` and then
    calls ``self.init_weights()``, whose ``_init_weights`` (the backbone's) draws every ``nn.Linear``
    weight from N(0, ``config.initializer_range``); the BatchNorm layers keep their own init (weight 1,
    bias 0, which ``_init_weights`` does not touch). PyTorch's default Kaiming-uniform would give std
    1 / sqrt(3 h) instead (0.021 at h = 768, but 0.1 at h = 32).

    Args:
        hidden: the backbone's hidden size h.
        init_std: the weights' standard deviation (``config.initializer_range``, 0.02 for BERT); None
            keeps PyTorch's default init.

    Shape:
        - Input: (N, h); Output: (N, h).
    """

    def __init__(self, hidden: int, init_std: float | None = 0.02) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden, hidden * 2, bias=False),
            nn.BatchNorm1d(hidden * 2),
            nn.ReLU(inplace=True),
            nn.Linear(hidden * 2, hidden, bias=False),
            nn.BatchNorm1d(hidden, affine=False),
        )
        if init_std is not None:
            with torch.no_grad():
                for layer in self.net:
                    if isinstance(layer, nn.Linear):
                        layer.weight.normal_(mean=0.0, std=float(init_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConditionalDiscriminator(nn.Module):
    """An HF encoder with a per-token head, conditioned on a sentence vector at position 0.

    Args:
        encoder: a Hugging Face base model (``AutoModel``: BERT, RoBERTa, ...), official: a copy of the
            backbone with its pretrained weights (``train.py`` 374 and 388), trained.
        num_outputs: the head's size per token: 1 (a logit for "replaced", the BCE form) or 2 (the
            official ``Linear(768, 2)``, ``train.py`` 373/387). Both fit :func:`rtd_loss`.
        where: how the sentence vector enters.
            ``"embedding_output"`` (official, ``modeling_bert.py`` 952-961): it replaces the
            embedding layer's *output* at position 0 (after position/type embeddings, LayerNorm and
            dropout); needs ``encoder.embeddings``.
            ``"inputs_embeds"``: it replaces the *word* embedding of the first token and the encoder
            adds position/type embeddings and LayerNorm on top (works for any HF encoder taking
            ``inputs_embeds``; *not* the official placement).

    ``forward(input_ids, attention_mask, sentence_embedding, token_type_ids=None)`` returns logits
    (B, L) for ``num_outputs=1``, else (B, L, num_outputs). The sentence embedding is used as is (not
    detached), as ``models.py`` 199.
    """

    def __init__(self, encoder: nn.Module, num_outputs: int = 1, where: str = "embedding_output") -> None:
        super().__init__()
        if where not in ("embedding_output", "inputs_embeds"):
            raise ValueError(f"where must be 'embedding_output' or 'inputs_embeds', got {where!r}")
        if where == "embedding_output" and not isinstance(getattr(encoder, "embeddings", None), nn.Module):
            raise ValueError("where='embedding_output' needs an encoder with an .embeddings module")
        self.encoder = encoder
        self.where = where
        self.num_outputs = num_outputs
        self.head = nn.Linear(encoder.config.hidden_size, num_outputs)

    @contextmanager
    def _first_position(self, vector: torch.Tensor) -> Iterator[None]:
        def hook(_module: nn.Module, _args: Any, output: torch.Tensor) -> torch.Tensor:
            return torch.cat([vector.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

        handle = self.encoder.embeddings.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        sentence_embedding: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if sentence_embedding.shape != (input_ids.size(0), self.encoder.config.hidden_size):
            raise ValueError(
                f"sentence_embedding must be (B, hidden) = ({input_ids.size(0)}, "
                f"{self.encoder.config.hidden_size}), got {tuple(sentence_embedding.shape)}"
            )
        kwargs: dict[str, Any] = {"attention_mask": attention_mask, "return_dict": True}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        if self.where == "embedding_output":
            with self._first_position(sentence_embedding):
                hidden = self.encoder(input_ids=input_ids, **kwargs).last_hidden_state
        else:
            words = self.encoder.get_input_embeddings()(input_ids)
            words = torch.cat([sentence_embedding.unsqueeze(1).to(words.dtype), words[:, 1:]], dim=1)
            hidden = self.encoder(inputs_embeds=words, **kwargs).last_hidden_state
        logits = self.head(hidden)
        return logits.squeeze(-1) if self.num_outputs == 1 else logits


class DiffCSEStep:
    """DiffCSE's training step around any registered contrastive loss (:class:`focalcse.core.frameworks.FrameworkStep`).

    The batch is encoded twice in one forward, as SimCSE (dropout views; the ``[CLS]`` vector through
    the projector: :class:`BatchNormProjector` with ``batchnorm``, else SimCSE's MLP), and the loss is
    ``contrastive(z1, z2) + lambda_weight * rtd``: each view is masked independently
    (:func:`mask_tokens`, global RNG so a resumed run continues the same draws), the frozen generator
    rewrites it (:func:`replace_with_generator`), and the conditional discriminator, fed that view's
    sentence vector at position 0, detects the replaced tokens (:func:`rtd_loss`, the official two-class
    head over all positions).

    Args:
        generator: a masked-LM (``AutoModelForMaskedLM``) with the backbone's vocabulary; frozen.
        discriminator_encoder: the discriminator's encoder (official: the backbone's pretrained weights,
            loaded again); trained.
        tokenizer: the backbone's tokenizer (mask, [CLS] and special-token ids).
        mask_ratio: ``--masking_ratio``.
        lambda_weight: ``--lambda_weight`` (0: the loss is the contrastive loss alone).
        batchnorm: replace SimCSE's MLP by :class:`BatchNormProjector` (``--batchnorm``).
    """

    name = "diffcse"

    def __init__(
        self,
        generator: nn.Module,
        discriminator_encoder: nn.Module,
        tokenizer: Any,
        mask_ratio: float,
        lambda_weight: float,
        batchnorm: bool,
    ) -> None:
        vocab = len(tokenizer)
        gen_vocab = generator.get_input_embeddings().num_embeddings
        if gen_vocab < vocab:
            raise ValueError(
                f"the DiffCSE generator's vocabulary ({gen_vocab}) is smaller than the backbone tokenizer's "
                f"({vocab}); the generator must use the backbone's tokenizer"
            )
        self.generator = generator
        self.discriminator = ConditionalDiscriminator(discriminator_encoder, num_outputs=2)
        self.tokenizer = tokenizer
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        self.mask_ratio = float(mask_ratio)
        self.lambda_weight = float(lambda_weight)
        self.batchnorm = bool(batchnorm)
        self.settings = {
            "name": self.name,
            "mask_ratio": self.mask_ratio,
            "lambda_weight": self.lambda_weight,
            "batchnorm": self.batchnorm,
        }

    def attach(self, encoder: nn.Module) -> None:
        if encoder.pooler != "cls":
            raise ValueError(
                f"DiffCSE feeds the discriminator the pooled [CLS] after the projector: train.pooler must be "
                f"'cls', got {encoder.pooler!r}"
            )
        if self.batchnorm:
            if not encoder.mlp_only_train:
                raise ValueError(
                    "DiffCSE's BatchNorm projector is used in training only: set train.mlp_only_train: true "
                    "(official --mlp_only_train) or frameworks.diffcse.batchnorm: false"
                )
            config = encoder.backbone.config
            encoder.mlp = BatchNormProjector(
                config.hidden_size, init_std=float(getattr(config, "initializer_range", 0.02))
            )
        for p in self.generator.parameters():
            p.requires_grad_(False)
        # submodules of the encoder: train()/eval(), .to(device) and checkpoints cover them; the model
        # folder (backbone + tokenizer) does not
        encoder.diffcse = nn.ModuleDict({"generator": self.generator, "discriminator": self.discriminator})

    def loss(
        self, encoder: nn.Module, loss_fn: nn.Module, rows: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        from focalcse.core.encode import pad_batch

        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        ids, mask = pad_batch(rows, pad_id)
        ids2, mask2 = torch.cat([ids, ids]).to(device), torch.cat([mask, mask]).to(device)  # (2N, L)
        n = ids.shape[0]
        z = encoder(input_ids=ids2, attention_mask=mask2)  # (2N, d) after the projector
        contrastive = loss_fn(z[:n].float(), z[n:].float())
        # the tokenizer's special tokens mask ([CLS], [SEP], [PAD], ...), as one lookup
        special = torch.isin(ids2, self.special_ids.to(device)) | ~mask2.bool()
        masked, _ = mask_tokens(
            ids2, mask2, special, self.mask_ratio, tok.mask_token_id, None, vocab_size=len(tok)
        )
        logits = generator_logits(self.generator, masked, mask2)
        corrupted, labels = replace_with_generator(logits, masked, ids2, mask2, tok.cls_token_id)
        disc = self.discriminator(corrupted, mask2, z)  # (2N, L, 2); z not detached (official)
        rtd = rtd_loss(disc, labels, mask2)
        total = diffcse_loss(contrastive, rtd, self.lambda_weight)
        return total, {"contrastive_loss": float(contrastive.detach()), "rtd_loss": float(rtd.detach())}


RECORD_FILE = GENERATOR_RECORD  # beside the pretrain_generator stage's MLM: how it was trained (or why not)
GENERATOR_FILES = ("config.json", "model.safetensors")


def generator_source(settings: Any, generator_dir: str | os.PathLike, backbone: str = "") -> str:
    """What DiffCSE loads as its generator: ``frameworks.diffcse.generator`` (a hub id or an MLM folder,
    as written) if set, else the MLM the ``pretrain_generator`` stage trained in ``generator_dir``.

    Raises:
        FileNotFoundError: that folder holds no trained MLM, or one trained with other
            ``frameworks.diffcse.pretrain`` settings (the stage has not run since they changed).
    """
    import json

    if settings.generator:
        return str(settings.generator)
    folder = Path(generator_dir)
    rerun = (
        "run the pretrain_generator stage for it (dvc repro, or python stages/pretrain_generator.py "
        f"{backbone} --framework {SPEC['name']})"
    )
    try:
        record = json.loads((folder / RECORD_FILE).read_text())
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or not record.get("pretrained"):
        why = f" ({record['reason']})" if isinstance(record, dict) and record.get("reason") else ""
        raise FileNotFoundError(
            f"DiffCSE generator for backbone {backbone!r}: {folder} holds no trained MLM{why}; {rerun}, "
            "or set frameworks.diffcse.generator to a hub id or MLM folder"
        )
    missing = [name for name in GENERATOR_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"DiffCSE generator for backbone {backbone!r}: {folder} lacks {', '.join(missing)}; {rerun}"
        )
    expected = asdict(settings.pretrain)
    if record.get("config") != expected:
        raise FileNotFoundError(
            f"DiffCSE generator for backbone {backbone!r}: {folder} was trained with "
            f"frameworks.diffcse.pretrain = {record.get('config')}, but params now say {expected}; {rerun}"
        )
    return str(folder)


def training_setup(
    source: str, cfg: Any, settings: Any, prepared_dir: str | os.PathLike
) -> tuple[nn.Module, DiffCSEStep, int]:
    """``(encoder, step, corpus_max_len)`` for one DiffCSE item (:func:`focalcse.steps.train.framework_encoder`).

    The encoder is SimCSE's (``cfg.pooler`` / ``mlp_only_train``, a fresh seeded MLP, replaced by the
    BatchNorm projector when ``settings.batchnorm``); the generator is :func:`generator_source`'s MLM,
    frozen; the discriminator is the backbone loaded again with its pretrained weights (official
    ``train.py`` 374 / 388)."""
    from transformers import AutoModel, AutoModelForMaskedLM

    from focalcse.core.backbones import resolve_backbone
    from focalcse.core.model import SentenceEncoder

    encoder = SentenceEncoder.for_training(source, cfg)
    gen_source = generator_source(settings, prepared_dir, Path(prepared_dir).name)
    generator = AutoModelForMaskedLM.from_pretrained(resolve_backbone(gen_source))
    disc = AutoModel.from_pretrained(resolve_backbone(source), attn_implementation="sdpa")
    step = DiffCSEStep(
        generator, disc, encoder.tokenizer, settings.mask_ratio, settings.lambda_weight, settings.batchnorm
    )
    step.settings = {**step.settings, "generator": gen_source}
    return encoder, step, cfg.max_seq_len


__all__ = [
    "OFFICIAL",
    "RECORD_FILE",
    "BatchNormProjector",
    "ConditionalDiscriminator",
    "DiffCSEHyper",
    "DiffCSEStep",
    "diffcse_loss",
    "generator_logits",
    "replace_with_generator",
    "rtd_loss",
]
