"""Every verdict of the report decides on the Holm-adjusted p of its family, never on the raw p;
alignment and uniformity are a Holm family of their own (2 tests per framework × backbone × loss);
and the report says, under each Table 2, which runs had their best STS-B dev checkpoint at their
last step.

The geometry family is checked against scipy's ``ttest_rel`` and Holm written out here, not against
the project's own :func:`focalcse.eval.stats.holm`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from test_report import _params_with, synthetic  # noqa: F401  (synthetic: a fixture)
from test_report_frameworks import _params, write_metrics

from focalcse.eval.significance import significance
from focalcse.layout import Layout
from focalcse.report import build_report, prose, sections
from focalcse.report.data import ReportData
from focalcse.report.render import Doc

TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
ALPHA = 0.05
SIGNIFICANT = re.compile(r"a significant (gain|loss|improvement|worsening)")


def hand_holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment from its definition: ascending p_(j) times (m - j + 1), running
    maximum, capped at 1, returned in the input order."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for j, i in enumerate(order):
        running = max(running, (len(p) - j) * p[i])
        out[i] = min(1.0, running)
    return out


# ---------------------------------------------------------------- the geometry family
def test_alignment_and_uniformity_are_their_own_holm_family_by_hand() -> None:
    rng = np.random.default_rng(11)
    runs = []
    for framework in (None, "diffcse"):
        for loss, shift in (("infonce", 0.0), ("focal_infonce", 1.0)):
            for seed in (1, 2, 3, 4):
                run = {t: float(75 + shift + rng.standard_normal()) for t in TASKS}
                run["avg"] = float(np.mean([run[t] for t in TASKS]))
                run["wmean"] = {"avg": run["avg"]}
                run["alignment"] = float(0.2 - 0.01 * shift + 0.004 * rng.standard_normal())
                run["uniformity"] = float(-2.5 + 0.05 * shift + 0.05 * rng.standard_normal())
                run["meta"] = {"backbone": "b", "loss": loss, "seed": seed}
                if framework:
                    run["meta"]["framework"] = framework
                runs.append(run)
    doc = significance(
        runs,
        ["b"],
        ["infonce", "focal_infonce"],
        [1, 2, 3, 4],
        TASKS,
        "infonce",
        ALPHA,
        ("simcse", "diffcse"),
    )
    assert doc["holm_family_geometry"] == ["alignment", "uniformity"]
    assert list(doc)[:4] == ["baseline", "alpha", "holm_family", "holm_family_geometry"]
    for framework, entry in (
        ("simcse", doc["backbones"]["b"]),
        ("diffcse", doc["frameworks"]["diffcse"]["backbones"]["b"]),
    ):
        tests = entry["ttest"]["focal_infonce"]

        def raw(key: str, framework: str = framework) -> float:
            mine = [r for r in runs if r["meta"].get("framework", "simcse") == framework]
            by = {
                loss: [
                    r[key] for r in sorted(mine, key=lambda r: r["meta"]["seed"]) if r["meta"]["loss"] == loss
                ]
                for loss in ("infonce", "focal_infonce")
            }
            return float(sps.ttest_rel(by["focal_infonce"], by["infonce"]).pvalue)

        geometry = [raw("alignment"), raw("uniformity")]
        for key, want in zip(("alignment", "uniformity"), hand_holm(geometry)):
            assert tests[key]["p_value"] == pytest.approx(raw(key), rel=1e-12)
            assert tests[key]["p_holm"] == pytest.approx(want, rel=1e-12)
            assert tests[key]["significant_holm"] == (want < ALPHA)
        # the STS family is Holm over its 8 tests alone, as before the geometry family existed
        sts = [raw(k) for k in [*TASKS, "avg"]]
        assert [tests[k]["p_holm"] for k in [*TASKS, "avg"]] == pytest.approx(hand_holm(sts), rel=1e-12)


# ---------------------------------------------------------------- verdicts in the report
def _set_every_test(doc: dict, p_value: float, p_holm: float) -> None:
    """Every test of ``doc`` (every framework) gets raw p ``p_value`` and, where it is in a family,
    Holm p ``p_holm``, with the decision flags to match."""
    parts = [doc["backbones"], *[f["backbones"] for f in (doc.get("frameworks") or {}).values()]]
    for backbones in parts:
        for entry in backbones.values():
            for tests in entry["ttest"].values():
                for t in tests.values():
                    t["p_value"], t["significant"] = p_value, p_value < ALPHA
                    if "p_holm" in t:
                        t["p_holm"], t["significant_holm"] = p_holm, p_holm < ALPHA


def _report_with(root: Path, params, p_value: float, p_holm: float, geometry: bool = True) -> str:
    path = Layout.at(root).significance_file
    doc = json.loads(path.read_text())
    _set_every_test(doc, p_value, p_holm)
    if not geometry:  # a significance.json written before the geometry family: alignment in none
        doc.pop("holm_family_geometry")
        for fdoc in [doc, *doc["frameworks"].values()]:
            for entry in fdoc["backbones"].values():
                for tests in entry["ttest"].values():
                    for key in ("alignment", "uniformity"):
                        tests[key].pop("p_holm"), tests[key].pop("significant_holm")
    path.write_text(json.dumps(doc))
    build_report(params, Layout.at(root), commit="cafe123")
    return (root / "reports/report.md").read_text()


@pytest.fixture
def frameworks_run(tmp_path):
    params = _params(tmp_path)
    write_metrics(tmp_path, params)
    return params, tmp_path


def test_raw_p_below_alpha_with_holm_above_is_never_called_significant(frameworks_run) -> None:
    params, root = frameworks_run
    md = _report_with(root, params, p_value=0.01, p_holm=0.08)
    assert not SIGNIFICANT.search(md), SIGNIFICANT.search(md)
    said = [line for line in md.splitlines() if line.startswith("Measured here, ")]
    promptbert = next(line for line in said if "against PromptBERT:" in line)
    diffcse = next(line for line in said if "against DiffCSE:" in line)
    sts = "raw p = 0.01, Holm p = 0.08 over the 8-column STS family, n = 3; not significant at α = 0.05 after Holm)"
    assert promptbert.count(sts) == 2  # the 7-task average and STS-B
    geo = (
        "raw p = 0.01, Holm p = 0.08 over the 2-test alignment/uniformity family, n = 3; "
        "not significant at α = 0.05 after Holm)"
    )
    assert diffcse.count(sts) == 1 and diffcse.count(geo) == 2  # STS-B; alignment and uniformity
    # Table 3 shows the Holm row, unstarred, and says which family each column's Holm p is from
    assert (
        "their own Holm family" in md and "a difference is called significant only when its Holm p < α" in md
    )


def test_holm_below_alpha_is_called_significant_and_names_its_family(frameworks_run) -> None:
    params, root = frameworks_run
    md = _report_with(root, params, p_value=0.001, p_holm=0.004)
    diffcse = next(line for line in md.splitlines() if "against DiffCSE:" in line)
    assert re.search(
        r"alignment [-+]\d\.\d{4} \(raw p = 0\.001, Holm p = 0\.004 over the 2-test alignment/uniformity "
        r"family, n = 3; a significant (improvement|worsening) at α = 0\.05 after Holm\)",
        diffcse,
    )
    assert re.search(
        r"STS-B [-+]\d+\.\d\d \(raw p = 0\.001, Holm p = 0\.004 over the 8-column STS family", diffcse
    )


def test_alignment_in_no_family_is_descriptive_whatever_its_raw_p(frameworks_run) -> None:
    params, root = frameworks_run
    md = _report_with(root, params, p_value=0.01, p_holm=0.08, geometry=False)
    assert not SIGNIFICANT.search(md)
    diffcse = next(line for line in md.splitlines() if "against DiffCSE:" in line)
    assert diffcse.count("raw p = 0.01, n = 3; descriptive: in no Holm family, no significance verdict)") == 2
    assert "Alignment and uniformity are descriptive here" in md


def test_the_framework_sentences_decide_on_holm(tmp_path) -> None:
    """The same check on the unit: the PromptBERT / DiffCSE sentences from a synthetic document."""
    params = _params(tmp_path)
    b = params.sweep.backbones[0]
    test = {"statistic": 5.0, "p_value": 0.012, "mean_diff": 0.84, "ci_low": 0.1, "ci_high": 1.6, "n": 3,
            "alpha": ALPHA, "significant": True, "p_holm": 0.064, "significant_holm": False}  # fmt: skip
    keys = [*TASKS, "avg", "alignment", "uniformity"]
    entry = {
        "losses": {
            x: {k: {"mean": 1.0, "std": 0.1, "n": 3} for k in keys} for x in ("infonce", "focal_infonce")
        },
        "seeds": {x: [1, 2, 3] for x in ("infonce", "focal_infonce")},
        "paired_seeds": {"focal_infonce": [1, 2, 3]},
        "ttest": {"focal_infonce": {k: dict(test) for k in keys}},
    }
    doc = {
        "baseline": "infonce",
        "alpha": ALPHA,
        "holm_family": [*TASKS, "avg"],
        "holm_family_geometry": ["alignment", "uniformity"],
        "backbones": {b: entry},
        "frameworks": {f: {"backbones": {b: entry}} for f in ("promptbert", "diffcse")},
    }
    data = ReportData(significance=doc)
    for text in (prose.framework_claim(params, data, b, f) for f in ("promptbert", "diffcse")):
        assert not SIGNIFICANT.search(text)
        assert (
            "+0.84 (raw p = 0.012, Holm p = 0.064 over the 8-column STS family, n = 3; not significant at α = 0.05 after Holm)"
            in text
        )


# ---------------------------------------------------------------- best checkpoint at the last step
def _trains(best: dict[tuple[str, int], int], steps: int = 8) -> dict:
    return {
        ("b", loss, seed): {"best_step": s, "steps": steps, "stsb_dev_best": 80.0}
        for (loss, seed), s in best.items()
    }


def test_the_last_step_note_lists_runs_whose_best_was_their_last_step(tmp_path) -> None:
    params = _params(tmp_path, backbones=["b"], frameworks=())
    sig = {"baseline": "infonce", "alpha": ALPHA, "backbones": {}}
    runs = [(loss, seed) for loss in params.sweep.losses for seed in params.sweep.seeds]
    note = prose.last_step_note(params, ReportData(sig, trains=_trains({r: 8 for r in runs})), "b")
    assert note == (
        "Every run's best STS-B dev checkpoint was its last step (step 8): the models were still "
        "improving when training stopped, so the comparison is of models that had not converged."
    )
    note = prose.last_step_note(params, ReportData(sig, trains=_trains({r: 4 for r in runs})), "b")
    assert note == "No run's best STS-B dev checkpoint was its last step."
    mixed = {r: 8 if r == ("focal_infonce", 2) else 6 for r in runs}
    note = prose.last_step_note(params, ReportData(sig, trains=_trains(mixed)), "b")
    assert note.startswith(
        "Best STS-B dev checkpoint at the last step (still improving when training stopped): "
        "Focal-InfoNCE seed 2; before the last step: "
    )
    assert prose.last_step_note(params, ReportData(sig), "b") is None  # no training metrics


def test_the_report_says_under_table2_whether_each_best_was_the_last_step(synthetic) -> None:  # noqa: F811
    params, root = synthetic
    layout = Layout.at(root)
    build_report(params, layout, commit="c1")
    md = (root / "reports/report.md").read_text()
    # the synthetic runs: best step 5-7 of 8
    assert md.count("No run's best STS-B dev checkpoint was its last step.") == len(params.sweep.backbones)
    for path in (layout.metrics_dir / "train").glob("*.json"):
        tr = json.loads(path.read_text())
        path.write_text(json.dumps({**tr, "best_step": tr["steps"]}))
    build_report(params, layout, commit="c2")
    md = (root / "reports/report.md").read_text()
    lines = md.splitlines()
    caution = "Every run's best STS-B dev checkpoint was its last step (step 8)"
    assert sum(line.startswith(caution) for line in lines) == len(params.sweep.backbones)
    # right under each Table 2 (its caption, then the caution)
    for b in params.sweep.backbones:
        title = next(i for i, line in enumerate(lines) if line.startswith(f"**Table 2 — {b} "))
        after = next(i for i in range(title, len(lines)) if lines[i].startswith(caution))
        assert all(not lines[i].startswith("**") for i in range(title + 1, after))


def test_framework_tables_say_what_is_not_recorded(frameworks_run) -> None:
    params, root = frameworks_run  # the fake framework train files have a best step but no step count
    build_report(params, Layout.at(root), commit="c1")
    md = (root / "reports/report.md").read_text()
    assert "Best step or step count not recorded: PromptBERT seed 1, PromptBERT seed 2" in md
    doc = Doc("t")
    sections.sts_tables(
        sections.Context(
            params, ReportData(json.loads(Layout.at(root).significance_file.read_text())), doc, root
        )
    )
    assert not any(
        kind == "p" and "best STS-B dev checkpoint" in text for kind, text in doc.blocks
    )  # no trains
