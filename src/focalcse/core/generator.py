"""The generator's MLM pre-training (the ``pretrain_generator`` stage): a small BERT masked-language
model trained from random weights on the corpus, for a framework whose registry ``SPEC`` needs a
generator (DiffCSE) and whose settings name none.

This is the stage's one job; the framework's training step (:mod:`focalcse.core.frameworks.diffcse`)
loads the folder written here and does not import this module.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from focalcse.atomic import sha256_file, staged_dir, write_json
from focalcse.core.batching import batch_order, tokenize_corpus
from focalcse.core.encode import pad_batch
from focalcse.core.masking import IGNORE_INDEX, mask_tokens
from focalcse.errors import NonFiniteLossError
from focalcse.layout import GENERATOR_RECORD

RECORD_FILE = GENERATOR_RECORD  # beside the MLM: how it was trained


class MLMSettings(Protocol):
    """What the pre-training reads from its settings: a framework's ``pretrain`` dataclass (DiffCSE's
    ``GeneratorConfig``, :mod:`focalcse.core.frameworks.settings.diffcse`), not imported here so that
    no framework's settings are a dep of every generator item."""

    hidden: int
    layers: int
    heads: int
    steps: int
    batch_size: int
    lr: float
    mask_ratio: float
    max_seq_len: int
    seed: int


# DiffCSE's generator, trained here: a small BERT masked-language model on the training corpus.
#
# The official DiffCSE loads a pretrained ``distilbert-base-uncased`` as its frozen generator
# (``models.py`` 122). No model can be downloaded offline, so the ``pretrain_generator`` stage trains a
# small MLM from random weights with the backbone's tokenizer (the generator must share the
# discriminator's vocabulary): a ``BertForMaskedLM`` of ``GeneratorConfig`` size, BERT's 80/10/10 masking
# (:func:`focalcse.core.masking.mask_tokens`, at ``GeneratorConfig.mask_ratio``) and the
# cross-entropy on the selected tokens only. The MLM head runs on the selected positions alone, which
# gives the same loss as HF's ``labels=-100`` form without computing the vocabulary logits of every
# token. AdamW, linear decay to 0 without warm-up, the gradient norm clipped to 1.0, as the SimCSE
# trainer (:mod:`focalcse.core.training`). CPU, with torch's threads as the environment sets them.
#
# The result is a Hugging Face folder (``config.json``, ``model.safetensors``, the tokenizer) that
# ``AutoModelForMaskedLM.from_pretrained`` loads, with ``generator.json`` (:data:`RECORD_FILE`)
# recording how it was trained; the folder appears whole or not at all (:func:`focalcse.atomic.staged_dir`).

FINAL_LOSS_WINDOW = 20  # final_loss: the mean of the last steps' losses
MAX_GRAD_NORM = 1.0
MAX_POSITIONS = 512
_MAX_REDRAWS = 100  # a batch whose masking selected no token is masked again (tiny batches only)


