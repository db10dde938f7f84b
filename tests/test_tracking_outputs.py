"""Tracking observes a run and changes none of its outputs, which is why dvc.yaml's deps leave
``focalcse.ops.tracking`` out (focalcse.ops.dvc_yaml, ``OBSERVERS``).

A tiny item is trained and evaluated with tracking off, then again with it on (a local sqlite
store): every output DVC tracks is byte-identical, apart from what describes the run itself: the
``*.meta.json`` provenance files and the timing fields of the train metrics.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from focalcse.testing.project import make_tiny_project, project_env, run, save_tiny_backbone

TIMINGS = ("train_seconds", "wall_seconds", "sentences_per_second", "step_seconds_median", "peak_memory_mb")


def _outputs(project: Path) -> dict[str, str]:
    """sha256 of every output file of the item (models/, metrics/), timings and provenance aside."""
    out: dict[str, str] = {}
    for top in ("models", "metrics"):
        for path in sorted((project / top).rglob("*")):
            if not path.is_file() or path.name.endswith(".meta.json"):
                continue
            data = path.read_bytes()
            if path.parent.name == "train" and path.suffix == ".json":
                doc = json.loads(data)
                data = json.dumps({k: v for k, v in doc.items() if k not in TIMINGS}, sort_keys=True).encode()
            out[path.relative_to(project).as_posix()] = hashlib.sha256(data).hexdigest()
    return out


@pytest.mark.slow
def test_tracking_on_and_off_give_identical_outputs(tmp_path: Path, data_mirror: Path) -> None:
    from mlflow import MlflowClient

    model = save_tiny_backbone(tmp_path / "tiny")
    project = make_tiny_project(
        tmp_path / "repo",
        data_mirror,
        model,
        sweep={"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1]},
    )
    off_env = project_env(project, FOCALCSE_TRACKING="off")
    run(
        ["dvc", "repro", "check", "sample", "prepare_sts", "pretrain_generator@simcse-tiny"], project, off_env
    )
    item = [
        "dvc",
        "repro",
        "--force",
        "--single-item",
        "train@simcse-tiny-infonce-1",
        "evaluate@simcse-tiny-infonce-1",
    ]

    run(item, project, off_env)
    off = _outputs(project)
    assert not (project / "mlflow.db").exists()  # tracking was really off

    on_env = project_env(project)  # MLFLOW_TRACKING_URI = sqlite:///<copy>/mlflow.db
    run(item, project, on_env)
    on = _outputs(project)
    client = MlflowClient(on_env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"]  # ... and really on

    assert any(k.startswith("models/simcse/tiny/infonce/seed1/") for k in off)
    assert {
        "metrics/train/simcse-tiny-infonce-seed1.json",
        "metrics/eval/simcse-tiny-infonce-seed1.json",
    } <= set(off)
    differ = sorted(k for k in off.keys() | on.keys() if off.get(k) != on.get(k))
    assert not differ, f"tracking changed {differ}"
