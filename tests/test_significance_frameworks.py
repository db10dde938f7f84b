"""Significance within a framework: every loss is tested against the baseline loss of the SAME
framework and backbone (paired over seeds), Holm per framework × backbone × loss, and SimCSE's part of
``significance.json`` / ``summary.json`` is what the code wrote before frameworks existed.

The checks are independent of the code under test: scipy's ``ttest_rel``, the closed form of the t
distribution with 2 degrees of freedom, Holm written out by hand, and a frozen copy of the
pre-framework implementation (commit cea6406) for the byte comparison. That implementation had no
Holm family for alignment and uniformity; the comparisons drop that family's additions
(:func:`without_geometry_holm`), which leave every other byte as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from focalcse.atomic import write_json
from focalcse.config import load_params
from focalcse.eval.significance import HOLM_SCOPE, significance, summary
from focalcse.eval.stats import holm, paired_ttest, summarize
from focalcse.layout import Layout
from focalcse.results import read_result
from focalcse.steps import significance as significance_step

REPO = Path(__file__).resolve().parents[1]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
FAMILY = [*TASKS, "avg"]
KEYS = [*TASKS, "avg", "alignment", "uniformity"]


def brute_holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment from its definition: sorted p_(i) times (m - i), running max, cap 1."""
    order = np.argsort(p, kind="stable")
    out, running = [0.0] * len(p), 0.0
    for i, j in enumerate(order):
        running = max(running, (len(p) - i) * p[j])
        out[j] = min(1.0, running)
    return out


def without_geometry_holm(doc: dict) -> dict:
    """``doc`` without what the alignment / uniformity Holm family added (the top-level
    ``holm_family_geometry`` and those tests' ``p_holm`` / ``significant_holm``) and without every
    test's power figures (``sd_diff``, ``mdd_80``), which the frozen pre-framework code has none of
    (key order kept)."""
    geometry = doc.get("holm_family_geometry", [])
    out = {k: v for k, v in doc.items() if k != "holm_family_geometry"}

    def strip(backbones: dict) -> dict:
        return {
            b: {
                **e,
                "ttest": {
                    loss: {
                        k: {
                            x: y
                            for x, y in t.items()
                            if (k not in geometry or x not in ("p_holm", "significant_holm"))
                            and x not in ("sd_diff", "mdd_80")
                        }
                        for k, t in tests.items()
                    }
                    for loss, tests in e["ttest"].items()
                },
            }
            for b, e in backbones.items()
        }

    out["backbones"] = strip(doc["backbones"])
    if "frameworks" in doc:
        out["frameworks"] = {
            f: {**fd, "backbones": strip(fd["backbones"])} for f, fd in doc["frameworks"].items()
        }
    return out


# ---------------------------------------------------------------- the pre-framework code, frozen
def _old_significance(runs, backbones, losses, seeds, tasks, baseline, alpha):
    """significance() as of commit cea6406 (before frameworks), condensed, for the byte comparison."""
    keys, family = [*tasks, "avg", "alignment", "uniformity"], [*tasks, "avg"]
    out = {"baseline": baseline, "alpha": alpha, "holm_family": family, "backbones": {}}
    for backbone in backbones:
        grouped: dict = {}
        for r in runs:
            if r["meta"]["backbone"] == backbone and r["meta"]["seed"] in seeds:
                grouped.setdefault(r["meta"]["loss"], {})[int(r["meta"]["seed"])] = r
        summ = {}
        for loss, by_seed in sorted(grouped.items()):
            order = sorted(by_seed)
            summ[loss] = {
                k: summarize([by_seed[s][k] for s in order]).to_dict()
                for k in keys
                if all(k in by_seed[s] for s in by_seed)
            }
            summ[loss]["wmean_avg"] = summarize([by_seed[s]["wmean"]["avg"] for s in order]).to_dict()
        entry = {
            "losses": summ,
            "seeds": {loss: sorted(s) for loss, s in sorted(grouped.items())},
            "paired_seeds": {},
            "ttest": {},
        }
        for loss in losses:
            if loss != baseline and loss in grouped and baseline in grouped:
                paired = sorted(set(grouped[loss]) & set(grouped[baseline]))
                tests = {
                    k: paired_ttest(
                        [grouped[loss][s][k] for s in paired],
                        [grouped[baseline][s][k] for s in paired],
                        alpha,
                    ).to_dict()
                    for k in keys
                }
                for key, p in zip(family, holm([tests[k]["p_value"] for k in family])):
                    tests[key]["p_holm"] = float(p)
                    tests[key]["significant_holm"] = bool(p < alpha)
                entry["paired_seeds"][loss], entry["ttest"][loss] = paired, tests
        out["backbones"][backbone] = entry
    return out


