"""End to end: the real DVC graph on a tiny config in a throw-away copy of the repo.

Checks the outputs' content against independent computations (scipy on the per-run metrics files),
that an unchanged second ``dvc repro`` does nothing, that changing one seed reruns only that seed,
and that a failing train stage leaves no model folder behind and a fixed rerun matches a clean run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sts_reference as ref
import yaml
from scipy import stats as sps

from focalcse.results import read_result
from focalcse.testing.project import (
    NO_TRACKING,
    TINY_PARAMS,
    changed_stages,
    make_tiny_project,
    project_env,
    run,
)

pytestmark = pytest.mark.slow

TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


@pytest.fixture(scope="module")
def project(tiny_repro: Path) -> Path:
    return tiny_repro  # the shared tiny `dvc repro` (conftest); read-only here


def _eval(project: Path, loss: str, seed: int) -> dict:
    return read_result(project / f"metrics/eval/simcse-tiny-{loss}-seed{seed}.json")


def test_outputs_have_the_expected_content(project: Path, data_mirror: Path) -> None:
    sample = (project / "data/corpus/train.txt").read_text().splitlines()
    assert len(sample) == 192 and len(set(sample)) == 192
    manifest = json.loads((project / "data/sts/manifest.json").read_text())
    assert (
        manifest["files"]["STS12"]["pairs"] == 3108 and manifest["files"]["STSBenchmark-dev"]["pairs"] == 1500
    )
    for loss in ("infonce", "focal_infonce"):
        for seed in (1, 2):
            record = json.loads((project / f"models/simcse/tiny/{loss}/seed{seed}/focalcse.json").read_text())
            assert record["eval_pooler"] == "cls_before_pooler" and record["train_pooler"] == "cls"
            train = read_result(project / f"metrics/train/simcse-tiny-{loss}-seed{seed}.json")
            assert train["steps"] == 6 and train["meta"]["loss"] == loss and train["meta"]["seed"] == seed
            dev = json.loads((project / f"metrics/curves/dev/simcse-tiny-{loss}-seed{seed}.json").read_text())
            assert [d["step"] for d in dev] == [0, 3, 6]
            assert train["stsb_dev_best"] == max(d["stsb_dev_spearman"] for d in dev if d["step"] > 0)
            ev = _eval(project, loss, seed)
            assert ev["meta"]["pooler"] == "cls_before_pooler" and ev["meta"]["git_commit"] != "unknown"
    # the two losses and the two seeds really trained different models
    assert _eval(project, "infonce", 1)["avg"] != _eval(project, "focal_infonce", 1)["avg"]
    assert _eval(project, "infonce", 1)["avg"] != _eval(project, "infonce", 2)["avg"]


# The evaluator (float32 cosines) against the float64 reference: with the tiny backbone's std-0.5 init
# only a few near-tied cosines flip rank (measured: at most 0.0023 on STS12). A wrong statistic
# (Pearson: 3-5) or task set (avg without SICK-R: 1.3) is far outside this.
SCORE_TOL, AVG_TOL = 0.01, 0.01


@pytest.mark.parametrize(("loss", "seed"), [("infonce", 1), ("focal_infonce", 2)])
def test_reported_scores_match_plain_transformers(
    project: Path, data_mirror: Path, loss: str, seed: int
) -> None:
    """The eval metrics of a model the pipeline trained, recomputed from the saved folder with
    AutoModel's [CLS] and scipy's spearmanr on the mirror's SentEval files (tests/sts_reference.py)."""
    ev = _eval(project, loss, seed)
    downstream = data_mirror / "senteval" / "downstream"
    embed = ref.HfEmbedder(project / f"models/simcse/tiny/{loss}/seed{seed}", "cls_before_pooler")
    expected = {t: ref.task_score(embed, ref.read_task(downstream, t))[0] for t in TASKS}
    assert {t: ev[t] for t in TASKS} == pytest.approx(expected, abs=SCORE_TOL)
    assert ev["avg"] == pytest.approx(np.mean(list(expected.values())), abs=AVG_TOL)
    align, uniform = ref.alignment_uniformity(embed, ref.read_task(downstream, "STSBenchmark-dev")["test"])
    assert ev["alignment"] == pytest.approx(align, rel=1e-4)
    assert ev["uniformity"] == pytest.approx(uniform, rel=1e-4)


