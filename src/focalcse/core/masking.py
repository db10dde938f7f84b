"""BERT-style 80/10/10 masking, as DiffCSE's official collator does it (github.com/voidism/DiffCSE,
commit f724b2c, ``train.py`` 512-544, ``OurDataCollatorWithPadding.mask_tokens``).

Shared by DiffCSE's step (:mod:`focalcse.core.frameworks.diffcse`: the generator's input) and the
generator's MLM pre-training (:mod:`focalcse.core.generator`), so neither imports the other.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100  # train.py 532: MLM labels of unselected tokens (as HF's collator)
MASK_FRACTION = 0.8  # train.py 535: selected tokens that become [MASK]
RANDOM_FRACTION_OF_REST = 0.5  # train.py 539: of the other selected tokens, half become a random id


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special_mask: torch.Tensor,
    ratio: float,
    mask_token_id: int,
    generator: torch.Generator | None,
    *,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The generator's input: BERT-style 80/10/10 masking, as ``train.py`` 512-544.

    Args:
        input_ids: (B, L) long.
        attention_mask: (B, L), 1 on real tokens. The official code relies on the tokenizer's special
            tokens mask, which already covers padding; padding is excluded here too, in case
            ``special_mask`` does not mark it.
        special_mask: (B, L) bool/0-1, 1 on special tokens (``tokenizer.get_special_tokens_mask(ids,
            already_has_special_tokens=True)``).
        ratio: probability with which each eligible token is selected (``--masking_ratio``).
        mask_token_id: the tokenizer's mask id.
        generator: the random source, None for the global RNG (the official code uses the global RNG, in the same order of
            draws: selection, 80% mask, 50% random, random ids).
        vocab_size: random ids are drawn from ``[0, vocab_size)`` (official: ``len(tokenizer)``).

    Returns:
        ``(masked_ids, mlm_labels)``: the corrupted ids, and the original id at selected positions
        and ``-100`` elsewhere (``train.py`` 532).
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")
    device = input_ids.device
    eligible = ~special_mask.bool() & attention_mask.bool()
    probability = torch.full(input_ids.shape, float(ratio), device=device)
    probability.masked_fill_(~eligible, 0.0)
    selected = torch.bernoulli(probability, generator=generator).bool()
    labels = input_ids.clone()
    labels[~selected] = IGNORE_INDEX

    masked = input_ids.clone()
    to_mask = (
        torch.bernoulli(torch.full(input_ids.shape, MASK_FRACTION, device=device), generator=generator).bool()
        & selected
    )
    masked[to_mask] = mask_token_id
    to_random = (
        torch.bernoulli(
            torch.full(input_ids.shape, RANDOM_FRACTION_OF_REST, device=device), generator=generator
        ).bool()
        & selected
        & ~to_mask
    )
    random_ids = torch.randint(
        vocab_size, input_ids.shape, dtype=input_ids.dtype, device=device, generator=generator
    )
    masked[to_random] = random_ids[to_random]
    return masked, labels


__all__ = ["IGNORE_INDEX", "MASK_FRACTION", "RANDOM_FRACTION_OF_REST", "mask_tokens"]
