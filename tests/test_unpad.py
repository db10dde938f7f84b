"""The unpadded training forward (focalcse.core.unpad) against the padded ``transformers`` forward.

Every comparison is with ``transformers``' own BertModel / RobertaModel (SDPA attention), never with
the unpadded code itself; dropout's replacement is checked against a hand-written formula on the same
generator draws (split and thresholded in numpy), and for its distribution.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel

from focalcse.core.model import SentenceEncoder
from focalcse.core.settings import TrainConfig
from focalcse.core.training import _use_unpad
from focalcse.core.unpad import (
    Packing,
    _attend,
    _threshold,
    dropout,
    keep_mask,
    packed_hidden,
    unpad_unsupported,
)

SHAPES = {
    # (model_type, config overrides): BERT-shaped, RoBERTa-shaped (padding_idx 1, positions from 2),
    # MiniLM-shaped (all-MiniLM-L6-v2's 12 heads of a small hidden size, 4x FFN, GELU)
    "bert": ("bert", {}),
    "roberta": ("roberta", {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}),
    "minilm": (
        "bert",
        {"hidden_size": 48, "num_attention_heads": 12, "intermediate_size": 192, "num_hidden_layers": 3},
    ),
}
LENGTHS = [12, 3, 7, 12, 1, 9]  # a full row, a 1-token row, the rest ragged


def _model(shape: str) -> torch.nn.Module:
    model_type, extra = SHAPES[shape]
    kw = dict(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **{**kw, **extra})
    return AutoModel.from_config(config, attn_implementation="sdpa")


def _batch(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(LENGTHS)
    mask = (torch.arange(width)[None] < torch.tensor(LENGTHS)[:, None]).long()  # (B, L) right-padded
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, mask.shape, generator=gen)
    ids[mask == 0] = model.config.pad_token_id or 0
    return ids, mask


def _mode(model: torch.nn.Module, mode: str) -> None:
    """eval, or train mode with every dropout probability 0 (so both forwards are deterministic)."""
    if mode == "eval":
        model.eval()
        return
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def _forward_and_grads(model, fn, ids, mask, weights):
    model.zero_grad(set_to_none=True)
    hidden = fn(ids, mask)
    (hidden * weights).sum().backward()
    return hidden.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_packed_forward_and_gradients_equal_transformers(shape: str, mode: str) -> None:
    model = _model(shape)
    assert unpad_unsupported(model) is None
    _mode(model, mode)
    ids, mask = _batch(model)
    real = mask.bool()
    weights = torch.randn(*mask.shape, model.config.hidden_size, generator=torch.Generator().manual_seed(2))
    weights = weights * mask[..., None]  # a loss that reads real tokens only, as every pooler does

    ref, ref_grads = _forward_and_grads(
        model, lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state, ids, mask, weights
    )
    out, grads = _forward_and_grads(model, lambda i, m: packed_hidden(model, i, m), ids, mask, weights)

    assert out.shape == ref.shape
    rel = (out[real] - ref[real]).abs().max() / ref[real].abs().max()
    assert rel <= 1e-5, f"{shape}/{mode}: last hidden states differ by {rel:.2e} relative"
    assert set(grads) == set(ref_grads)  # the same parameters receive gradients (the pooler none)
    # Relative to the largest gradient: the key biases' gradients are exactly 0 in exact arithmetic
    # (softmax is invariant to a per-query constant), so both sides hold only rounding there (~1e-9).
    scale = max(g.abs().max() for g in ref_grads.values())
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-5, atol=1e-5 * float(scale), msg=name)


def test_a_full_batch_and_a_single_row() -> None:
    model = _model("bert")
    model.eval()
    ids = torch.randint(5, 200, (3, 8))
    full = torch.ones_like(ids)
    ref = model(input_ids=ids, attention_mask=full).last_hidden_state
    torch.testing.assert_close(packed_hidden(model, ids, full), ref, rtol=1e-5, atol=1e-6)
    one = model(input_ids=ids[:1, :1], attention_mask=full[:1, :1]).last_hidden_state
    torch.testing.assert_close(packed_hidden(model, ids[:1, :1], full[:1, :1]), one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_encoder_train_forward_unpadded_equals_padded(pooler: str, tiny_encoder_factory) -> None:
    """SentenceEncoder's train-mode forward with ``unpad`` = its padded forward (dropout off), pooled."""
    enc = tiny_encoder_factory(pooler=pooler)
    _mode(enc, "train")
    ids, mask = _batch(enc.backbone)
    padded = enc(input_ids=ids, attention_mask=mask)
    enc.unpad = True
    unpadded = enc(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(unpadded, padded, rtol=1e-5, atol=1e-6)
    enc.eval()  # evaluation always runs the transformers forward
    assert torch.equal(enc(input_ids=ids, attention_mask=mask), _padded_eval(enc, ids, mask))


def _padded_eval(enc: SentenceEncoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    enc.unpad = False
    try:
        return enc(input_ids=ids, attention_mask=mask)
    finally:
        enc.unpad = True


def _expected_keep(shape: tuple[int, ...], p: float, seed: int) -> torch.Tensor:
    """The keep mask written out independently: the generator's 64-bit words after ``seed``, split into
    their low and high 32 bits (numpy, little-endian), each read as a signed int, kept when at least
    -2**31 + ceil(p * 2**32) (from the exact binary value of p, in Python integers)."""
    n = int(np.prod(shape))
    torch.manual_seed(seed)
    words = torch.empty((n + 1) // 2, dtype=torch.int64).random_(-(2**63), None).numpy()
    halves = words.astype("<i8").view("<i4")[:n]
    threshold = -(2**31) + math.ceil(Fraction(p) * 2**32)
    return torch.from_numpy((halves >= threshold).reshape(shape))


def test_keep_mask_is_the_threshold_of_32_random_bits() -> None:
    torch.manual_seed(5)
    got = keep_mask((64, 47), 0.1, "cpu")  # an odd count: the last word's high half goes unused
    assert got.dtype == torch.bool and got.shape == (64, 47)
    assert torch.equal(got, _expected_keep((64, 47), 0.1, 5))


def test_dropout_is_inverted_dropout_of_the_keep_mask() -> None:
    x = torch.randn(64, 48)
    torch.manual_seed(5)
    got = dropout(x, 0.1, True)
    expected = torch.where(_expected_keep((64, 48), 0.1, 5), x / 0.9, torch.zeros_like(x))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0.0)
    assert dropout(x, 0.1, False) is x and dropout(x, 0.0, True) is x
    # the gradient is the same mask and scale
    xg = x.clone().requires_grad_()
    torch.manual_seed(5)
    dropout(xg, 0.1, True).sum().backward()
    torch.testing.assert_close(xg.grad, _expected_keep((64, 48), 0.1, 5).float() / 0.9, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5])
def test_dropout_keeps_each_element_with_probability_one_minus_p(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(1000, 1000)
    out = dropout(x, p, True)
    kept = (out != 0).float().mean().item()
    # 1e6 Bernoulli(1 - p) draws: std <= 5e-4; 5 sigma
    assert abs(kept - (1 - p)) < 2.5e-3
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / (1 - p)))
    assert abs(out.mean().item() - 1.0) < 5e-3  # inverted dropout keeps the expectation