def _old_summary(doc):
    out = {}
    for backbone, entry in doc["backbones"].items():
        rows = {}
        for loss, scores in entry["losses"].items():
            if "avg" not in scores:
                continue
            row = {"avg": scores["avg"]["mean"], "std": scores["avg"]["std"]}
            test = entry["ttest"].get(loss, {}).get("avg")
            if test is not None:
                row["p"], row["p_holm"] = test["p_value"], test["p_holm"]
            rows[loss] = row
        out[backbone] = rows
    return next(iter(out.values())) if len(out) == 1 else out


# ---------------------------------------------------------------- synthetic runs
def make_run(framework: str | None, backbone: str, loss: str, seed: int, rng, shift: float = 0.0) -> dict:
    ev = {t: float(70 + shift + 3 * rng.random()) for t in TASKS}
    ev["avg"] = float(np.mean([ev[t] for t in TASKS]))
    ev["wmean"] = {"avg": ev["avg"] - 1.0}
    ev["alignment"] = float(0.2 + 0.02 * rng.random())
    ev["uniformity"] = float(-2.5 + 0.2 * rng.random())
    meta = {"backbone": backbone, "loss": loss, "seed": seed}
    if framework is not None:
        meta["framework"] = framework
    ev["meta"] = meta
    return ev


SHIFTS = {  # (framework, loss) -> offset: Focal helps SimCSE and DiffCSE, hurts PromptBERT
    ("simcse", "infonce"): 0.0,
    ("simcse", "focal_infonce"): 1.0,
    ("promptbert", "infonce"): 3.0,
    ("promptbert", "focal_infonce"): 2.5,
    ("diffcse", "infonce"): 5.0,
    ("diffcse", "focal_infonce"): 6.0,
}


def sweep_runs(backbones=("b",), seeds=(1, 2, 3), seed=0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        make_run(None if f == "simcse" else f, b, loss, s, rng, SHIFTS[(f, loss)])
        for f in ("simcse", "promptbert", "diffcse")
        for b in backbones
        for loss in ("infonce", "focal_infonce")
        for s in seeds
    ]


def _doc(runs, backbones=("b",), frameworks=("simcse", "promptbert", "diffcse")):
    return significance(
        runs, list(backbones), ["infonce", "focal_infonce"], [1, 2, 3], TASKS, "infonce", 0.05, frameworks
    )


