"""The frameworks set end to end, tiny: the tiny default project (tests/conftest.py ``tiny_repro``)
gains ``sweep.frameworks: [promptbert, diffcse]``; ``dvc repro`` trains the generator and the
framework items and leaves every SimCSE item as it was; the saved PromptBERT model re-scores to the
same numbers with ``focalcse evaluate``; significance and the report carry the frameworks."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from focalcse.testing.project import NO_TRACKING, changed_stages, project_env, run

pytestmark = pytest.mark.slow  # two full `dvc repro` runs of the tiny project

FRAMEWORKS = ["promptbert", "diffcse"]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


@pytest.fixture(scope="module")
def fw_project(tiny_repro: Path, tmp_path_factory) -> tuple[Path, str]:
    project = Path(shutil.copytree(tiny_repro, tmp_path_factory.mktemp("fw") / "repo", symlinks=True))
    lock_before = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["sweep"]["frameworks"] = ["simcse", *FRAMEWORKS]
    params["frameworks"]["diffcse"]["pretrain"] = {
        "hidden": 32,
        "layers": 1,
        "heads": 2,
        "steps": 4,
        "batch_size": 16,
    }
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = run(["dvc", "repro"], project, project_env(project, **NO_TRACKING), timeout=1500).stdout
    lock_after = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    simcse = {k: v for k, v in lock_before.items() if k.startswith(("train@simcse-", "evaluate@simcse-"))}
    assert simcse and all(lock_after[k] == v for k, v in simcse.items())  # byte-for-byte the same entries
    return project, out


def test_simcse_items_are_not_rerun(fw_project) -> None:
    _, out = fw_project
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert not {s for s in ran if s.startswith(("train@simcse-", "evaluate@simcse-", "hard_negatives@"))}, ran
    expected = {
        f"{st}@{fw}-tiny-{loss}-{seed}"
        for st in ("train", "evaluate")
        for fw in FRAMEWORKS
        for loss in ("infonce", "focal_infonce")
        for seed in (1, 2)
    }
    assert expected <= ran
    # one generator item per framework: DiffCSE's trains an MLM, PromptBERT's only records that it needs none
    assert {"pretrain_generator@diffcse-tiny", "pretrain_generator@promptbert-tiny"} <= ran


def test_generator_trained_and_recorded(fw_project) -> None:
    project, _ = fw_project
    record = json.loads((project / "models/generators/diffcse/tiny/generator.json").read_text())
    assert record["pretrained"] is True and (project / "models/generators/diffcse/tiny/config.json").is_file()
    none = json.loads((project / "models/generators/promptbert/tiny/generator.json").read_text())
    assert none["pretrained"] is False and none["reason"] == "promptbert needs no generator"
    assert [p.name for p in (project / "models/generators/promptbert/tiny").iterdir()] == ["generator.json"]
    diff = json.loads((project / "models/diffcse/tiny/infonce/seed1/focalcse.json").read_text())
    assert diff["extra"]["framework"]["name"] == "diffcse"
    assert diff["extra"]["framework"]["generator"] == "models/generators/diffcse/tiny"


def test_promptbert_model_rescores_identically(fw_project, tmp_path) -> None:
    project, _ = fw_project
    model = project / "models/promptbert/tiny/focal_infonce/seed1"
    record = json.loads((model / "focalcse.json").read_text())
    assert (
        record["framework"]["name"] == "promptbert" and record["framework"]["eval_denoise"] is False
    )  # official test scoring
    saved = json.loads((project / "metrics/eval/promptbert-tiny-focal_infonce-seed1.json").read_text())
    out = tmp_path / "rescore.json"
    params = yaml.safe_load((project / "params.yaml").read_text())
    run(
        [
            "focalcse",
            "evaluate",
            "--model",
            str(model),
            "--output",
            str(out),
            "--data-dir",
            str(project / "data/sts"),
            "--batch-size",
            str(params["eval"]["batch_size"]),
            "--precision",
            params["eval"]["precision"],
        ],
        project,
        project_env(project),
    )
    again = json.loads(out.read_text())
    assert {k: again[k] for k in [*TASKS, "avg"]} == {k: saved[k] for k in [*TASKS, "avg"]}


def test_significance_and_report_carry_the_frameworks(fw_project) -> None:
    project, _ = fw_project
    summary = json.loads((project / "metrics/summary.json").read_text())
    assert {"infonce", "focal_infonce"} <= set(summary)  # SimCSE's keys as before
    for fw in FRAMEWORKS:
        assert {"avg", "std", "p", "p_holm"} <= set(summary[fw]["focal_infonce"])
    report = (project / "reports/report.md").read_text()
    assert "Table 3" in report and "PromptBERT" in report and "DiffCSE" in report
    for fw in FRAMEWORKS:
        ev = json.loads((project / f"metrics/eval/{fw}-tiny-infonce-seed2.json").read_text())
        assert set(TASKS) <= set(ev) and "alignment" in ev


def test_a_diffcse_change_reruns_only_diffcse_items(fw_project, tmp_path) -> None:
    """Edit-cost probe: a new DiffCSE setting (its settings code, its module and its params) marks
    only DiffCSE's items changed; no SimCSE and no PromptBERT item."""
    project = Path(shutil.copytree(fw_project[0], tmp_path / "repo", symlinks=True))
    env = project_env(project)
    settings = project / "src/focalcse/core/frameworks/settings/diffcse.py"
    settings.write_text(
        settings.read_text().replace(
            "    batchnorm: bool = True\n",
            "    batchnorm: bool = True\n    new_setting: float = 1.0  # an edit-cost probe\n",
        )
    )
    assert "new_setting" in settings.read_text()
    module = project / "src/focalcse/core/frameworks/diffcse/__init__.py"
    module.write_text(module.read_text() + "\n# an edit-cost probe\n")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["frameworks"]["diffcse"]["new_setting"] = 2.0
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    # the report prints every framework's settings (its params include `frameworks`): it is the one other
    changed = changed_stages(run(["dvc", "status"], project, env).stdout) - {"check", "report"}
    print("changed after the DiffCSE edit:", ", ".join(sorted(changed)))  # shown with pytest -s
    assert changed and all("@diffcse-" in s for s in changed), changed
    assert {"pretrain_generator@diffcse-tiny", "train@diffcse-tiny-infonce-1"} <= changed


