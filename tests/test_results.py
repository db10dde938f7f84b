"""Result documents on disk (numbers + ``meta``/``subsets`` companions), DVC's summary metrics, and
the check stage's removal of outputs that left the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from focalcse.config import load_params
from focalcse.eval.significance import significance, summary
from focalcse.eval.stats import holm
from focalcse.layout import Layout, companion_file, result_files
from focalcse.results import read_result, write_result
from focalcse.steps.check import prune_stale

REPO = Path(__file__).resolve().parents[1]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


def test_companions_hold_meta_and_subsets_and_read_back_whole(tmp_path: Path) -> None:
    doc = {"STS12": 70.5, "avg": 71.0, "subsets": {"STS12": {"MSRpar": 50.0}}, "meta": {"git_commit": "abc"}}
    path = tmp_path / "eval" / "x.json"
    write_result(path, doc)
    assert json.loads(path.read_text()) == {"STS12": 70.5, "avg": 71.0}
    assert json.loads(companion_file(path, "meta").read_text()) == {"git_commit": "abc"}
    assert json.loads(companion_file(path, "subsets").read_text()) == {"STS12": {"MSRpar": 50.0}}
    assert read_result(path) == doc
    assert result_files(path.parent) == [path]  # companions are not documents of their own
    write_result(path, {"avg": 1.0, "meta": {"git_commit": "def"}})  # no subsets this time
    assert not companion_file(path, "subsets").exists()  # an old one never passes for this write's
    assert read_result(path) == {"avg": 1.0, "meta": {"git_commit": "def"}}
    with pytest.raises(ValueError, match="companion key 'other'"):
        companion_file(path, "other")


def _run(loss: str, seed: int, rng) -> dict:
    ev = {t: float(70 + 5 * rng.random()) for t in TASKS}
    ev["avg"] = float(np.mean([ev[t] for t in TASKS]))
    ev.update(wmean={"avg": ev["avg"] - 1}, alignment=0.2, uniformity=-2.4)
    ev["meta"] = {"backbone": "b", "loss": loss, "seed": seed}
    return ev


def test_summary_numbers_are_scipy_and_holm_of_the_runs() -> None:
    rng = np.random.default_rng(3)
    runs = [_run(loss, s, rng) for loss in ("infonce", "focal_infonce") for s in (1, 2, 3)]
    doc = significance(runs, ["b"], ["infonce", "focal_infonce"], [1, 2, 3], TASKS, "infonce", 0.05)
    out = summary(doc)  # one backbone: keyed <loss>.<stat>
    assert set(out) == {"infonce", "focal_infonce"}
    base = [r for r in runs if r["meta"]["loss"] == "infonce"]
    treat = [r for r in runs if r["meta"]["loss"] == "focal_infonce"]
    assert set(out["infonce"]) == {"avg", "std"}  # the baseline has no test
    assert out["infonce"]["avg"] == pytest.approx(np.mean([r["avg"] for r in base]))
    assert out["focal_infonce"]["std"] == pytest.approx(np.std([r["avg"] for r in treat], ddof=1))
    ps = [sps.ttest_rel([r[k] for r in treat], [r[k] for r in base]).pvalue for k in [*TASKS, "avg"]]
    assert out["focal_infonce"]["p"] == pytest.approx(ps[-1])
    # Holm over the family (7 tasks + avg), by hand: sorted p_(i) * (m - i), running max, cap 1
    order = np.argsort(ps)
    adjusted, running = np.empty(len(ps)), 0.0
    for i, j in enumerate(order):
        running = max(running, (len(ps) - i) * ps[j])
        adjusted[j] = min(1.0, running)
    assert out["focal_infonce"]["p_holm"] == pytest.approx(adjusted[-1])
    assert holm(ps)[-1] == pytest.approx(adjusted[-1])
    # several backbones: <backbone>.<loss>.<stat>
    other = [{**r, "meta": {**r["meta"], "backbone": "c"}} for r in runs]
    both = significance(
        runs + other, ["b", "c"], ["infonce", "focal_infonce"], [1, 2, 3], TASKS, "infonce", 0.05
    )
    assert summary(both) == {"b": out, "c": out}


def _params(tmp_path: Path, seeds: list[int], temperatures: list[float]):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweep"] = {"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": seeds}
    raw["ablation"] = {**raw["ablation"], "temperatures": temperatures}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_params(path)


def test_prune_removes_only_the_outputs_of_items_outside_the_sweep(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "repo")
    wide = _params(tmp_path, [1, 2], [0.03, 0.1])
    files = []
    for loss in ("infonce", "focal_infonce"):
        for seed in (1, 2):
            item = layout.train_item("tiny", loss, seed, "simcse")
            (item.model_dir / "model.safetensors").parent.mkdir(parents=True)
            (item.model_dir / "model.safetensors").write_text("w")
            work = item.model_dir.parent / f".seed{seed}.work"
            work.mkdir()
            files += [
                item.model_dir,
                work,
                *item.json_outputs,
                layout.eval_metrics("tiny", loss, seed, "simcse"),
            ]
            files += [companion_file(layout.eval_metrics("tiny", loss, seed, "simcse"), "subsets")]
        files += [layout.hard_negatives_file("tiny", loss)]
    for t in ("0.03", "0.1"):
        files += [
            layout.ablation_metrics("tau", t),
            companion_file(layout.ablation_metrics("tau", t), "meta"),
        ]
    for f in files:
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("{}")
    keep_mine = layout.models_dir / "simcse" / "tiny" / "infonce" / "notes.txt"  # not named like an output
    keep_mine.write_text("mine")
    assert prune_stale(wide, layout) == []  # everything belongs to the sweep
    narrow = _params(tmp_path, [1], [0.1])
    removed = set(prune_stale(narrow, layout))
    gone = {f for f in files if "seed2" in str(f) or "tau-0.03" in f.name}
    assert removed == gone and not any(f.exists() for f in gone)
    assert all(f.exists() for f in files if f not in gone) and keep_mine.exists()
