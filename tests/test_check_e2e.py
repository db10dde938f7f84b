"""End to end: a ``max_steps`` beyond the sample, after every item has trained, stops ``dvc repro`` at
the ``check`` stage with one line, and every model and metrics file is byte-identical afterwards.

Before the check stage applied the trainer's own step count (``focalcse.config.training_steps``), DVC
deleted each train item's model and metrics and only then did the train stage refuse the value.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from focalcse.testing.project import project_env

pytestmark = pytest.mark.slow


def _files(project: Path) -> dict[str, str]:
    """sha256 of every file under models/ and metrics/ (DVC's cache links followed)."""
    out = {}
    for top in ("models", "metrics"):
        for path in sorted((project / top).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(project))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_max_steps_beyond_the_sample_stops_at_check_and_keeps_every_output(
    tiny_repro: Path, tmp_path: Path
) -> None:
    project = Path(shutil.copytree(tiny_repro, tmp_path / "repo", symlinks=True))
    before = _files(project)
    assert any(p.endswith("model.safetensors") for p in before) and any(
        p.startswith("metrics/train/") for p in before
    )
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"]["max_steps"] = 1000  # the tiny sample: 192 sentences give 6 batches of 32
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    proc = subprocess.run(
        ["dvc", "repro"], cwd=project, env=project_env(project), capture_output=True, text=True
    )

    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    assert "train.max_steps=1000 (item simcse tiny infonce seed 1) but 192 sentences" in errors[0]
    assert "give only 6 batches of 32: expected 0 (every batch) or at most 6" in errors[0]
    assert "Traceback" not in out
    assert "Running stage 'check'" in out and not re.findall(r"Running stage '(?!check')", out)
    assert _files(project) == before  # nothing deleted, nothing rewritten, nothing added
