"""The one encode path: token ids in, sentence vectors out, for training's dev checks and evaluation.

Also the two helpers every forward pass shares: :func:`autocast_context` (the precision switch) and
:func:`pad_batch` (right-padding token-id lists).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from focalcse.core.model import eval_max_length


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``bf16``/``fp16`` on the device, a no-op for ``fp32``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        raise ValueError(f"unknown precision {precision!r}; expected fp32, bf16 or fp16")
    return torch.autocast(device_type=device.type, dtype=dtype)


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token-id lists to the longest: ``(input_ids, attention_mask)``, both (B, L) long.

    One flat tensor and a length mask instead of a Python loop over rows and tokens.
    """
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)  # (B,)
    width = int(lengths.max()) if len(rows) else 0
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)  # (B, L) True on real tokens
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, L)
    # Row-major order of the True cells is each row's tokens in turn: the flat concatenation.
    input_ids[mask] = torch.tensor(list(itertools.chain.from_iterable(rows)), dtype=torch.long)
    return input_ids, mask.long()


def tokenize_unique(
    encoder: torch.nn.Module, sentences: Sequence[str], max_length: int | None = None
) -> list[list[int]]:
    """Token ids of ``sentences`` (unpadded) as :func:`encode` uses them: the encoder's own
    ``sentence_ids`` (:meth:`focalcse.core.model.SentenceEncoder.sentence_ids`; a PromptBERT encoder
    puts each sentence in its template), else the tokenizer's ids with special tokens, truncated.

    ``max_length``: the longest row; default the model's position limit (:func:`eval_max_length`).
    """
    if max_length is None:
        max_length = eval_max_length(encoder)
    sentence_ids = getattr(encoder, "sentence_ids", None)
    if sentence_ids is not None:
        return sentence_ids(sentences, max_length)
    return encoder.tokenizer(
        list(sentences), truncation=True, max_length=max_length, add_special_tokens=True
    )["input_ids"]


def encode_token_ids(
    encoder: torch.nn.Module,
    ids: Sequence[Sequence[int]],
    batch_size: int = 128,
    precision: str = "fp32",
    progress: bool = False,
) -> torch.Tensor:
    """Sentence vectors (float32, CPU) of pre-tokenised sentences, in the order of ``ids``.

    Rows are sorted by length so each batch pads to nearly its own length (no padding at all for
    most batches); eval mode under ``torch.inference_mode()``, train/eval mode restored afterwards.
    """
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = next(encoder.parameters()).device
    tok = encoder.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    out = torch.empty(len(ids), encoder.backbone.config.hidden_size, dtype=torch.float32)
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode(), autocast_context(device, precision):
            for start in tqdm(
                range(0, len(order), batch_size), desc="encode", disable=not progress, leave=False
            ):
                batch = order[start : start + batch_size]
                input_ids, mask = pad_batch([ids[i] for i in batch], pad_id)  # (B, L) each
                vecs = encoder(input_ids=input_ids.to(device), attention_mask=mask.to(device))  # (B, d)
                out[batch] = vecs.float().cpu()
    finally:
        encoder.train(was_training)
    return out


def encode(
    encoder: torch.nn.Module,
    sentences: Sequence[str],
    batch_size: int = 128,
    max_length: int | None = None,
    precision: str = "fp32",
    progress: bool = False,
) -> torch.Tensor:
    """Sentence vectors (float32, CPU) in the order of ``sentences``, with the encoder's eval pooler.

    Repeated sentences are encoded once (STS pairs repeat sentences: the 7 tasks have 37.7k sentences,
    26.3k unique); unique sentences are sorted by token length so each batch pads to nearly its own
    length. Runs in eval mode under ``torch.inference_mode()``; the encoder's train/eval mode is
    restored afterwards.

    Args:
        encoder: a :class:`focalcse.core.model.SentenceEncoder` (or a subclass such as
            :class:`focalcse.core.frameworks.promptbert.PromptEncoder`).
        sentences: input sentences.
        batch_size: sentences per forward.
        max_length: truncation; default the model's position limit (SimCSE evaluates untruncated).
        precision: ``fp32`` | ``bf16`` | ``fp16`` autocast (bf16 on an AVX512-BF16 CPU: ~2x faster, every
            STS task within 0.03 of fp32 for all-MiniLM-L6-v2; see benchmarks/RESULTS.md).
        progress: show a progress bar.
    """
    unique = list(dict.fromkeys(sentences))
    index = {s: i for i, s in enumerate(unique)}
    ids = tokenize_unique(encoder, unique, max_length)
    out = encode_token_ids(encoder, ids, batch_size=batch_size, precision=precision, progress=progress)
    return out[[index[s] for s in sentences]]