EDIT_PROBES = {
    # an edit to one framework's module marks only that framework's items
    "promptbert": "src/focalcse/core/frameworks/promptbert/step.py",
    # an edit to the training loop marks no evaluate item (an evaluate item's deps hold no training code)
    "training": "src/focalcse/core/training.py",
    # an edit to the report marks the report only
    "report": "src/focalcse/report/tables.py",
}


@pytest.mark.parametrize("probe", sorted(EDIT_PROBES))
def test_edit_cost_probes(fw_project, tmp_path, probe: str) -> None:
    """Edit one module (a comment appended), ``dvc status``, and see which items it marks changed."""
    project = Path(shutil.copytree(fw_project[0], tmp_path / "repo", symlinks=True))
    env = project_env(project)
    assert changed_stages(run(["dvc", "status"], project, env).stdout) <= {"check"}  # clean before
    module = project / EDIT_PROBES[probe]
    module.write_text(module.read_text() + "\n# an edit-cost probe\n")
    changed = changed_stages(run(["dvc", "status"], project, env).stdout) - {"check"}
    print(f"changed after an edit to {EDIT_PROBES[probe]}:", ", ".join(sorted(changed)))  # pytest -s
    assert changed, "an edit to a dep must mark something changed"
    if probe == "promptbert":
        assert all("@promptbert-" in s for s in changed), changed
        assert {"train@promptbert-tiny-infonce-1", "evaluate@promptbert-tiny-infonce-1"} <= changed
    elif probe == "training":
        assert not any(s.startswith("evaluate@") for s in changed), changed
        assert {"train@simcse-tiny-infonce-1", "train@diffcse-tiny-infonce-1"} <= changed
    else:
        assert changed == {"report"}, changed
