"""A bad param or bad input never deletes a good output (the ``check`` stage).

DVC deletes a stage's outputs just before it runs the stage, so every check that can be made before
any work is made by the first stage, ``check``, which every other stage depends on. On a copy of the
tiny end-to-end project, each bad input below makes ``dvc repro`` fail with one ``error:`` line and
no traceback, and leaves ``git status`` and ``dvc status`` exactly as they were before it (every model,
metrics file and report still there). A passing check changes nothing downstream: editing a
``report.*`` param reruns ``check`` and ``report`` only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from focalcse.testing.project import bad_mirror, project_env, run

pytestmark = pytest.mark.slow

OUTPUTS = (
    "models/simcse/tiny/infonce/seed1/model.safetensors",
    "metrics/train/simcse-tiny-infonce-seed1.json",
    "metrics/eval/simcse-tiny-focal_infonce-seed2.json",
    "metrics/significance.json",
    "data/corpus/train.txt",
    "data/sts/manifest.json",
    "reports/report.md",
)


@pytest.fixture(scope="module")
def project(tiny_repro: Path, tmp_path_factory) -> Path:
    return Path(shutil.copytree(tiny_repro, tmp_path_factory.mktemp("bad") / "repo", symlinks=True))


def _state(project: Path, env: dict[str, str]) -> tuple[str, str]:
    git = run(["git", "status", "--porcelain"], project, env).stdout
    dvc = run(["dvc", "status"], project, env).stdout
    return git, dvc


def _edit_params(project: Path, edit: Callable[[dict], None]) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    edit(params)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


CASES = {
    "negative batch size": (
        lambda p, t, m: _edit_params(p, lambda d: d["train"].update(batch_size=-1)),
        "train.batch_size = -1",
    ),
    "typo key": (
        lambda p, t, m: _edit_params(p, lambda d: d["train"].update(learning_rat=1e-5)),
        "unknown key(s) ['learning_rat']",
    ),
    "unknown task": (
        lambda p, t, m: _edit_params(p, lambda d: d["eval"].update(tasks=["STS99"])),
        "eval.tasks = ['STS99']",
    ),
    "malformed STS score": (
        lambda p, t, m: _edit_params(
            p, lambda d: d["data"].update(mirror=str(bad_mirror(t, m, "sts-score")))
        ),
        "sts-test.csv:8: score",
    ),
    "empty corpus": (
        lambda p, t, m: _edit_params(p, lambda d: d["data"].update(mirror=str(bad_mirror(t, m, "corpus")))),
        "no non-blank sentence",
    ),
    "no mirror, offline": (
        lambda p, t, m: _edit_params(p, lambda d: d["data"].update(mirror="")),
        "FOCALCSE_DATA_MIRROR",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_stops_at_check_and_keeps_every_output(
    project: Path, data_mirror: Path, tmp_path: Path, case: str
) -> None:
    mutate, message = CASES[case]
    # offline: an empty download cache, and a proxy that refuses at once if a network is there
    env = project_env(project, FOCALCSE_CACHE=str(tmp_path / "cache"), HTTPS_PROXY="http://127.0.0.1:9")
    original = (project / "params.yaml").read_text()
    try:
        mutate(project, tmp_path, data_mirror)
        before = _state(project, env)
        proc = subprocess.run(["dvc", "repro"], cwd=project, env=env, capture_output=True, text=True)
        after = _state(project, env)
    finally:
        (project / "params.yaml").write_text(original)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out[-3000:]
    assert "Traceback" not in out
    assert "Running stage 'check'" in out and not re.findall(r"Running stage '(?!check')", out)
    assert after == before  # git status and dvc status list the same outputs
    for rel in OUTPUTS:
        assert (project / rel).is_file(), f"{case}: {rel} was deleted"


def test_editing_a_report_param_reruns_only_check_and_report(project: Path) -> None:
    env = project_env(project)
    original = (project / "params.yaml").read_text()
    checked = (project / "data/checked.json").read_bytes()
    try:
        _edit_params(project, lambda d: d["report"].update(figure1_ms=[0.2, 0.4]))  # report alone reads it
        out = run(["dvc", "repro"], project, env).stdout
    finally:
        (project / "params.yaml").write_text(original)
    assert set(re.findall(r"Running stage '([^']+)'", out)) == {"check", "report"}
    assert (project / "data/checked.json").read_bytes() == checked  # constant: nothing downstream reran
    run(["dvc", "repro"], project, env)  # back to the committed params: report again, nothing else
