"""The extending guide is true: two of its recipes (docs/extending.md: a new STS task, a new output)
applied to a temporary copy of the repository, touching exactly the files each recipe names, and the
tiny pipeline run on it.

* Task: one ``Task`` in ``src/focalcse/data/tasks.py`` (STS-B dev read as a task of its own: its files
  are in the mirror) and ``eval.tasks`` in the parameter set.
* Output: a new file of the ``significance`` stage, ``metrics/tasks.json``: its path and its entry in
  ``Layout.stage_outputs`` (``layout.py``), its line in the stage table (``stage_table.py``), the step
  that writes it (``steps/significance.py``), and ``dvc.yaml`` rendered again (``make dvc-yaml``).

Then ``dvc repro`` runs the whole tiny pipeline, the copy's own layout and dvc.yaml tests pass (they
check the table against the layout both ways, dvc.yaml against the table's rendering and DVC's
expansion, and the code deps against the import closure), the
new task is evaluated, reported and kept out of the 7-task average, and a second ``dvc repro`` (the
check stage prunes outputs it does not expect) leaves the new output in place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from focalcse.testing.project import TINY_PARAMS, make_tiny_project, project_env, run

pytestmark = pytest.mark.slow  # one full `dvc repro` of the tiny project

PAPER = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
NEW = "STSBDev"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: the recipe's anchor {old!r} is not there exactly once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def apply_task_recipe(repo: Path) -> None:
    _edit(
        repo / "src/focalcse/data/tasks.py",
        '        Task("SICKRelatedness", "SICK-R",',
        f'        Task("{NEW}", "STS-B dev", {{"dev": STSB_COUNTS["dev"]}}, '
        'lambda root, check=True: read_stsb(root, "dev", check)),\n'
        '        Task("SICKRelatedness", "SICK-R",',
    )
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["eval"]["tasks"] = [*PAPER, NEW]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def apply_output_recipe(repo: Path) -> None:
    _edit(
        repo / "src/focalcse/layout.py",
        "    @property\n    def significance_file(self) -> Path:",
        '    @property\n    def tasks_file(self) -> Path:\n        return self.metrics_dir / "tasks.json"\n\n'
        "    @property\n    def significance_file(self) -> Path:",
    )
    _edit(
        repo / "src/focalcse/layout.py",
        '| with_companions(self.summary_file, "meta")\n',
        '| with_companions(self.summary_file, "meta")\n                | {self.tasks_file}\n',
    )
    _edit(
        repo / "src/focalcse/steps/significance.py",
        "    write_result(layout.significance_file, out)\n",
        "    write_result(layout.significance_file, out)\n"
        '    write_result(layout.tasks_file, {"tasks": list(params.eval.tasks)})\n',
    )
    _edit(
        repo / "src/focalcse/stage_table.py",
        "            plain(L.significance_file),\n",
        "            plain(L.significance_file),\n            plain(L.tasks_file),\n",
    )


FRAMEWORKS_SET = "tests/test_dvc_yaml.py::test_dvc_expands_dvc_yaml_as_the_table_does[frameworks]"


def changed_files(repo: Path) -> set[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True
    )
    return {line[3:] for line in out.stdout.splitlines()}


def test_task_and_output_recipes_on_a_copy(tmp_path: Path, data_mirror: Path, tiny_backbone: Path) -> None:
    # one seed: the recipes touch every stage kind, and a second seed's four items prove nothing more
    sweep = {**TINY_PARAMS["sweep"], "seeds": [1]}
    repo = make_tiny_project(tmp_path / "repo", data_mirror, tiny_backbone, sweep=sweep)
    env = project_env(repo, PYTHONPATH=str(repo / "src"))  # the stages import the copy's edited code
    apply_task_recipe(repo)
    apply_output_recipe(repo)
    run([sys.executable, "-m", "focalcse.ops.dvc_yaml"], repo, env)  # make dvc-yaml
    assert "      - metrics/tasks.json:\n          cache: false\n" in (repo / "dvc.yaml").read_text()
    # exactly the files the two recipes name (docs/extending.md), nothing else
    assert changed_files(repo) == {
        "params.yaml",
        "src/focalcse/data/tasks.py",
        "src/focalcse/layout.py",
        "src/focalcse/steps/significance.py",
        "src/focalcse/stage_table.py",
        "dvc.yaml",
    }
    # the copy's own checks of the table against the layout, dvc.yaml and the import closure
    tests = [str(repo / "tests" / t) for t in ("test_layout.py", "test_dvc_yaml.py")]
    subprocess.run(
        # the frameworks set trains all-MiniLM-L6-v2, which the tiny copy's params.yaml does not sweep
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *tests,
            "--deselect",
            FRAMEWORKS_SET,
        ],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    run(["dvc", "repro"], repo, env, timeout=1500)

    item = json.loads((repo / "metrics/eval/simcse-tiny-focal_infonce-seed1.json").read_text())
    assert NEW in item and NEW in item["wmean"]
    assert item["avg"] == pytest.approx(float(np.mean([item[t] for t in PAPER])), abs=1e-12)
    assert abs(item["avg"] - float(np.mean([item[t] for t in (*PAPER, NEW)]))) > 1e-9
    assert json.loads((repo / "metrics/tasks.json").read_text())["tasks"] == [*PAPER, NEW]
    report = (repo / "reports/report.md").read_text()
    assert "STS-B dev" in report  # its own column
    assert " Avg. |" in report and "of the paper's 7)" not in report  # the average is still the paper's 7
    run(["dvc", "repro"], repo, env, timeout=600)  # the check stage runs again: nothing pruned
    assert (repo / "metrics/tasks.json").is_file()