def test_significance_matches_scipy_on_the_eval_files(project: Path) -> None:
    sig = json.loads((project / "metrics/significance.json").read_text())["backbones"]["tiny"]
    for key in [*TASKS, "avg"]:
        base = [_eval(project, "infonce", s)[key] for s in (1, 2)]
        treat = [_eval(project, "focal_infonce", s)[key] for s in (1, 2)]
        assert sig["losses"]["infonce"][key]["mean"] == pytest.approx(np.mean(base))
        assert sig["losses"]["focal_infonce"][key]["std"] == pytest.approx(np.std(treat, ddof=1))
        ref = sps.ttest_rel(treat, base)
        assert sig["ttest"]["focal_infonce"][key]["p_value"] == pytest.approx(ref.pvalue, nan_ok=True)
        assert sig["ttest"]["focal_infonce"][key]["mean_diff"] == pytest.approx(
            np.mean(treat) - np.mean(base)
        )
    table = (project / "reports/report.md").read_text()
    m = sig["losses"]["focal_infonce"]["avg"]
    assert f"{m['mean']:.2f} ± {m['std']:.2f}" in table


def test_second_repro_does_nothing_and_one_seed_reruns_alone(tiny_repro: Path, tmp_path: Path) -> None:
    project = Path(shutil.copytree(tiny_repro, tmp_path / "repo", symlinks=True))
    env = project_env(project, **NO_TRACKING)
    out = run(["dvc", "repro"], project, env).stdout
    # only the check stage, which runs on every repro (always_changed) and rewrites nothing here
    assert set(re.findall(r"Running stage '([^']+)'", out)) == {"check"}, out
    # Python writes bytecode caches beside the code it imports; a folder dep (the report's
    # src/focalcse/core/losses) must not count them (.dvcignore)
    cache = project / "src/focalcse/core/losses/__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "__init__.cpython-311.pyc").write_bytes(b"bytecode")
    status = run(["dvc", "status"], project, env).stdout
    assert changed_stages(status) <= {"check"}, status  # check: "always changed" by design, nothing else
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["sweep"]["seeds"] = [1, 3]
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = run(["dvc", "repro"], project, env).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert ran == {
        "check",  # every params edit reruns it; its output is constant, so it reruns nothing itself
        "train@simcse-tiny-infonce-3",
        "train@simcse-tiny-focal_infonce-3",
        "evaluate@simcse-tiny-infonce-3",
        "evaluate@simcse-tiny-focal_infonce-3",
        "significance",
        "report",
        # not hard_negatives: its items depend on the first seed's models only
    }
    sig = json.loads((project / "metrics/significance.json").read_text())["backbones"]["tiny"]
    assert sig["paired_seeds"] == {"focal_infonce": [1, 3]}
    # DVC's one metrics file: short keys per backbone and loss
    summary = json.loads((project / "metrics/summary.json").read_text())
    assert set(summary) == {"infonce", "focal_infonce"}  # one backbone: <loss>.<stat>
    assert summary["focal_infonce"]["p"] == pytest.approx(sig["ttest"]["focal_infonce"]["avg"]["p_value"])
    assert not (project / "models/simcse/tiny/infonce/seed2").exists()  # seed 2 left the sweep: removed
    assert not list(project.glob("metrics/**/*seed2*.json"))

    # dropping a seed: its outputs go, nothing retrains, and DVC is clean afterwards
    params["sweep"]["seeds"] = [1]
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = run(["dvc", "repro"], project, env)
    ran = set(re.findall(r"Running stage '([^']+)'", proc.stdout))
    assert ran == {"check", "significance", "report"}
    assert "removed 16 output(s) of items no longer in the sweep" in proc.stdout + proc.stderr
    assert not (project / "models/simcse/tiny/focal_infonce/seed3").exists()
    assert not list(project.glob("metrics/**/*seed3*.json"))
    status = run(["dvc", "status"], project, env).stdout
    assert changed_stages(status) <= {"check"}, status


def test_failed_train_leaves_no_model_and_fixed_rerun_matches(
    tmp_path, data_mirror, tiny_backbone, project
) -> None:
    dest = make_tiny_project(
        tmp_path / "repo",
        data_mirror,
        tiny_backbone,
        sweep={"backbones": ["tiny"], "losses": ["infonce"], "seeds": [1]},
        ablation={**TINY_PARAMS["ablation"], "loss": "infonce"},  # the ablated loss must be swept
    )
    env = project_env(dest, **NO_TRACKING)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["train"]["lr"] = 1.0e30  # weights overflow after the first step: loss becomes NaN mid-run
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    target = "train@simcse-tiny-infonce-1"  # sample, prepare_sts and train: the stages the failure concerns
    proc = subprocess.run(["dvc", "repro", target], cwd=dest, env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "loss is nan" in (proc.stdout + proc.stderr).lower()
    assert not (dest / "models/simcse/tiny/infonce/seed1").exists()
    assert not (dest / "metrics/train/simcse-tiny-infonce-seed1.json").exists()
    params["train"]["lr"] = yaml.safe_load((project / "params.yaml").read_text())["train"]["lr"]
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["dvc", "repro", "evaluate@simcse-tiny-infonce-1"], dest, env)
    fixed, clean = _eval(dest, "infonce", 1), _eval(project, "infonce", 1)
    for key in [*TASKS, "avg", "alignment", "uniformity"]:
        assert fixed[key] == clean[key]