# ---------------------------------------------------------------- tests
def test_paired_test_matches_the_closed_form_of_t_with_two_degrees_of_freedom() -> None:
    """Hand-made: differences 1, 2, 3 -> mean 2, sd 1, t = 2 sqrt(3); with 2 df the two-sided p is
    1 - |t| / sqrt(t^2 + 2) = 1 - sqrt(12 / 14)."""
    base = [70.0, 71.0, 72.0]
    runs = []
    for f in ("simcse", "diffcse"):
        offset = (
            0.0 if f == "simcse" else 10.0
        )  # DiffCSE's baseline is 10 higher: never compared with SimCSE's
        for loss, add in (("infonce", [0, 0, 0]), ("focal_infonce", [1, 2, 3])):
            for seed, (b0, a) in enumerate(zip(base, add), 1):
                score = b0 + offset + a
                run = {k: score for k in KEYS} | {"wmean": {"avg": score}}
                run["meta"] = {"backbone": "b", "loss": loss, "seed": seed, "framework": f}
                runs.append(run)
    doc = _doc(runs, frameworks=("simcse", "diffcse"))
    p = 1 - math.sqrt(12 / 14)
    for entry in (doc["backbones"]["b"], doc["frameworks"]["diffcse"]["backbones"]["b"]):
        t = entry["ttest"]["focal_infonce"]["avg"]
        assert t["statistic"] == pytest.approx(2 * math.sqrt(3), rel=1e-12)
        assert t["p_value"] == pytest.approx(p, rel=1e-9) and t["mean_diff"] == pytest.approx(2.0)
        # every key has the same differences, so the family's 8 p-values are equal: Holm gives 8p
        assert t["p_holm"] == pytest.approx(min(1.0, 8 * p), rel=1e-9) and not t["significant_holm"]
    # the DiffCSE means carry the +10 (its own runs), the tests do not see it
    assert doc["frameworks"]["diffcse"]["backbones"]["b"]["losses"]["infonce"]["avg"][
        "mean"
    ] == pytest.approx(81.0)
    assert doc["backbones"]["b"]["losses"]["infonce"]["avg"]["mean"] == pytest.approx(71.0)


def test_every_framework_is_tested_against_its_own_baseline_with_scipy_and_holm() -> None:
    runs = sweep_runs()
    doc = _doc(runs)
    assert doc["holm_family"] == FAMILY and doc["holm_scope"] == HOLM_SCOPE
    assert list(doc["frameworks"]) == ["promptbert", "diffcse"]

    def scores(f, loss, key):
        mine = [r for r in runs if r["meta"].get("framework", "simcse") == f and r["meta"]["loss"] == loss]
        return [r[key] for r in sorted(mine, key=lambda r: r["meta"]["seed"])]

    for f in ("simcse", "promptbert", "diffcse"):
        entry = doc["backbones"]["b"] if f == "simcse" else doc["frameworks"][f]["backbones"]["b"]
        tests = entry["ttest"]["focal_infonce"]
        assert set(entry["ttest"]) == {"focal_infonce"} and entry["paired_seeds"]["focal_infonce"] == [
            1,
            2,
            3,
        ]
        raw = []
        for key in KEYS:
            want = sps.ttest_rel(scores(f, "focal_infonce", key), scores(f, "infonce", key))
            assert tests[key]["p_value"] == pytest.approx(want.pvalue, rel=1e-10)
            assert tests[key]["statistic"] == pytest.approx(want.statistic, rel=1e-10)
            diff = np.mean(scores(f, "focal_infonce", key)) - np.mean(scores(f, "infonce", key))
            assert tests[key]["mean_diff"] == pytest.approx(diff, rel=1e-10)
            if key in FAMILY:
                raw.append(want.pvalue)
        # Holm over this framework's 8 tests only
        assert [tests[k]["p_holm"] for k in FAMILY] == pytest.approx(brute_holm(raw), rel=1e-10)
        # alignment and uniformity: Holm over those two of this framework only
        geo = [
            sps.ttest_rel(scores(f, "focal_infonce", k), scores(f, "infonce", k)).pvalue
            for k in ("alignment", "uniformity")
        ]
        assert [tests[k]["p_holm"] for k in ("alignment", "uniformity")] == pytest.approx(
            brute_holm(geo), rel=1e-10
        )
        for loss in ("infonce", "focal_infonce"):
            summ = entry["losses"][loss]["avg"]
            assert summ["mean"] == pytest.approx(np.mean(scores(f, loss, "avg")))
            assert summ["std"] == pytest.approx(np.std(scores(f, loss, "avg"), ddof=1))
    # the shifts: Focal's Δ of the average is about +1 for SimCSE and DiffCSE, about -0.5 for PromptBERT
    d = {
        f: (doc["backbones"] if f == "simcse" else doc["frameworks"][f]["backbones"])["b"]["ttest"][
            "focal_infonce"
        ]["avg"]["mean_diff"]
        for f in ("simcse", "promptbert", "diffcse")
    }
    assert d["simcse"] == pytest.approx(1.0, abs=1.5) and d["diffcse"] == pytest.approx(1.0, abs=1.5)
    assert d["promptbert"] == pytest.approx(-0.5, abs=1.5)


