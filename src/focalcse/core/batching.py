"""The corpus as token ids, and the seeded order its batches are read in.

Shared by the training loop (:mod:`focalcse.core.training`) and the generator's MLM pre-training
(:mod:`focalcse.core.generator`); neither imports the other, so an item that only pre-trains a
generator (or only evaluates) does not depend on the training loop.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from focalcse.core.settings import batch_spans


def tokenize_corpus(path: str | os.PathLike, tokenizer: Any, max_seq_len: int, num_proc: int | None = None):
    """The corpus as a ``datasets.Dataset`` of ``input_ids`` (truncated, unpadded).

    The text is read once into Arrow (memory-mapped) and tokenised once; ``datasets`` caches both by
    fingerprint (file, tokenizer, length), so later runs with the same backbone reuse the cache.
    """
    from datasets import load_dataset

    ds = load_dataset("text", data_files=str(path), split="train")
    ds = ds.filter(lambda b: [bool(t.strip()) for t in b["text"]], batched=True, desc="drop blank lines")
    if len(ds) < 2:
        raise ValueError(f"{path}: {len(ds)} non-blank sentence(s); training needs at least 2")

    def tok(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return {"input_ids": tokenizer(batch["text"], truncation=True, max_length=max_seq_len)["input_ids"]}

    return ds.map(tok, batched=True, remove_columns=["text"], desc="tokenise", num_proc=num_proc)


def batch_order(n: int, batch_size: int, epochs: int, seed: int) -> list[list[int]]:
    """Index batches for all epochs: a seeded permutation per epoch, cut by
    :func:`focalcse.core.settings.batch_spans` (a last batch of 1 is dropped: a single sentence has no
    negatives; the check stage counts the batches with the same function)."""
    gen = torch.Generator().manual_seed(seed)
    batches: list[list[int]] = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen).tolist()
        batches += [perm[start:stop] for start, stop in batch_spans(n, batch_size)]
    return batches


__all__ = ["batch_order", "tokenize_corpus"]
