"""benchmarks/roofline.py: the step's matmul FLOPs against a hand count, and the matmul timer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import roofline  # noqa: E402


def test_step_flops_are_the_hand_count_of_two_batches():
    d, f, layers = 8, 32, 2
    batches = [[3, 5], [4, 4, 4]]  # token lengths per sentence
    # batch 1: 2 views -> 16 tokens -> packed 64; 4 rows, longest 5
    lin1 = layers * 2 * 64 * (4 * d * d + 2 * d * f)
    att1 = layers * 4 * 4 * 5 * 5 * d
    pool1 = 2 * 4 * d * d
    # batch 2: 24 tokens -> packed 64; 6 rows, longest 4
    lin2 = layers * 2 * 64 * (4 * d * d + 2 * d * f)
    att2 = layers * 4 * 6 * 4 * 4 * d
    pool2 = 2 * 6 * d * d
    got = roofline.step_flops(batches, d, f, layers)
    forward = (lin1 + att1 + pool1 + lin2 + att2 + pool2) / 2
    assert got["forward"] == pytest.approx(forward)
    assert got["step"] == pytest.approx(3 * forward)
    assert got["forward_attention"] == pytest.approx((att1 + att2) / 2)
    assert got["packed_tokens"] == 64


def test_a_packed_count_rounds_up_to_the_packing_multiple():
    got = roofline.step_flops([[33, 32]], 4, 8, 1, mlp=False)  # 130 tokens -> 192
    assert got["packed_tokens"] == 192 and got["forward_pooler"] == 0


def test_matmul_tflops_is_positive_and_finite():
    import torch

    v = roofline.matmul_tflops(32, 16, 8, torch.float32, reps=3, warmup=1)
    assert 0 < v < 1e3


def test_step_bytes_are_the_hand_count_of_one_batch():
    d, f, layers, heads, params = 8, 32, 2, 2, 1000
    # one batch of lengths 3 and 5: 2 views -> 4 rows, 16 tokens -> packed T = 64; longest 5
    t, pos, scores = 64, 4 * 5, heads * 4 * 5 * 5
    for elem in (2, 4):
        got = roofline.step_bytes([[3, 5]], d, f, layers, heads, params, elem)
        elementwise = layers * (2 * 2 * t * d + 2 * 3 * t * d + 2 * 2 * t * d + 2 * t * f) * elem
        attention = layers * ((1 + 2 + 3 + 1) * scores * 4 + 2 * scores)
        pack_qkv = 3 * (t * d * elem + pos * d * elem + pos * d * elem + pos * d * 4)
        packing = layers * (pack_qkv + pos * d * 4 + pos * d * elem + pos * d * elem + t * d * elem)
        matmul = (
            layers
            * (
                (t * d + 3 * t * d + 3 * d * d)  # Q, K, V: input read per projection counted once + weights
                + (t * d + t * d + d * d)  # attention output
                + (t * d + t * f + d * f)  # FFN up
                + (t * f + t * d + f * d)  # FFN down
                + (3 - 1) * t * d  # Q, K and V each read the layer input: two more reads
            )
            * elem
        )
        assert got["elementwise"] == pytest.approx(3 * elementwise)
        assert got["attention"] == pytest.approx(3 * attention)
        assert got["packing"] == pytest.approx(3 * packing)
        assert got["matmul"] == pytest.approx(3 * matmul)
        assert got["optimizer"] == params * 40
        assert got["step"] == pytest.approx(3 * (elementwise + attention + packing + matmul) + params * 40)


def test_elementwise_gbps_is_positive_and_finite():
    import torch

    v = roofline.elementwise_gbps(4096, torch.float32, reps=3, warmup=1)
    assert 0 < v < 1e5