def test_keep_probability_is_exact_to_2_to_the_minus_32() -> None:
    """Kept iff the int32 half >= the threshold: 2**31 - threshold of the 2**32 values."""
    for p in (0.1, 0.25, 1e-12, 0.999):
        kept_values = 2**31 - _threshold(p)
        assert abs(Fraction(kept_values, 2**32) - (1 - Fraction(p))) <= Fraction(1, 2**32)


def test_keep_mask_bits_are_balanced() -> None:
    """Each of the 64 bits of the draws used is set about half the time (the full int64 range, not
    ``random_()``'s [0, 2**63)): 2**20 words, 5 sigma."""
    torch.manual_seed(1)
    words = torch.empty(2**20, dtype=torch.int64).random_(-(2**63), None).numpy().view(np.uint64)
    for bit in (0, 31, 32, 62, 63):
        share = float(((words >> np.uint64(bit)) & np.uint64(1)).mean())
        assert abs(share - 0.5) < 5 * 0.5 / 2**10, (bit, share)


def test_attention_with_dropout_is_the_hand_written_formula() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    torch.manual_seed(9)
    got = _attend(q, k, v, mask, 0.25, 0.5)
    scores = (q @ k.transpose(-1, -2)) * 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(-1)
    keep = _expected_keep(probs.shape, 0.25, 9)
    expected = (torch.where(keep, probs / 0.75, torch.zeros_like(probs))) @ v
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # without dropout: SDPA, the same as the formula with no dropout
    torch.testing.assert_close(_attend(q, k, v, mask, 0.0, 0.5), probs @ v, rtol=1e-5, atol=1e-6)
    # gradients of q, k and v: the same as the formula's
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    torch.manual_seed(9)
    _attend(qg, kg, vg, mask, 0.25, 0.5).pow(2).sum().backward()
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    s = ((qr @ kr.transpose(-1, -2)) * 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
    (torch.where(keep, s / 0.75, torch.zeros_like(s)) @ vr).pow(2).sum().backward()
    for ours, ref in ((qg, qr), (kg, kr), (vg, vr)):
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-6)