def build_mlm(cfg: MLMSettings, vocab_size: int, pad_token_id: int) -> Any:
    """A randomly initialised ``BertForMaskedLM`` of ``cfg``'s size, its weights seeded with ``cfg.seed``."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=4 * cfg.hidden,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    return BertForMaskedLM(config)


def _batches(n: int, cfg: MLMSettings) -> list[list[int]]:
    """``cfg.steps`` index batches: seeded permutations of the corpus, as many epochs as needed."""
    per_epoch = len(batch_order(n, cfg.batch_size, 1, cfg.seed))
    if per_epoch == 0:
        raise ValueError(f"no MLM batch: {n} sentence(s) with batch_size {cfg.batch_size}")
    return batch_order(n, cfg.batch_size, math.ceil(cfg.steps / per_epoch), cfg.seed)[: cfg.steps]


def _mask(
    ids: torch.Tensor,
    mask: torch.Tensor,
    special_ids: torch.Tensor,
    cfg: MLMSettings,
    mask_token_id: int,
    vocab_size: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """80/10/10 masking of one batch; redrawn while no token is selected (so the loss is defined)."""
    special = torch.isin(
        ids, special_ids
    )  # = tokenizer.get_special_tokens_mask(already_has_special_tokens=True)
    for _ in range(_MAX_REDRAWS):
        masked, labels = mask_tokens(
            ids, mask, special, cfg.mask_ratio, mask_token_id, gen, vocab_size=vocab_size
        )
        if bool((labels != IGNORE_INDEX).any()):
            return masked, labels
    raise ValueError(
        f"MLM masking selected no token in {_MAX_REDRAWS} draws (mask_ratio {cfg.mask_ratio}): the batch "
        "has (almost) no non-special tokens"
    )


def pretrain_mlm(
    corpus_file: str | os.PathLike,
    tokenizer_source: str,
    cfg: MLMSettings,
    out_dir: str | os.PathLike,
    progress: bool = True,
    *,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train a small MLM on ``corpus_file`` with ``tokenizer_source``'s tokenizer; save it to ``out_dir``.

    Args:
        corpus_file: one sentence a line (blank lines dropped), tokenised with special tokens and
            truncated to ``cfg.max_seq_len``.
        tokenizer_source: what ``AutoTokenizer.from_pretrained`` loads (the backbone's folder or hub id).
        cfg: model size and training settings.
        out_dir: the HF folder written (replaced whole, atomically): model, tokenizer, ``generator.json``.
        progress: show a tqdm bar.
        extra: more fields for the record (e.g. the backbone name).

    Returns:
        The ``generator.json`` record as written, plus ``train_seconds`` and ``wall_seconds``, which
        are not written there: the folder is byte-identical on a rerun with the same inputs.

    Raises:
        NonFiniteLossError: the loss or the gradient norm became NaN or inf (nothing is written).
    """
    from transformers import AutoTokenizer

    wall0 = time.perf_counter()
    corpus_file = Path(corpus_file)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    if tokenizer.mask_token_id is None:
        raise ValueError(f"tokenizer {tokenizer_source!r} has no mask token; an MLM generator needs one")
    vocab_size = len(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    corpus = tokenize_corpus(corpus_file, tokenizer, cfg.max_seq_len)
    ids_column = corpus["input_ids"]
    n = len(ids_column)
    batches = _batches(n, cfg)

    model = build_mlm(cfg, vocab_size, pad_id)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
    )
    total = len(batches)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total))
    gen = torch.Generator().manual_seed(cfg.seed)  # the masking's random source
    special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)

    losses: list[float] = []
    train_seconds = 0.0
    bar = tqdm(
        total=total,
        desc=f"pretrain generator ({cfg.layers}x{cfg.hidden})",
        disable=not progress,
        dynamic_ncols=True,
    )
    for step, idx in enumerate(batches, start=1):
        t0 = time.perf_counter()
        ids, mask = pad_batch([ids_column[i] for i in idx], pad_id)  # (B, L)
        masked, labels = _mask(ids, mask, special_ids, cfg, tokenizer.mask_token_id, vocab_size, gen)
        hidden = model.bert(input_ids=masked, attention_mask=mask).last_hidden_state  # (B, L, h)
        selected = labels != IGNORE_INDEX  # (B, L)
        logits = model.cls(hidden[selected])  # (S, V): the head on the selected tokens only
        loss = F.cross_entropy(logits.float(), labels[selected])
        if not torch.isfinite(loss):
            bar.close()
            raise NonFiniteLossError(f"generator MLM loss is {loss.item()} at step {step} (lr {cfg.lr})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM))
        if not math.isfinite(grad_norm):
            bar.close()
            raise NonFiniteLossError(f"generator gradient norm is {grad_norm} at step {step} (lr {cfg.lr})")
        optimizer.step()
        scheduler.step()
        train_seconds += time.perf_counter() - t0
        losses.append(float(loss.item()))
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()

    tail = losses[-FINAL_LOSS_WINDOW:]
    record: dict[str, Any] = {
        "pretrained": True,
        "config": asdict(cfg),
        "architecture": "BertForMaskedLM",
        "vocab_size": vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "corpus": {"file": str(corpus_file), "sha256": sha256_file(corpus_file), "sentences": n},
        "steps": total,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "final_loss_window": len(tail),
        "device": "cpu",
        **(extra or {}),
    }
    with staged_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        # the tokenizer as loaded: the one used above carries the truncation state of its last call,
        # which it has only when the tokenisation was not in the datasets cache
        AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(tmp)
        write_json(tmp / RECORD_FILE, record)
    return {**record, "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - wall0}


__all__ = ["RECORD_FILE", "build_mlm", "pretrain_mlm"]
