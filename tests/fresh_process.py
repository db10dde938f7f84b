"""Run a snippet in a fresh Python process (nothing imported yet) and read back the JSON it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, **env: str) -> dict:
    """``code`` in a new interpreter at the repo root (offline; loss plugins only as ``env`` says)."""
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    if "FOCALCSE_LOSS_MODULES" not in env:
        full.pop("FOCALCSE_LOSS_MODULES", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
