"""The report of a sweep with frameworks besides SimCSE (``sweep.frameworks``: PromptBERT, DiffCSE),
built from synthetic metrics files: Table 3 in the paper's layout, the PromptBERT rows of §5.3, Table 2
for every framework, the published DiffCSE / PromptBERT rows, the notes on DiffCSE's generator and
PromptBERT's denoising, and a report that survives missing framework files.

Every number is checked against the per-run files themselves (numpy for means and stds, scipy's
``ttest_rel`` for p, Holm written out by hand), not against ``significance.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as sps
from test_report import PageParser, _p, _pm, _table, md_tables

from focalcse.config import all_frameworks, load_params
from focalcse.layout import Layout
from focalcse.paramsets import load_any
from focalcse.report import build_report, labels, sections, tables
from focalcse.report.data import load_report_data
from focalcse.report.published import (
    PUBLISHED,
    PUBLISHED_FRAMEWORKS,
    PublishedError,
    parse_published,
    published_rows,
)
from focalcse.report.render import Doc
from focalcse.steps import significance as significance_step

REPO = Path(__file__).resolve().parents[1]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
COLUMNS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
NAMES = {"simcse": "SimCSE", "promptbert": "PromptBERT", "diffcse": "DiffCSE"}
# (framework, loss) -> score offset, so that every comparison has its own answer
SHIFTS = {
    ("simcse", "infonce"): 0.0,
    ("simcse", "focal_infonce"): 1.0,
    ("promptbert", "infonce"): 2.0,
    ("promptbert", "focal_infonce"): 1.8,
    ("diffcse", "infonce"): 3.0,
    ("diffcse", "focal_infonce"): 4.0,
}
FRAMEWORK_ORDER = ("simcse", "promptbert", "diffcse")


def _params(tmp_path: Path, backbones=None, frameworks=("promptbert", "diffcse"), diffcse=None):
    """``frameworks``: the sweep's frameworks besides SimCSE, the reference (always first)."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweep"] = {**raw["sweep"], "frameworks": ["simcse", *frameworks]}
    if backbones:
        raw["sweep"]["backbones"] = list(backbones)
    if diffcse is not None:
        raw["frameworks"] = {"diffcse": diffcse}
    raw["tracking"] = {**(raw.get("tracking") or {}), "experiment": "frameworks"}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_params(path)


