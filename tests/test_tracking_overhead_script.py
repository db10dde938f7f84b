"""The pure helpers of ``scripts/tracking_overhead.py`` (no training, no server): reading the stage's
timing lines and the medians / ratios of the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tracking_overhead.py"
_spec = importlib.util.spec_from_file_location("tracking_overhead", SCRIPT)
overhead = importlib.util.module_from_spec(_spec)
sys.modules["tracking_overhead"] = overhead
_spec.loader.exec_module(overhead)


def test_the_stage_timing_lines_are_read() -> None:
    stdout = (
        "MLflow run 0123 in experiment 'cpu-default' at sqlite:///x.db\n"
        "MLflow run ready in 2.4 s (params, tags, dataset inputs)\n"
        "train infonce seed 1: ...\n"
        "MLflow finish: metrics 0.1 s, artifacts 3.2 s, logged_model 11.0 s, tags 0.3 s\n"
    )
    assert overhead.parse_lines(stdout) == {
        "run_ready_seconds": 2.4,
        "finish_metrics_seconds": 0.1,
        "finish_artifacts_seconds": 3.2,
        "finish_logged_model_seconds": 11.0,
        "finish_tags_seconds": 0.3,
    }
    assert overhead.parse_lines("tracking off\n") == {}


def test_medians_and_ratios() -> None:
    runs = [{"setting": "off", "wall_seconds": w} for w in (100.0, 90.0, 110.0)] + [
        {"setting": "sqlite", "wall_seconds": w} for w in (104.0, 120.0, 95.0)
    ]
    s = overhead.summary(runs, ["off", "sqlite"])
    assert s["off"]["median_seconds"] == 100.0 and s["off"]["ratio_to_off"] == 1.0
    assert s["sqlite"]["median_seconds"] == 104.0
    assert s["sqlite"]["ratio_to_off"] == pytest.approx(1.04)
    assert s["sqlite"]["runs"] == [104.0, 120.0, 95.0]
