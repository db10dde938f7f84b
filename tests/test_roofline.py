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