def _dump(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def write_metrics(root: Path, params, skip=()) -> None:
    """Small fake eval / train files of every (framework, backbone, loss, seed) item but those in
    ``skip``; curves for SimCSE; then the real significance step."""
    layout = Layout.at(root)
    rng = np.random.default_rng(5)
    meta = {
        "git_commit": "0123abc",
        "hardware": {"platform": "Linux-test", "cpu_count": 2, "cuda": False},
        "versions": {},
    }
    for f, b, loss, seed in params.framework_items():
        if (f, b, loss, seed) in skip or (f, None, None, None) in skip:
            continue
        ev = {t: float(70 + SHIFTS[(f, loss)] + 2 * rng.random()) for t in TASKS}
        ev["avg"] = float(np.mean([ev[t] for t in TASKS]))
        ev["wmean"] = {"avg": ev["avg"] - 1}
        ev["alignment"] = float(0.2 + 0.01 * SHIFTS[(f, loss)] + 0.02 * rng.random())
        ev["uniformity"] = float(-2.5 - 0.05 * SHIFTS[(f, loss)] + 0.1 * rng.random())
        ev["meta"] = {**meta, "backbone": b, "loss": loss, "seed": seed, "wall_time_s": 2.0}
        _dump(layout.eval_metrics(b, loss, seed, f), ev)
        _dump(layout.train_metrics(b, loss, seed, f), {"wall_seconds": 10.0, "meta": meta, "best_step": 4})
        if f == "simcse":
            _dump(layout.loss_curve(b, loss, seed, f), [{"step": i, "loss": 1 / i} for i in range(1, 5)])
            _dump(
                layout.dev_curve(b, loss, seed, f), [{"step": i, "stsb_dev_spearman": 70 + i} for i in (0, 4)]
            )
    significance_step.run(params, layout)


def evals(root: Path, params, f: str, b: str, loss: str) -> dict[int, dict]:
    layout = Layout.at(root)
    out = {}
    for s in params.sweep.seeds:
        path = layout.eval_metrics(b, loss, s, f)
        if path.is_file():
            out[s] = json.loads(path.read_text())
    return out


def brute_holm(p: list[float]) -> list[float]:
    order = np.argsort(p, kind="stable")
    out, running = [0.0] * len(p), 0.0
    for i, j in enumerate(order):
        running = max(running, (len(p) - i) * p[j])
        out[j] = min(1.0, running)
    return out


def row_name(f: str, loss: str) -> str:
    return NAMES[f] if loss == "infonce" else f"{NAMES[f]} + Focal-InfoNCE"


STS_FAMILY = [*TASKS, "avg"]
GEOMETRY = ["alignment", "uniformity"]
# Table 3's Holm row: alignment and uniformity are their own family, STS-B sits in Table 2's
TABLE3_FAMILIES = {"alignment": GEOMETRY, "uniformity": GEOMETRY, "STSBenchmark": STS_FAMILY}


def file_p(root: Path, params, f: str, b: str, key: str) -> float:
    """scipy's paired t-test p of Focal-InfoNCE against InfoNCE of framework ``f``, from the files."""
    runs = {loss: evals(root, params, f, b, loss) for loss in ("infonce", "focal_infonce")}
    paired = sorted(set(runs["infonce"]) & set(runs["focal_infonce"]))
    return float(
        sps.ttest_rel(
            [runs["focal_infonce"][s][key] for s in paired], [runs["infonce"][s][key] for s in paired]
        ).pvalue
    )


def check_block(
    rows: dict, root: Path, params, f: str, b: str, keys: list[str], holm: bool | dict[str, list[str]]
) -> None:
    """The ours / Δ / raw p (/ Holm p) rows of framework ``f`` against the files: mean ± std by numpy,
    Δ and p by scipy's ttest_rel of Focal-InfoNCE against the same framework's InfoNCE runs. ``holm``:
    True when ``keys`` are one Holm family, or each key's family (``{key: family keys}``)."""
    runs = {loss: evals(root, params, f, b, loss) for loss in ("infonce", "focal_infonce")}
    for loss, by_seed in runs.items():
        row = rows[f"{row_name(f, loss)}, ours"]
        assert int(row[1]) == len(by_seed)
        for key, cell in zip(keys, row[2:]):
            vals = [by_seed[s][key] for s in sorted(by_seed)]
            mean, std = _pm(cell)
            tol = {"abs": 0.0051} if key not in ("alignment", "uniformity") else {"rel": 6e-3}
            assert mean == pytest.approx(np.mean(vals), **tol)
            assert std == pytest.approx(np.std(vals, ddof=1), rel=6e-3, abs=0.0051)
    pair = f"{row_name(f, 'focal_infonce')} − {row_name(f, 'infonce')}"
    paired = sorted(set(runs["infonce"]) & set(runs["focal_infonce"]))
    d_row = rows[f"Δ mean ({pair})"]
    p_row = rows[f"paired t-test p, raw ({pair}); * = raw p < 0.05"]
    assert int(d_row[1]) == int(p_row[1]) == len(paired)
    ps = {}
    for key, d_cell, p_cell in zip(keys, d_row[2:], p_row[2:]):
        treat = [runs["focal_infonce"][s][key] for s in paired]
        base = [runs["infonce"][s][key] for s in paired]
        want = sps.ttest_rel(treat, base)
        ps[key] = want.pvalue
        tol = {"abs": 0.0051} if key not in ("alignment", "uniformity") else {"rel": 6e-3, "abs": 1e-5}
        assert float(d_cell) == pytest.approx(np.mean(treat) - np.mean(base), **tol)
        p, star = _p(p_cell)
        assert p == pytest.approx(want.pvalue, rel=6e-3) and star == (want.pvalue < 0.05)
    if holm:
        h_row = rows[f"p (Holm) ({pair}); * = Holm-adjusted p < 0.05"]
        families = {k: keys for k in keys} if holm is True else holm  # Table 2: its columns
        for key, cell in zip(keys, h_row[2:]):
            family = families[key]
            want = brute_holm([file_p(root, params, f, b, k) for k in family])[family.index(key)]
            p, star = _p(cell)
            assert p == pytest.approx(want, rel=6e-3) and star == (want < 0.05)


@pytest.fixture
def three(tmp_path):
    params = _params(tmp_path)
    write_metrics(tmp_path, params)
    return params, tmp_path


def _build(params, root: Path) -> tuple[str, dict]:
    build_report(params, Layout.at(root), commit="cafe123")
    md = (root / "reports/report.md").read_text()
    page = PageParser()
    page.feed((root / "reports/index.html").read_text())
    tables = md_tables(md)
    assert tables == page.tables  # the HTML page shows the Markdown's tables
    return md, tables


def test_a_three_framework_report_has_table3_promptbert_rows_every_table2_and_the_references(three) -> None:
    params, root = three
    b = params.sweep.backbones[0]
    md, tables = _build(params, root)
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings == [
        "What produced this report",
        "Departures from the reference recipe",
        "Frameworks besides SimCSE: PromptBERT and DiffCSE",
        "Table 2: STS tasks (Spearman × 100)",
        "How much the seeds can see",
        "Table 3: alignment, uniformity and STS-B",
        "PromptBERT with Focal-InfoNCE (§5.3)",
        "The paper's claims, measured",
        "Tables 4 and 5: τ and m ablations (STS-B test)",
        "Figure 1: how Focal-InfoNCE rescales negatives",
        "Training curves",
        "Qualitative: the hardest negatives of STS-B train (§5.1)",
    ]

    # ---- Table 3: the paper's rows and columns, every framework against its own InfoNCE runs
    t3 = _table(tables, f"Table 3 — {b}")
    assert t3[0] == ["Model", "seeds", "ALGN ↓", "UNIF ↓", "STS-B"]
    names = [r[0] for r in t3[1:]]
    ours = [n for n in names if n.endswith(", ours")]
    assert ours == [
        "SimCSE, ours",
        "SimCSE + Focal-InfoNCE, ours",
        "PromptBERT, ours",
        "PromptBERT + Focal-InfoNCE, ours",
        "DiffCSE, ours",
        "DiffCSE + Focal-InfoNCE, ours",
    ]
    rows = {r[0]: r for r in t3[1:]}
    for f in FRAMEWORK_ORDER:
        check_block(rows, root, params, f, b, ["alignment", "uniformity", "STSBenchmark"], TABLE3_FAMILIES)
    assert sum(n.startswith("p (Holm)") for n in names) == 3  # one Holm row per framework

    # ---- Table 2 of every framework (SimCSE's keeps its title), Holm within the framework
    for f in FRAMEWORK_ORDER:
        title = f"Table 2 — {b} " if f == "simcse" else f"Table 2 — {NAMES[f]} — {b} "
        t2 = _table(tables, title)
        assert t2[0] == ["Model", "seeds", *COLUMNS]
        rows = {r[0]: r for r in t2[1:]}
        if f == "simcse":  # SimCSE's rows keep the loss labels
            rows = {
                k.replace("InfoNCE (SimCSE)", "SimCSE").replace("Focal-InfoNCE", "SimCSE + Focal-InfoNCE"): v
                for k, v in rows.items()
            }
        check_block(rows, root, params, f, b, [*TASKS, "avg"], holm=True)

    # ---- §5.3: PromptBERT InfoNCE against PromptBERT Focal-InfoNCE, 7-task average and STS-B
    pb = _table(tables, f"PromptBERT + Focal-InfoNCE (§5.3) — {b}")
    assert pb[0] == ["Model", "seeds", "Avg.", "STS-B"]
    check_block(
        {r[0]: r for r in pb[1:]},
        root,
        params,
        "promptbert",
        b,
        ["avg", "STSBenchmark"],
        {"avg": STS_FAMILY, "STSBenchmark": STS_FAMILY},
    )
    said = [line for line in md.splitlines() if line.startswith("Measured here, ")]
    sentence = next(line for line in said if "against PromptBERT:" in line)
    # Table 3's paragraph: DiffCSE's STS-B, alignment and uniformity tests in words
    diff_said = next(line for line in said if "against DiffCSE:" in line)
    druns = {loss: evals(root, params, "diffcse", b, loss) for loss in ("infonce", "focal_infonce")}
    d_stsb = np.mean([r["STSBenchmark"] for r in druns["focal_infonce"].values()]) - np.mean(
        [r["STSBenchmark"] for r in druns["infonce"].values()]
    )
    assert f"STS-B {d_stsb:+.2f} (raw p = " in diff_said and "generator: the small MLM" in diff_said
    assert "Table 3 reports that Focal-InfoNCE improves DiffCSE" in diff_said
    runs = {loss: evals(root, params, "promptbert", b, loss) for loss in ("infonce", "focal_infonce")}
    d_avg = np.mean([r["avg"] for r in runs["focal_infonce"].values()]) - np.mean(
        [r["avg"] for r in runs["infonce"].values()]
    )
    p_avg = sps.ttest_rel(
        [runs["focal_infonce"][s]["avg"] for s in (1, 2, 3)], [runs["infonce"][s]["avg"] for s in (1, 2, 3)]
    ).pvalue
    # the verdict is decided on the Holm p of the 8-column family, computed here from the files
    h_avg = brute_holm([file_p(root, params, "promptbert", b, k) for k in STS_FAMILY])[-1]
    verdict = "a significant" if h_avg < 0.05 else "not significant at α = 0.05 after Holm"
    assert (
        f"7-task average {d_avg:+.2f} (raw p = {p_avg:.3g}, Holm p = {h_avg:.3g} over the 8-column STS "
        f"family, n = 3; {verdict}"
    ) in sentence
    assert sentence.startswith(
        f"Measured here, in small CPU runs from `all-MiniLM-L6-v2` ({params.data.num_sentences:,} training "
        "sentences, 3 seeds), not from the paper's BERT-base: PromptBERT + Focal-InfoNCE against PromptBERT: "
    )
    assert "not evidence of no effect" in sentence and "different templates" in sentence

    # ---- published DiffCSE / PromptBERT rows, each with its source (not beside our MiniLM runs)
    ref = _table(tables, "Published PromptBERT and DiffCSE rows (reference)")
    assert ref[0] == ["Row", "framework", "backbone", *COLUMNS]
    file_rows = yaml.safe_load((REPO / "src/focalcse/report/published.yaml").read_text())["framework_rows"]
    assert len(ref) - 1 == len(file_rows) == 2
    for r in file_rows:
        row = next(x for x in ref[1:] if x[1] == NAMES[r["framework"]])
        assert row[0].startswith("Published: ") and r["label"] in row[0] and f"[{r['source']}]" in row[0]
        assert row[2] == r["backbone"] == "bert-base-uncased"
        keys = [*TASKS, "avg"]
        assert row[3:] == [f"{r['scores'][k]:.2f}" for k in keys]
        if "avg_note" in r:
            assert r["avg_note"] in row[0]

    # ---- the notes: DiffCSE's generator (pretrained here) and PromptBERT's evaluation denoising
    assert "the small MLM the `pretrain_generator` stage trained on the training corpus" in md
    assert "not `distilbert-base-uncased`" in md and 'frameworks.diffcse.generator` is ""' in md
    if (
        params.frameworks.promptbert.eval_denoise
    ):  # as the params file sets it: denoised test scores are a variant
        assert "**Variant:** the test sets are scored *with* template denoising" in md
    else:
        assert "The test sets are scored without template denoising" in md and "**Variant:**" not in md
    assert "The dev checkpoint is selected with template denoising" in md
    assert "Frameworks: SimCSE, PromptBERT, DiffCSE (sweep.frameworks)" in md
    assert "SimCSE runs only" in md  # the per-run figures say so
    # the wall time counts every framework's files (3 frameworks x 2 losses x 3 seeds)
    assert "train 180.0 s (18 files); evaluate 36.0 s (18 files)" in md


def test_a_configured_generator_is_named_instead(tmp_path) -> None:
    params = _params(tmp_path, diffcse={"generator": "distilbert-base-uncased"})
    notes = " ".join(sections.framework_notes(params))
    assert "the generator is `distilbert-base-uncased`" in notes and "pretrain_generator" not in notes


def test_missing_framework_files_render_what_exists(tmp_path) -> None:
    params = _params(tmp_path, backbones=["all-MiniLM-L6-v2", "other"])
    skip = {("diffcse", "other", loss, s) for loss in ("infonce", "focal_infonce") for s in (1, 2, 3)}
    skip |= {("promptbert", "all-MiniLM-L6-v2", "focal_infonce", 3)}  # one seed missing
    write_metrics(tmp_path, params, skip=skip)
    md, tables = _build(params, tmp_path)
    # DiffCSE on "other": no Table 2, said so; Table 3 says which framework is missing
    assert not [t for t in tables if t.startswith("Table 2 — DiffCSE — other")]
    assert "Table 2 — DiffCSE — `other`: not available" in md
    t3 = {r[0]: r for r in _table(tables, "Table 3 — other")[1:]}
    assert "DiffCSE, ours" not in t3 and "PromptBERT, ours" in t3
    assert "Not evaluated yet on this backbone (no item in significance.json): DiffCSE." in md
    # PromptBERT with one Focal seed missing: 2 seeds, paired over 2
    rows = {r[0]: r for r in _table(tables, "PromptBERT + Focal-InfoNCE (§5.3) — all-MiniLM-L6-v2")[1:]}
    assert rows["PromptBERT + Focal-InfoNCE, ours"][1] == "2" and rows["PromptBERT, ours"][1] == "3"
    check_block(rows, tmp_path, params, "promptbert", "all-MiniLM-L6-v2", ["avg", "STSBenchmark"], holm=False)
    # summary.json: several backbones, <backbone>.<framework>.<loss>.<stat>; no DiffCSE key for "other"
    summary = json.loads(Layout.at(tmp_path).summary_file.read_text())
    assert list(summary) == ["all-MiniLM-L6-v2", "other"]
    assert list(summary["all-MiniLM-L6-v2"]) == ["focal_infonce", "infonce", "promptbert", "diffcse"]
    assert list(summary["other"]) == ["focal_infonce", "infonce", "promptbert"]


def test_a_significance_file_without_frameworks_still_builds(three) -> None:
    """significance.json written before the frameworks joined the sweep (no ``frameworks`` key): the
    report still builds, says what is missing, and shows SimCSE's tables."""
    params, root = three
    layout = Layout.at(root)
    doc = json.loads(layout.significance_file.read_text())
    doc.pop("frameworks")
    layout.significance_file.write_text(json.dumps(doc))
    md, tables = _build(params, root)
    assert "Table 2 — PromptBERT — `all-MiniLM-L6-v2`: not available" in md
    assert "no evaluated PromptBERT item in metrics/significance.json yet" in md
    names = [r[0] for r in _table(tables, "Table 3 — all-MiniLM-L6-v2")[1:]]
    assert names[:2] == ["SimCSE, ours", "SimCSE + Focal-InfoNCE, ours"]
    assert not any(n.startswith(("PromptBERT", "DiffCSE")) for n in names)


def test_the_report_data_reads_framework_items_by_their_layout_paths(three) -> None:
    params, root = three
    data = load_report_data(params, Layout.at(root))
    assert set(data.framework_evals) == {"promptbert", "diffcse"} and len(data.evals) == 6
    for f in ("promptbert", "diffcse"):
        assert len(data.framework_evals[f]) == len(data.framework_trains[f]) == 6
        key = (params.sweep.backbones[0], "focal_infonce", 2)
        path = Layout.at(root).eval_metrics(*key, f)
        assert path.name == f"{f}-all-MiniLM-L6-v2-focal_infonce-seed2.json"
        assert data.framework_evals[f][key]["avg"] == json.loads(path.read_text())["avg"]
    assert data.significance_of("simcse") is data.significance
    assert (
        data.significance_of("diffcse")["backbones"]
        == data.significance["frameworks"]["diffcse"]["backbones"]
    )


def test_a_simcse_only_report_has_none_of_the_framework_parts(tmp_path) -> None:
    params = _params(tmp_path, frameworks=())
    write_metrics(tmp_path, params)
    md, tables = _build(params, tmp_path)
    assert "PromptBERT" not in md and "DiffCSE" not in md and "Frameworks" not in md
    t3 = _table(tables, "Table 3 — all-MiniLM-L6-v2")
    assert t3[0][2:] == ["Alignment ↓", "Uniformity ↓", "STS-B"]
    assert [r[0] for r in t3[1:3]] == ["InfoNCE (SimCSE), ours", "Focal-InfoNCE, ours"]


# ---------------------------------------------------------------- labels and published rows
def test_every_framework_has_one_display_name() -> None:
    assert [labels.framework_label(f) for f in all_frameworks()] == ["SimCSE", "DiffCSE", "PromptBERT"]
    assert [labels.framework_label(f) for f in ("simcse", "promptbert", "diffcse")] == [
        "SimCSE",
        "PromptBERT",
        "DiffCSE",
    ]
    assert labels.run_label("diffcse", "infonce", "infonce") == "DiffCSE"
    assert labels.run_label("diffcse", "focal_infonce", "infonce") == "DiffCSE + Focal-InfoNCE"
    assert labels.framework_label("unknown") == "unknown"


# What the primary sources show (read there, typed here independently of published.yaml):
# DiffCSE: github.com/voidism/DiffCSE @ f724b2c, diffcse_evaluation.ipynb, STS output of
# voidism/diffcse-bert-base-uncased-sts ("the results on Table 1 in our paper", Avg. 78.49).
# PromptBERT: github.com/kongds/Prompt-BERT @ 690ba6e, README "Results on STS Tasks",
# row royokong/unsup-PromptBERT.
SOURCES = {
    "diffcse": ([72.28, 84.43, 76.47, 83.90, 80.54, 80.59, 71.23, 78.49], "github.com/voidism/DiffCSE"),
    "promptbert": ([71.56, 84.58, 76.98, 84.47, 80.60, 81.60, 69.87, 78.54], "github.com/kongds/Prompt-BERT"),
}


def test_the_framework_rows_are_the_numbers_of_their_sources() -> None:
    assert len(PUBLISHED) == 12 and all(r.framework == "simcse" for r in PUBLISHED)
    assert {r.framework for r in PUBLISHED_FRAMEWORKS} == {"diffcse", "promptbert"}
    for r in PUBLISHED_FRAMEWORKS:
        numbers, url = SOURCES[r.framework]
        assert [r.scores[k] for k in [*TASKS, "avg"]] == numbers
        assert url in r.source and r.backbone == "bert-base-uncased" and r.loss == "infonce"
    (pb,) = [r for r in PUBLISHED_FRAMEWORKS if r.framework == "promptbert"]
    assert abs(np.mean([pb.scores[t] for t in TASKS]) - pb.scores["avg"]) > 0.005 and "78.52" in pb.avg_note
    (dc,) = [r for r in PUBLISHED_FRAMEWORKS if r.framework == "diffcse"]
    assert (
        np.mean([dc.scores[t] for t in TASKS]) == pytest.approx(dc.scores["avg"], abs=0.005)
        and not dc.avg_note
    )
    # SimCSE's lookups see SimCSE's rows only; a framework's its own
    assert [r.framework for r in published_rows("bert-base-uncased")] == ["simcse"] * 3
    assert [r.framework for r in published_rows("google-bert/bert-base-uncased", framework="diffcse")] == [
        "diffcse"
    ]


def test_the_loader_checks_framework_rows() -> None:
    raw = yaml.safe_load((REPO / "src/focalcse/report/published.yaml").read_text())
    assert parse_published(raw, key="framework_rows") == PUBLISHED_FRAMEWORKS
    pb = next(r for r in raw["framework_rows"] if r["framework"] == "promptbert")
    no_note = {k: v for k, v in pb.items() if k != "avg_note"}
    for bad, match in (
        (no_note, r"framework_rows\[0\]\.scores\.avg"),  # its avg is not the mean of its tasks
        ({**pb, "framework": "simcse"}, r"framework_rows\[0\]\.framework"),
        ({**pb, "avg_note": " "}, r"framework_rows\[0\]\.avg_note"),
        ({k: v for k, v in pb.items() if k != "framework"}, r"framework_rows\[0\]"),
    ):
        with pytest.raises(PublishedError, match=match):
            parse_published({**raw, "framework_rows": [bad]}, key="framework_rows")
    dc = next(r for r in raw["framework_rows"] if r["framework"] == "diffcse")
    with pytest.raises(PublishedError, match="drop the note"):  # a note on a consistent row
        parse_published({**raw, "framework_rows": [{**dc, "avg_note": "x"}]}, key="framework_rows")
    with pytest.raises(PublishedError, match=r"rows\[0\]"):  # SimCSE's rows take no framework key
        parse_published({**raw, "rows": [{**raw["rows"][0], "framework": "diffcse"}]})


def test_a_bert_base_sweep_shows_the_framework_rows_beside_its_runs(tmp_path) -> None:
    params = _params(tmp_path, backbones=["bert-base-uncased"])
    write_metrics(tmp_path, params)
    data = load_report_data(params, Layout.at(tmp_path))
    for f in ("promptbert", "diffcse"):
        t2 = tables.table2(params, data, "bert-base-uncased", f)
        published = [r for r in t2.rows if r[0].startswith("Published:")]
        assert len(published) == 1 and SOURCES[f][1] in published[0][0]
        assert [float(x) for x in published[0][2:]] == SOURCES[f][0]
    assert tables.framework_published_reference(params, data) is None  # all shown beside the runs
    doc = Doc("t")
    doc.table(tables.table3(params, data, "bert-base-uncased"))
    assert "no published row is shown" in doc.blocks[0][1].caption


def test_the_frameworks_parameter_set_has_no_ablation_tables(tmp_path) -> None:
    """params/frameworks.yaml trains no τ / m ablation ([] lists): the report says so instead of a
    one-row Table 4 / 5 of the reused main run, and draws no ablation figure."""
    params = load_any(REPO / "params/frameworks.yaml")
    assert params.sweep.frameworks and not params.ablation.temperatures and not params.ablation.ms
    write_metrics(tmp_path, params)
    md, tables = _build(params, tmp_path)
    assert not [t for t in tables if t.startswith(("Table 4", "Table 5"))]
    assert "Table 4 (effect of τ): not run in this parameter set (`ablation.temperatures` is empty)." in md
    assert "Table 5 (effect of m): not run in this parameter set (`ablation.ms` is empty)." in md
    assert "No Table 4 (`ablation.temperatures` is empty" in md
    assert not (tmp_path / "reports/figures/ablation.png").exists()
    assert (
        "Table 3 — all-MiniLM-L6-v2" in tables
        and "PromptBERT + Focal-InfoNCE (§5.3) — all-MiniLM-L6-v2" in tables
    )


def test_direction_words_follow_which_way_is_better_and_decide_on_holm() -> None:
    """Alignment and uniformity improve downwards: a negative Δ significant after Holm is an
    improvement there, a loss for a Spearman score. The verdict is the Holm p's, never the raw p's,
    and a test in no Holm family gets none."""
    from focalcse.report.prose import _direction

    fam = "the 2-test alignment/uniformity family"
    down = {"mean_diff": -0.0069, "p_value": 0.005, "n": 3, "p_holm": 0.0102}
    assert _direction(down, 0.05, fam, lower_is_better=True, digits=4) == (
        "-0.0069 (raw p = 0.005, Holm p = 0.0102 over the 2-test alignment/uniformity family, n = 3; "
        "a significant improvement at α = 0.05 after Holm)"
    )
    assert _direction(down, 0.05, fam).endswith("a significant loss at α = 0.05 after Holm)")
    assert _direction({**down, "mean_diff": 0.0877}, 0.05, fam, lower_is_better=True).endswith(
        "a significant worsening at α = 0.05 after Holm)"
    )
    up = {"mean_diff": 0.84, "p_value": 0.019, "n": 3, "p_holm": 0.064}
    assert _direction(up, 0.05, "the 8-column STS family") == (
        "+0.84 (raw p = 0.019, Holm p = 0.064 over the 8-column STS family, n = 3; "
        "not significant at α = 0.05 after Holm)"
    )
    # in no family (or no p_holm recorded): descriptive, whatever the raw p
    for test, family in ((down, None), ({k: v for k, v in down.items() if k != "p_holm"}, fam)):
        said = _direction(test, 0.05, family, lower_is_better=True)
        assert "significant" not in said.replace("no significance verdict", "") and "descriptive" in said


def test_the_paper_claims_come_from_each_frameworks_settings(three, monkeypatch) -> None:
    """The §5.3 section and the paragraph after Table 3 are what each framework's settings class
    declares (``PAPER_CLAIM``), not names the report knows: without PromptBERT's claim its section
    goes; DiffCSE's claim moved to a section of its own brings its table and paragraph there."""
    from focalcse.core.frameworks.settings.diffcse import DiffCSEConfig
    from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig

    params, root = three
    b = params.sweep.backbones[0]
    monkeypatch.setattr(PromptBERTConfig, "PAPER_CLAIM", None)
    claim = {"where": "section", "heading": "DiffCSE's claim", "table": "DiffCSE claim", "measures": [("STSBenchmark", {}), ("alignment", {"lower_is_better": True, "digits": 4}), ("uniformity", {"lower_is_better": True, "digits": 3})]}  # fmt: skip
    monkeypatch.setattr(DiffCSEConfig, "PAPER_CLAIM", claim)
    md, tables_ = _build(params, root)
    assert "PromptBERT with Focal-InfoNCE (§5.3)" not in md and "against PromptBERT:" not in md
    assert not [t for t in tables_ if t.startswith("PromptBERT + Focal-InfoNCE (§5.3)")]
    section = md.split("## DiffCSE's claim", 1)[1].split("\n## ", 1)[0]
    table = _table(tables_, f"DiffCSE claim — {b}")
    assert table[0][2:] == ["STS-B", "Alignment ↓", "Uniformity ↓"]
    rows = {r[0]: r for r in table[1:]}
    check_block(rows, root, params, "diffcse", b, ["STSBenchmark", "alignment", "uniformity"], holm=False)
    assert section.count("against DiffCSE: STS-B ") == 1  # its paragraph moved under its table
    table3_part = md.split("## Table 3", 1)[1].split("\n## ", 1)[0]
    assert "against DiffCSE:" not in table3_part