def test_adding_frameworks_changes_nothing_of_simcse() -> None:
    runs = sweep_runs(backbones=("b", "c"))
    simcse_runs = [r for r in runs if "framework" not in r["meta"]]
    both = _doc(runs, backbones=("b", "c"))
    alone = _doc(simcse_runs, backbones=("b", "c"), frameworks=("simcse",))
    assert "frameworks" not in alone and "holm_scope" not in alone
    assert {k: v for k, v in both.items() if k not in ("frameworks", "holm_scope")} == alone
    # and a SimCSE-only document is the pre-framework one, byte for byte once written
    old = _old_significance(
        simcse_runs, ["b", "c"], ["infonce", "focal_infonce"], [1, 2, 3], TASKS, "infonce", 0.05
    )
    assert json.dumps(without_geometry_holm(alone)) == json.dumps(old)
    assert json.dumps(summary(alone)) == json.dumps(_old_summary(old))
    # a framework run's meta may name the framework as a dict (the saved settings)
    dict_meta = [
        {**r, "meta": {**r["meta"], "framework": {"name": r["meta"]["framework"], "x": 1}}}
        if "framework" in r["meta"]
        else r
        for r in runs
    ]
    assert _doc(dict_meta, backbones=("b", "c")) == both


def test_summary_keys_of_a_three_framework_sweep() -> None:
    doc = _doc(sweep_runs())
    out = summary(doc)
    assert list(out) == [
        "focal_infonce",
        "infonce",
        "promptbert",
        "diffcse",
    ]  # SimCSE's keys first, as before
    assert set(out["infonce"]) == {"avg", "std"} and set(out["focal_infonce"]) == {
        "avg",
        "std",
        "p",
        "p_holm",
    }
    for f in ("promptbert", "diffcse"):
        entry = doc["frameworks"][f]["backbones"]["b"]
        assert set(out[f]) == {"infonce", "focal_infonce"}
        assert set(out[f]["infonce"]) == {"avg", "std"}
        assert out[f]["focal_infonce"] == {
            "avg": entry["losses"]["focal_infonce"]["avg"]["mean"],
            "std": entry["losses"]["focal_infonce"]["avg"]["std"],
            "p": entry["ttest"]["focal_infonce"]["avg"]["p_value"],
            "p_holm": entry["ttest"]["focal_infonce"]["avg"]["p_holm"],
        }
    # several backbones: <backbone>.<framework>.<loss>.<stat>
    two = summary(_doc(sweep_runs(backbones=("b", "c")), backbones=("b", "c")))
    assert list(two) == ["b", "c"] and list(two["b"]) == ["focal_infonce", "infonce", "promptbert", "diffcse"]
    # a framework without any evaluated run adds no key
    no_diff = [r for r in sweep_runs() if r["meta"].get("framework") != "diffcse"]
    assert list(summary(_doc(no_diff))) == ["focal_infonce", "infonce", "promptbert"]


