"""The extending guide is true: three of its recipes (docs/extending.md: a new STS task, a new output,
a new framework) applied to a temporary copy of the repository, touching exactly the files each recipe
names, and the tiny pipeline run on it.

* Framework: a package ``src/focalcse/core/frameworks/toyfw/`` (its SPEC, step and training setup),
  its settings ``src/focalcse/core/frameworks/settings/toyfw.py`` (with its report notes) and a
  parameter set ``params/toyfw.yaml`` that adds it to the sweep; the set runs in its own folder
  (``sets/toyfw/``), trains and evaluates the toy's items, and its report shows them with the toy's notes.

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

from focalcse.testing.project import NO_TRACKING, TINY_PARAMS, make_tiny_project, project_env, run

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


def git_status(repo: Path, *args: str) -> list[str]:
    """``git status --porcelain`` lines (status, space, path) in ``repo``, with ``args`` added."""
    out = subprocess.run(
        ["git", "status", "--porcelain", *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def changed_files(repo: Path) -> set[str]:
    return {line[3:] for line in git_status(repo)}


def test_task_and_output_recipes_on_a_copy(tmp_path: Path, data_mirror: Path, tiny_backbone: Path) -> None:
    # one seed: the recipes touch every stage kind, and a second seed's four items prove nothing more
    sweep = {**TINY_PARAMS["sweep"], "seeds": [1]}
    repo = make_tiny_project(tmp_path / "repo", data_mirror, tiny_backbone, sweep=sweep)
    env = project_env(repo, PYTHONPATH=str(repo / "src"), **NO_TRACKING)  # the stages import the copy's code
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


TOY_PACKAGE = '''"""Toy framework (the extending guide's proof): the second view of a sentence is its tokens in
reverse order, [CLS] and [SEP] kept in place; the registry's loss between the two views."""

from __future__ import annotations

import os
from typing import Any

from focalcse.core.encode import pad_batch
from focalcse.core.model import SentenceEncoder

SPEC = {
    "name": "toyfw",
    "label": "Toy framework",
    "settings": "focalcse.core.frameworks.settings.toyfw:ToySettings",
    "refuses": ["ddp", "gradcache"],
}


class ToyStep:
    name = SPEC["name"]

    def __init__(self, pad_id: int, reverse: bool) -> None:
        self.pad_id, self.reverse = pad_id, reverse
        self.settings = {"reverse": reverse}

    def attach(self, encoder: Any) -> None:
        return None

    def loss(self, encoder: Any, loss_fn: Any, rows: list[list[int]], device: Any) -> tuple[Any, dict]:
        second = [[r[0], *r[-2:0:-1], r[-1]] if self.reverse else r for r in rows]
        ids1, mask1 = pad_batch(rows, self.pad_id)
        ids2, mask2 = pad_batch(second, self.pad_id)
        z1 = encoder(input_ids=ids1.to(device), attention_mask=mask1.to(device))
        z2 = encoder(input_ids=ids2.to(device), attention_mask=mask2.to(device))
        return loss_fn(z1.float(), z2.float()), {}


def training_setup(
    source: str, cfg: Any, settings: Any = None, prepared_dir: str | os.PathLike | None = None
) -> tuple[SentenceEncoder, ToyStep, int]:
    encoder = SentenceEncoder.for_training(source, cfg)
    return encoder, ToyStep(encoder.tokenizer.pad_token_id or 0, settings.reverse), cfg.max_seq_len
'''

TOY_SETTINGS = '''"""The toy framework's settings (``frameworks.toyfw``), torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from focalcse.core.settings import _check_train_layers


@dataclass(frozen=True)
class ToySettings:
    reverse: bool = True  # the second view: the sentence's tokens in reverse order
    train: dict[str, Any] = field(default_factory=dict)
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_train_layers("frameworks.toyfw", self.train, self.backbones)

    def report_notes(self) -> list[str]:
        order = "reversed" if self.reverse else "unchanged"
        return [f"Toy framework: the second view is the sentence with its tokens {order} (toy note)."]
'''


def apply_framework_recipe(repo: Path) -> None:
    package = repo / "src/focalcse/core/frameworks/toyfw"
    package.mkdir()
    (package / "__init__.py").write_text(TOY_PACKAGE, encoding="utf-8")
    (repo / "src/focalcse/core/frameworks/settings/toyfw.py").write_text(TOY_SETTINGS, encoding="utf-8")
    toy_set = {
        "sweep": {"frameworks": ["simcse", "toyfw"], "seeds": [1]},
        "frameworks": {"toyfw": {"reverse": True}},  # its settings: DVC tracks them as its items' params
        "ablation": {"temperatures": [], "ms": []},
        "tracking": {"experiment": "toyfw"},
    }
    (repo / "params" / "toyfw.yaml").write_text(yaml.safe_dump(toy_set), encoding="utf-8")


def test_framework_recipe_on_a_copy(tmp_path: Path, data_mirror: Path, tiny_backbone: Path) -> None:
    repo = make_tiny_project(tmp_path / "repo", data_mirror, tiny_backbone)
    env = project_env(repo, PYTHONPATH=str(repo / "src"), **NO_TRACKING)  # the stages import the copy's code
    default_params = (repo / "params.yaml").read_bytes()
    apply_framework_recipe(repo)
    # exactly the files the recipe names (docs/extending.md), nothing else
    assert changed_files(repo) == {
        "src/focalcse/core/frameworks/toyfw/",
        "src/focalcse/core/frameworks/settings/toyfw.py",
        "params/toyfw.yaml",
    }
    run([sys.executable, "-m", "focalcse.cli", "params", "use", "toyfw"], repo, env)
    here = repo / "sets" / "toyfw"
    run(["dvc", "repro"], here, env, timeout=1500)
    for loss in ("infonce", "focal_infonce"):
        item = json.loads((here / f"metrics/eval/toyfw-tiny-{loss}-seed1.json").read_text())
        assert np.isfinite(item["avg"]) and (here / f"models/toyfw/tiny/{loss}/seed1").is_dir()
    report = (here / "reports/report.md").read_text()
    assert "## Frameworks besides SimCSE: Toy framework" in report
    assert "the second view is the sentence with its tokens reversed (toy note)" in report
    assert "Toy framework + Focal-InfoNCE" in report  # its rows in Table 3
    # no ablation points: the report's (empty) ablation folder stays in git through a DVC-ignored .gitkeep
    assert [p.name for p in (here / "metrics/ablation").iterdir()] == [".gitkeep"]
    untracked = git_status(repo, "--untracked-files=all", "sets/toyfw/metrics")
    assert "?? sets/toyfw/metrics/ablation/.gitkeep" in untracked, untracked  # git would commit it
    # the set ran apart: the checkout's own params and outputs are untouched
    assert (repo / "params.yaml").read_bytes() == default_params
    assert not any((repo / d).exists() for d in ("metrics", "models", "reports"))
