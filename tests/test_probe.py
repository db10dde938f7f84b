"""``scripts/probe.py``: its refusals (fast), and both probes end to end on the tiny config (slow):
``faults`` on a tiny train item, ``inputs`` on a copy of the tiny project after its ``dvc repro``."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from focalcse.testing.project import project_env, run

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "probe.py"
_spec = importlib.util.spec_from_file_location("probe", SCRIPT)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_faults_refuses_steps_too_few_for_the_corrupt_scenario(data_mirror, monkeypatch) -> None:
    monkeypatch.setenv("FOCALCSE_DATA_MIRROR", str(data_mirror))
    with pytest.raises(SystemExit, match=r"--steps \(8\) must exceed 2 x --every \(4\)"):
        probe.main(["faults", "--steps", "8", "--every", "4"])


def test_inputs_refuses_a_folder_without_a_pipeline(data_mirror, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FOCALCSE_DATA_MIRROR", str(data_mirror))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no dvc.yaml"):
        probe.main(["inputs"])


def test_a_probe_must_be_named(capsys) -> None:
    with pytest.raises(SystemExit):
        probe.main([])
    assert "faults" in capsys.readouterr().err


@pytest.mark.slow  # six tiny trainings, two MLflow server starts: a few minutes
def test_faults_on_a_tiny_item_pass_every_check(tmp_path, data_mirror, tiny_backbone) -> None:
    out = tmp_path / "faults.json"
    cmd = [sys.executable, str(SCRIPT), "faults", "--steps", "12", "--every", "4", "--threads", "1"]
    cmd += ["--tiny-backbone", str(tiny_backbone), "--out-json", str(out)]
    env = {**project_env(tmp_path), "FOCALCSE_DATA_MIRROR": str(data_mirror)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    report = json.loads(out.read_text())
    assert report["item"] == "simcse-tiny-infonce-seed1" and report["num_sentences"] == 64 * 12
    assert report["ok"] and all(report["checks"].values()), report["failed"]
    assert report["corrupt_checkpoint"]["fell_back_to_step"] == 4
    assert "Checks: all passed" in proc.stdout


@pytest.mark.slow  # seven `dvc repro` runs of the tiny project, six of them stopping in `check`
def test_inputs_on_the_tiny_project_stop_in_check_and_change_nothing(
    tmp_path, data_mirror, tiny_repro
) -> None:
    project = Path(shutil.copytree(tiny_repro, tmp_path / "repo", symlinks=True))
    out = tmp_path / "inputs.json"
    env = {**project_env(project), "FOCALCSE_DATA_MIRROR": str(data_mirror)}
    # a checkout as a user has it: outputs committed and the report built at that clean commit (the
    # fixture's report predates the .gitignore files DVC staged, so a rebuild would read "-dirty")
    run(["git", "add", "-A"], project, env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "outputs"], project, env)
    run(["dvc", "repro", "--single-item", "--force", "report"], project, env)
    cmd = [sys.executable, str(SCRIPT), "inputs", "--out-json", str(out)]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    results = {r["probe"]: r for r in json.loads(out.read_text())}
    assert len(results) == 7 and all(r["unchanged"] for r in results.values())
    for name, r in results.items():
        if name.startswith("two dvc repro"):
            assert r["first_returncode"] == 0 and r["returncode"] != 0, r
        else:
            assert r["stages_run"] == ["check"] and len(r["errors"]) == 1 and not r["traceback"], r
    assert "batch_size" in results["batch_size -1"]["errors"][0]


def test_determinism_refuses_one_run_and_a_folder_without_a_pipeline(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no dvc.yaml"):
        probe.main(["determinism"])
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    with pytest.raises(SystemExit, match=r"--runs 1: expected at least 2"):
        probe.main(["determinism", "--runs", "1"])


@pytest.mark.slow  # two tiny trainings through `dvc repro --force -s`
def test_determinism_on_the_tiny_project_gives_one_md5_the_committed_one(
    tmp_path, data_mirror, tiny_repro
) -> None:
    project = Path(shutil.copytree(tiny_repro, tmp_path / "repo", symlinks=True))
    out = tmp_path / "determinism.json"
    env = {**project_env(project), "FOCALCSE_DATA_MIRROR": str(data_mirror)}
    run(["git", "add", "-A"], project, env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "outputs"], project, env)
    cmd = [sys.executable, str(SCRIPT), "determinism", "--runs", "2", "--out-json", str(out)]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    rec = json.loads(out.read_text())
    assert rec["item"] == probe.first_train_item(project) and rec["item"].startswith("train@simcse-tiny-")
    assert len(rec["runs"]) == 2 and rec["ok"]
    assert {r["model_md5"] for r in rec["runs"]} == {rec["committed_md5"]}
    assert isinstance(rec["runs"][0]["final_loss"], float)