# ---------------------------------------------------------------- the step, on files
def _params(tmp_path: Path, frameworks: list[str], backbones: list[str] | None = None):
    """``frameworks``: the sweep's frameworks besides SimCSE, the reference (always first)."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweep"] = {**raw["sweep"], "frameworks": ["simcse", *frameworks]}
    if backbones:
        raw["sweep"]["backbones"] = backbones
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_params(path)


def _write(layout: Layout, run: dict, framework: str) -> Path:
    m = run["meta"]
    path = layout.eval_metrics(m["backbone"], m["loss"], m["seed"], framework)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, run)
    return path


def test_the_step_reads_each_frameworks_files_and_tolerates_missing_ones(tmp_path) -> None:
    params = _params(tmp_path, ["promptbert", "diffcse"])
    b = params.sweep.backbones[0]
    layout = Layout.at(tmp_path)
    rng = np.random.default_rng(1)
    for f in ("simcse", "promptbert", "diffcse"):
        for loss in ("infonce", "focal_infonce"):
            for s in (1, 2, 3):
                if f == "diffcse" and loss == "focal_infonce" and s == 3:
                    continue  # a missing item: DiffCSE's test pairs seeds 1 and 2 only
                run = make_run(None, b, loss, s, rng, SHIFTS[(f, loss)])  # meta names no framework
                _write(layout, run, f)
    out = significance_step.run(params, layout)
    diff = out["frameworks"]["diffcse"]["backbones"][b]
    assert diff["seeds"] == {"focal_infonce": [1, 2], "infonce": [1, 2, 3]}
    assert diff["paired_seeds"]["focal_infonce"] == [1, 2]
    for f, seeds in (("diffcse", (1, 2)), ("promptbert", (1, 2, 3))):
        avg = {
            loss: [read_result(layout.eval_metrics(b, loss, s, f))["avg"] for s in seeds]
            for loss in ("infonce", "focal_infonce")
        }
        want = sps.ttest_rel(avg["focal_infonce"], avg["infonce"]).pvalue
        got = out["frameworks"][f]["backbones"][b]["ttest"]["focal_infonce"]["avg"]["p_value"]
        assert got == pytest.approx(want, rel=1e-10)
    written = json.loads(layout.summary_file.read_text())
    assert set(written) == {"infonce", "focal_infonce", "promptbert", "diffcse"}
    assert written["diffcse"]["focal_infonce"]["p"] == diff["ttest"]["focal_infonce"]["avg"]["p_value"]
    # a file whose meta names another framework than its place is refused
    bad = make_run("promptbert", b, "infonce", 1, rng)
    _write(layout, bad, "diffcse")
    with pytest.raises(ValueError, match="names framework 'promptbert'"):
        significance_step.run(params, layout)


def test_simcse_only_outputs_are_byte_identical_to_the_committed_ones(tmp_path) -> None:
    """The committed metrics/eval files of this checkout, run through the step with the committed
    sweep and no framework, give exactly the committed significance.json and summary.json (which the
    pre-framework code wrote); a committed significance.json written before the alignment /
    uniformity Holm family existed is matched byte for byte by the output without that family."""
    committed = json.loads((REPO / "metrics/significance.json").read_text())
    if "frameworks" in committed:
        pytest.skip("the committed significance.json comes from a sweep with frameworks")
    params = load_params(REPO / "params.yaml")
    params = params.with_changes(sweep=dataclasses.replace(params.sweep, frameworks=("simcse",)))
    layout = Layout.at(tmp_path)
    (tmp_path / "metrics").mkdir()
    shutil.copytree(REPO / "metrics/eval", tmp_path / "metrics/eval")
    significance_step.run(params, layout)
    written = layout.significance_file.read_bytes()
    if "holm_family_geometry" not in committed:  # committed before the geometry family: drop it
        doc = without_geometry_holm(json.loads(written))
        written = (json.dumps(doc, indent=2, sort_keys=False, allow_nan=True) + "\n").encode()
    assert written == (REPO / "metrics/significance.json").read_bytes()
    assert layout.summary_file.read_bytes() == (REPO / "metrics/summary.json").read_bytes()
    # and the frozen pre-framework code agrees with it
    runs = significance_step.load_eval_runs(params, layout)
    sw = params.sweep
    sig = params.significance
    old = _old_significance(runs, sw.backbones, sw.losses, sw.seeds, TASKS, sig.baseline, sig.alpha)
    assert without_geometry_holm(json.loads(layout.significance_file.read_text())) == json.loads(
        json.dumps(old)
    )