def test_attention_with_dropout_keeps_sdpa_precision_in_bf16() -> None:
    """Under bf16 autocast the written-out attention computes in float32 like SDPA: its error against
    a float32 reference is SDPA's (bf16 scores and softmax would give ~1.5x SDPA's mean error)."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(16, 4, 24, 16, generator=gen) for _ in range(3))
    mask = torch.ones(16, 1, 1, 24, dtype=torch.bool)
    mask[:8, ..., 15:] = False
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q16, k16, v16 = q.bfloat16(), k.bfloat16(), v.bfloat16()
        sdpa = torch.nn.functional.scaled_dot_product_attention(q16, k16, v16, attn_mask=mask)
        ours = _attend(q16, k16, v16, mask, 1e-12, 16**-0.5)  # dropout on, keeping (almost surely) all
    assert ours.dtype == torch.bfloat16
    err_sdpa = (sdpa.float() - ref).abs().mean()
    err_ours = (ours.float() - ref).abs().mean()
    assert err_ours <= 1.1 * err_sdpa, (float(err_ours), float(err_sdpa))


@pytest.mark.parametrize("multiple", [1, 4, 64])
def test_packed_forward_is_exact_whatever_the_padding_tokens_taken_in(multiple: int, monkeypatch) -> None:
    """Rounding T up with padding tokens changes no real token's hidden state (fp32, eval mode)."""
    import focalcse.core.unpad as unpad

    model = _model("roberta")  # positions depend on the mask there
    model.eval()
    ids, mask = _batch(model)
    real = mask.bool()
    ref = model(input_ids=ids, attention_mask=mask).last_hidden_state
    monkeypatch.setattr(unpad, "PACK_MULTIPLE", multiple)
    monkeypatch.setattr(unpad.Packing.__init__, "__defaults__", (multiple,))
    out = packed_hidden(model, ids, mask)
    torch.testing.assert_close(out[real], ref[real], rtol=1e-5, atol=1e-6)


def test_packing_rounds_the_token_count_up_with_padding_positions() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])  # 6 real of 12
    assert Packing(mask, multiple=4).index.tolist() == [0, 1, 2, 3, 4, 5, 6, 8]  # 8: 6 real + the first 2 pad
    assert Packing(mask, multiple=64).index.tolist() == list(range(12))  # fewer than 64: all
    assert Packing(mask, multiple=3).index.tolist() == [0, 1, 4, 5, 6, 8]  # 6 already a multiple


