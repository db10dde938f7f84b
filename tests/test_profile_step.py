"""``benchmarks/profile_step.py`` on a tiny model, both forwards: every part of the step is reported and
the parts account for the hooked step. A subprocess each: the unpadded profile wraps module functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_step.py"
pytestmark = pytest.mark.slow  # a process each (torch import, model build): ~20 s


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_profile_of_a_tiny_step_accounts_for_the_step(tmp_path, data_mirror, tiny_backbone, padded) -> None:
    out = tmp_path / "profile.json"
    cmd = [sys.executable, str(SCRIPT), "--backbone", str(tiny_backbone), "--precision", "fp32"]
    cmd += ["--steps", "2", "--warmup", "1", "--batch-size", "8", "--max-len", "16", "--threads", "1"]
    cmd += ["--out-json", str(out), *(["--padded"] if padded else [])]
    env = {**os.environ, "FOCALCSE_DATA_MIRROR": str(data_mirror)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["forward"] == ("padded" if padded else "unpadded")
    assert report["backbone"] == str(tiny_backbone) and report["steps"] == 2
    assert list(report["seconds"]) == list(report["share"])  # every part, in the table's order
    assert report["seconds"]["forward: FFN"] > 0 and report["seconds"]["backward"] > 0
    packing = report["seconds"]["forward: packing (pack / re-pad around attention; unpadded only)"]
    assert (packing == 0) == padded
    assert report["step_seconds_plain"] > 0 and 0.9 < sum(report["share"].values()) <= 1.0001
    assert "| part of the step |" in proc.stdout
