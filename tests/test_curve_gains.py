"""scripts/curve_gains.py against a curve worked out by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "curve_gains.py"
spec = importlib.util.spec_from_file_location("curve_gains", SCRIPT)
curve_gains = importlib.util.module_from_spec(spec)
spec.loader.exec_module(curve_gains)


def test_gains_of_a_hand_made_curve() -> None:
    curve = [
        {"step": s, "stsb_dev_spearman": v}
        for s, v in [(0, 70.0), (4, 80.0), (8, 81.0), (12, 81.5), (16, 81.25)]
    ]
    g = curve_gains.gains(curve, window=8)
    assert (g["best_step"], g["last_step"], g["best_is_last"]) == (12, 16, False)
    assert g["gain_last_window"] == pytest.approx(81.25 - 81.0)  # step 8 -> 16
    assert g["gain_window_before"] == pytest.approx(81.0 - 70.0)  # step 0 -> 8
    # lr(t) = 1 - t/16 for t = 8..15: mean of (8..1)/16 = 4.5/16
    assert g["mean_lr_fraction_last_window"] == pytest.approx(4.5 / 16)
    # the step-0 score is never "best" (it is the starting model)
    assert curve_gains.gains([{"step": 0, "stsb_dev_spearman": 99.0}, *curve[1:]], 8)["best_step"] == 12