def test_packing_round_trip() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    packing = Packing(mask, multiple=1)
    x = torch.arange(9.0).view(3, 3, 1)
    packed = packing.pack(x)
    assert packed.squeeze(1).tolist() == [0.0, 1.0, 3.0, 4.0, 5.0, 6.0]
    assert packing.repad(packed).squeeze(2).tolist() == [[0, 1, 0], [3, 4, 5], [6, 0, 0]]


def test_head_layout_equals_the_transposed_repad_and_back() -> None:
    """to_heads is the re-padded (B, L, H, dh) tensor transposed to (B, H, L, dh), written contiguous;
    from_heads takes the computed tokens back out; gradients flow to exactly the computed entries."""
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    packing = Packing(mask, multiple=1)
    heads, head = 2, 3
    packed = torch.randn(6, heads * head, requires_grad=True)
    want = packing.repad(packed.detach()).view(3, 4, heads, head).transpose(1, 2)
    got = packing.to_heads(packed, heads)
    assert got.is_contiguous() and torch.equal(got, want)
    assert torch.equal(packing.from_heads(got), packed.detach())
    w = torch.randn(3, heads, 4, head)
    (got * w).sum().backward()
    assert torch.equal(packed.grad, packing.pack(w.transpose(1, 2).reshape(3, 4, heads * head)))
    ctx = torch.randn(3, heads, 4, head, requires_grad=True)
    g = torch.randn(6, heads * head)
    (packing.from_heads(ctx) * g).sum().backward()
    assert torch.equal(ctx.grad, packing.repad(g).view(3, 4, heads, head).transpose(1, 2))


def test_unsupported_backbones_train_padded_with_a_warning() -> None:
    config = AutoConfig.for_model(
        "distilbert", vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64, max_position_embeddings=64
    )
    backbone = AutoModel.from_config(config)
    assert "distilbert" in unpad_unsupported(backbone)

    class Enc:
        pass

    enc = Enc()
    enc.backbone = backbone
    with pytest.warns(UserWarning, match="distilbert"):
        assert _use_unpad(enc, TrainConfig(loss="infonce"), SimpleNamespace(name="simcse")) is False
    supported = Enc()
    supported.backbone = _model("bert")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _use_unpad(supported, TrainConfig(loss="infonce"), SimpleNamespace(name="simcse")) is True
        assert (
            _use_unpad(supported, TrainConfig(loss="infonce", unpad=False), SimpleNamespace(name="simcse"))
            is False
        )
        assert _use_unpad(supported, TrainConfig(loss="infonce"), SimpleNamespace(name="diffcse")) is False
    decoder = _model("bert")
    decoder.config.is_decoder = True
    assert "decoder" in unpad_unsupported(decoder)


def test_keep_freed_memory_sets_glibc_thresholds_once_and_skips_other_libcs(monkeypatch) -> None:
    import ctypes

    from focalcse.core import heap

    heap.keep_freed_memory.cache_clear()
    try:
        assert heap.keep_freed_memory() in (heap.KEEP_BYTES, heap.GLIBC_MMAP_CAP)  # this machine: glibc
        assert heap.keep_freed_memory.cache_info().hits == 0
        heap.keep_freed_memory()
        assert heap.keep_freed_memory.cache_info().hits == 1  # set once per process

        class NotGlibc:  # musl-like: no gnu_get_libc_version
            def __init__(self, *args, **kwargs) -> None:
                pass

        heap.keep_freed_memory.cache_clear()
        monkeypatch.setattr(ctypes, "CDLL", NotGlibc)
        assert heap.keep_freed_memory() == 0
    finally:
        monkeypatch.undo()
        heap.keep_freed_memory.cache_clear()
        heap.keep_freed_memory()
