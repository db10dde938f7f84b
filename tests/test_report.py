"""The report: its params sections, its pure helpers, and every number of ``report.md`` / ``index.html``
checked against the metrics files, from synthetic metrics (fast) and from a tiny ``dvc repro`` (slow).

The checks read the metrics JSONs themselves (means and stds are recomputed from the per-run files),
parse the numbers out of the Markdown tables, and require the HTML page to show the same tables and to
need no network (every image a base64 PNG, no http(s) reference).
"""

from __future__ import annotations

import base64
import json
import math
import re
import types
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

from focalcse.config import ConfigError, Params, load_params
from focalcse.core import losses as loss_registry
from focalcse.core.losses import loss_spec, register_module
from focalcse.data import tasks as task_registry
from focalcse.eval.hard_negatives import hardest_negatives
from focalcse.eval.stats import holm
from focalcse.layout import Layout, result_files, run_name
from focalcse.paramsets import load_any
from focalcse.report import (
    PUBLISHED,
    SECTIONS,
    build_report,
    figures,
    labels,
    load_report_data,
    sections,
    tables,
)
from focalcse.report.data import AblationPoint, ReportData, merge_items
from focalcse.report.figures import is_hard_negative, logit_vertex, rescaled_logit
from focalcse.report.published import PublishedError, parse_published, published_rows
from focalcse.report.recipe import recipe
from focalcse.report.render import Doc, Table, to_markdown
from focalcse.results import read_result
from focalcse.steps import significance as significance_step

REPO = Path(__file__).resolve().parents[1]
# the paper's seven tasks (the published rows' columns), independent of the task registry
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
NUM = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def column_keys() -> dict[str, str]:
    """Column label -> score key, from the task registry."""
    return {**{t.display: name for name, t in task_registry.TASKS.items()}, "Avg.": "avg"}


def label(loss: str) -> str:
    return loss_spec(loss).label


# ---------------------------------------------------------------- params sections
def _params_with(tmp_path: Path, **sections: dict) -> Path:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for name, values in sections.items():
        raw[name] = {**(raw.get(name) or {}), **values}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_real_params_files_have_the_ablation_and_report_sections() -> None:
    for name in ("params.yaml", "params/paper.yaml"):
        p = load_any(REPO / name)
        assert p.ablation.loss == "focal_infonce" and p.ablation.seed in p.sweep.seeds
        assert p.ablation_backbone == p.sweep.backbones[0]
        for kind in ("tau", "m"):  # the lists name only the trained values; the default is reused
            default = p.ablation_default(kind)
            assert default not in p.ablation_values(kind) and default in p.ablation_points(kind)
        assert p.report.hard_negatives >= 1 and 0 <= p.report.hard_negative_max_gold <= 5
    paper = load_any(REPO / "params/paper.yaml")
    assert paper.ablation_points("tau") == (0.03, 0.05, 0.07, 0.1)  # the paper's Table 4
    assert paper.ablation_points("m") == (0.1, 0.2, 0.3, 0.4, 0.5)


def test_ablation_items_change_only_their_parameter() -> None:
    p = load_params(REPO / "params.yaml")
    base = p.ablation_base_config()
    assert base == p.train_config(p.ablation_backbone, p.ablation.loss, p.ablation.seed)
    tau = p.ablation_train_config("tau", 0.1)
    assert tau.temperature == 0.1
    assert tau.hyper_value("m") == base.hyper_value("m") == p.train.hyper_value("m")
    m = p.ablation_train_config("m", 0.5)
    assert m.hyper_value("m") == 0.5 and m.temperature == base.temperature
    for cfg in (tau, m):  # as long as the main runs
        assert (cfg.max_steps, cfg.epochs) == (base.max_steps, base.epochs) and cfg.loss == "focal_infonce"
        assert cfg.seed == p.ablation.seed and cfg.lr == base.lr and cfg.batch_size == base.batch_size
    paper = load_any(REPO / "params/paper.yaml")  # bert-base-uncased: tau 0.07 from its override
    m = paper.ablation_train_config("m", 0.2)
    assert (m.temperature, m.hyper_value("m"), m.max_steps, m.batch_size) == (0.07, 0.2, 0, 64)
    with pytest.raises(ConfigError, match="ablation kind"):
        p.ablation_train_config("lr", 1.0)


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("ablation", {"temperatures": [0.03, 0]}, "ablation.temperatures"),
        ("ablation", {"temperatures": [0.05, 0.1]}, "ablation.temperatures"),  # the default: reused
        ("ablation", {"ms": [0.3]}, "ablation.ms"),
        ("ablation", {"seed": 7}, "ablation.seed"),
        ("ablation", {"temperatures": ["hot"]}, "ablation.temperatures"),
        ("ablation", {"ms": [0.1, 0.1]}, "ablation.ms"),
        ("ablation", {"ms": [-0.1]}, "ablation.ms"),
        ("ablation", {"loss": "triplet"}, "ablation.loss"),
        ("ablation", {"max_steps": 24}, "unknown key"),  # ablation runs are as long as the main ones
        ("ablation", {"steps": 3}, "unknown key"),
        ("report", {"hard_negatives": 0}, "report.hard_negatives"),
        ("report", {"hard_negative_max_gold": 6.0}, "report.hard_negative_max_gold"),
        ("report", {"figure1_ms": []}, "report.figure1_ms"),
    ],
)
def test_bad_ablation_and_report_values_are_refused_naming_the_key(
    tmp_path, section, values, message
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_params(_params_with(tmp_path, **{section: values}))


def test_integer_sweep_values_are_read_as_numbers(tmp_path) -> None:
    p = load_params(_params_with(tmp_path, ablation={"temperatures": [1, 0.5]}))
    assert p.ablation.temperatures == (1.0, 0.5) and all(
        isinstance(t, float) for t in p.ablation.temperatures
    )


# ---------------------------------------------------------------- pure helpers
def test_hardest_negatives_are_the_top_cosines_among_low_gold_pairs() -> None:
    cos = [0.90, 0.80, 0.95, 0.70, 0.80, 0.10]
    gold = [4.0, 1.0, 0.5, 0.0, 1.0, 0.2]  # pair 0 is not a negative
    assert hardest_negatives(cos, gold, 1.0, 3) == [2, 1, 4]  # tie 0.80: lower index first
    assert hardest_negatives(cos, gold, 0.4, 10) == [3, 5]
    with pytest.raises(ValueError, match="shape"):
        hardest_negatives(cos, gold[:2], 1.0, 1)


@pytest.mark.parametrize("m", [0.1, 0.3, 0.5])
def test_figure1_rescaled_logit_exceeds_infonce_exactly_past_one_minus_m(m: float) -> None:
    s = np.linspace(0.0005, 0.9995, 1000)  # positive cosines, never exactly 1 - m
    assert np.array_equal(rescaled_logit(s, m) > s, s > 1 - m)


def test_figure1_classifies_negatives_by_the_papers_rule_at_hand_points() -> None:
    # m = 0.3: hard iff s > 0.7. s = -0.5 has s(s+m) = 0.1 > s, but is easy by the paper's rule.
    s = np.array([-0.9, -0.5, -0.15, 0.0, 0.3, 0.69, 0.71, 0.9, 1.0])
    assert is_hard_negative(s, 0.3).tolist() == [False] * 6 + [True] * 3
    assert (rescaled_logit(np.array([-0.5]), 0.3) > -0.5).all()  # the old rule would call it hard
    assert is_hard_negative(0.55, 0.5) and not is_hard_negative(0.45, 0.5)
    assert not is_hard_negative(0.95, 0.0) and is_hard_negative(0.95, 0.1)
    # the vertex of s(s+m): s = -m/2, value -m^2/4; the gradient (2s+m) changes sign there
    for m in (0.1, 0.3, 0.5):
        vs, vy = logit_vertex(m)
        assert (vs, vy) == pytest.approx((-m / 2, -m * m / 4))
        assert rescaled_logit(np.array([vs]), m)[0] == pytest.approx(vy)
        assert 2 * (vs - 1e-3) + m < 0 < 2 * (vs + 1e-3) + m


def test_published_rows_are_labelled_and_their_averages_match_their_tasks() -> None:
    assert {r.backbone for r in PUBLISHED} == {
        "bert-base-uncased",
        "bert-large-uncased",
        "roberta-base",
        "roberta-large",
    }
    for r in PUBLISHED:
        assert r.source and r.label and "avg" in r.scores
        if len(r.scores) > 1:  # full rows: the average is the mean of the 7 tasks, to rounding
            assert set(r.scores) == {*TASKS, "avg"}
            assert np.mean([r.scores[t] for t in TASKS]) == pytest.approx(r.scores["avg"], abs=0.005)
    bert = {(r.loss, r.scores["avg"]) for r in PUBLISHED if r.backbone == "bert-base-uncased"}
    assert ("infonce", 76.25) in bert and ("focal_infonce", 77.32) in bert  # method.md


# ---------------------------------------------------------------- parsing the report
def md_tables(text: str) -> dict[str, list[list[str]]]:
    """``**title**`` -> rows (header first) of every Markdown table; backticks dropped from titles."""
    tables: dict[str, list[list[str]]] = {}
    title = None
    for line in text.splitlines():
        m = re.fullmatch(r"\*\*(.+)\*\*", line)
        if m:
            title = m.group(1).replace("`", "")
            tables[title] = []
        elif line.startswith("|") and title is not None:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if not all(set(c) <= {"-"} for c in cells):
                tables[title].append(cells)
    return tables


class PageParser(HTMLParser):
    """The HTML page's tables (same shape as :func:`md_tables`) and every src/href."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.refs: list[str] = []
        self.images: list[str] = []
        self._title: str | None = None
        self._current = ""
        self._row: list[str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "div" and a.get("class") == "tabletitle":
            self._title = ""
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag) -> None:
        if tag == "div" and self._title is not None:
            self._current, self._title = self._title, None
            self.tables[self._current] = []
        elif tag in ("td", "th") and self._row is not None:
            self._row.append((self._cell or "").strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._current].append(self._row)
            self._row = None

    def handle_data(self, data) -> None:
        if self._title is not None:
            self._title += data
        elif self._cell is not None:
            self._cell += data


def _table(tables: dict[str, list[list[str]]], prefix: str) -> list[list[str]]:
    found = [t for name, t in tables.items() if name.startswith(prefix)]
    assert len(found) == 1, f"{prefix!r}: {list(tables)}"
    return found[0]


def _pm(cell: str) -> tuple[float, float]:
    m = re.fullmatch(rf"({NUM}) ± ({NUM})", cell)
    assert m, cell
    return float(m.group(1)), float(m.group(2))


def _p(cell: str) -> tuple[float, bool]:
    m = re.fullmatch(rf"({NUM})( \*)?", cell)
    assert m, cell
    return float(m.group(1)), bool(m.group(2))


def _json(path: Path):
    """A result document with its ``meta`` / ``subsets`` companions merged back (plain JSON too)."""
    return (
        read_result(path) if isinstance(json.loads(path.read_text()), dict) else json.loads(path.read_text())
    )


def _hard_negatives(metrics: Path, params: Params) -> dict | None:
    """The hard-negative items of the sweep (one file per backbone × loss), merged in sweep order."""
    files = [
        metrics / "hard_negatives" / f"{b}-{loss}.json"
        for b in params.sweep.backbones
        for loss in params.sweep.losses
    ]
    return merge_items([_json(f) for f in files if f.is_file()])


def check_report(report_dir: Path, metrics: Path, params: Params, commit: str) -> dict:
    """Every number of the report against the metrics files; returns the parsed tables."""
    md = (report_dir / "report.md").read_text()
    page = PageParser()
    page.feed((report_dir / "index.html").read_text())
    tables = md_tables(md)
    assert tables == page.tables  # the page shows exactly the Markdown's tables

    # self-contained page: every image inline, nothing fetched from anywhere
    pngs = sorted((report_dir / "figures").glob("*.png"))
    assert len(page.images) == len(pngs) == len(re.findall(r"!\[[^]]*\]\(figures/[^)]+\.png\)", md)) >= 4
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [r for r in page.refs if not r.startswith("data:")]
    assert "http://" not in (report_dir / "index.html").read_text().replace("http://www.w3.org", "")

    sw = params.sweep
    evals = {
        (b, loss, s): _json(metrics / "eval" / f"{run_name(b, loss, s, 'simcse')}.json")
        for b in sw.backbones
        for loss in sw.losses
        for s in sw.seeds
    }
    sig = _json(metrics / "significance.json")
    for b, entry in sig["backbones"].items():
        # ---- Table 2: mean ± std recomputed from the per-run files; p and Δ from significance.json
        t2 = _table(tables, f"Table 2 — {b} ")
        keys = [column_keys()[c] for c in t2[0][2:]]
        assert keys == [t for t in task_registry.TASKS if t in params.eval.tasks] + ["avg"]
        rows = {r[0]: r for r in t2[1:]}
        for loss in sw.losses:
            row = rows[f"{label(loss)}, ours"]
            assert int(row[1]) == len(sw.seeds)
            for key, cell in zip(keys, row[2:]):
                vals = [evals[(b, loss, s)][key] for s in sw.seeds]
                mean, std = _pm(cell)
                assert mean == pytest.approx(np.mean(vals), abs=0.0051)
                assert std == pytest.approx(np.std(vals, ddof=1), abs=0.0051)
        # every loss but the baseline has its own Δ, raw p and Holm p rows against the baseline
        assert set(entry["ttest"]) == set(sw.losses) - {sig["baseline"]}
        assert sum(name.startswith("paired t-test p, raw") for name in rows) == len(entry["ttest"])
        assert sum(name.startswith("p (Holm)") for name in rows) == len(entry["ttest"])
        family = [t for t in task_registry.TASKS if t in params.eval.tasks] + ["avg"]
        assert sig["holm_family"] == family
        names = list(rows)
        for loss, tests in entry["ttest"].items():
            pair = f"{label(loss)} − {label(sig['baseline'])}"
            raw_name = f"paired t-test p, raw ({pair}); * = raw p < {sig['alpha']:g}"
            holm_name = f"p (Holm) ({pair}); * = Holm-adjusted p < {sig['alpha']:g}"
            assert names.index(holm_name) == names.index(raw_name) + 1  # right under the raw p
            p_row, h_row, d_row = rows[raw_name], rows[holm_name], rows[f"Δ mean ({pair})"]
            assert int(p_row[1]) == int(h_row[1]) == int(d_row[1]) == len(entry["paired_seeds"][loss])
            # the family's Holm values are holm() of its raw p-values, in significance.json
            adjusted = holm([tests[k]["p_value"] for k in family])
            assert np.allclose([tests[k]["p_holm"] for k in family], adjusted, equal_nan=True, rtol=1e-12)
            for key, p_cell, h_cell, d_cell in zip(keys, p_row[2:], h_row[2:], d_row[2:]):
                t = tests[key]
                if math.isnan(t["p_value"]):
                    assert p_cell == h_cell == "n/a"
                else:
                    p, star = _p(p_cell)
                    assert p == pytest.approx(t["p_value"], rel=6e-3) and star == t["significant"]
                    p, star = _p(h_cell)
                    assert p == pytest.approx(t["p_holm"], rel=6e-3) and star == t["significant_holm"]
                    assert t["significant_holm"] == (t["p_holm"] < sig["alpha"])
                assert float(d_cell) == pytest.approx(t["mean_diff"], abs=0.0051)
        published = [r for r in PUBLISHED if r.backbone in (b, params.backbone_source(b))]
        shown = [r for name, r in rows.items() if name.startswith(("Published:", "Derived:"))]
        assert len(shown) == len(published)
        for r, row in zip(published, shown):
            assert r.label in row[0] and r.source in row[0]
            assert row[0].startswith("Derived:") == bool(r.derived)
            for key, cell in zip(keys, row[2:]):
                assert cell == (f"{r.scores[key]:.2f}" if key in r.scores else "–")

        # ---- Table 3
        t3 = {r[0]: r for r in _table(tables, f"Table 3 — {b}")[1:]}
        for loss, tests in entry["ttest"].items():
            pair = f"{label(loss)} − {label(sig['baseline'])}"
            d_row = t3[f"Δ mean ({pair})"]
            assert float(d_row[4]) == pytest.approx(tests["STSBenchmark"]["mean_diff"], abs=0.0051)
            assert f"paired t-test p, raw ({pair}); * = raw p < {sig['alpha']:g}" in t3
        for loss in sw.losses:
            row = t3[f"{label(loss)}, ours"]
            for key, cell, tol in zip(
                ("alignment", "uniformity", "STSBenchmark"),
                row[2:],
                ({"rel": 6e-3}, {"rel": 6e-3}, {"abs": 0.0051}),
            ):
                vals = [evals[(b, loss, s)][key] for s in sw.seeds]
                mean, std = _pm(cell)
                assert mean == pytest.approx(np.mean(vals), **tol)
                assert std == pytest.approx(
                    np.std(vals, ddof=1), **{**tol, "abs": 1e-12 if "rel" in tol else 0.0051}
                )

    # ---- Tables 4 and 5: one row per point, ascending; the default point is the main sweep's run
    items = [_json(p) for p in result_files(metrics / "ablation")] if (metrics / "ablation").is_dir() else []
    ab = params.ablation
    main = (params.ablation_backbone, ab.loss, ab.seed)
    main_eval = _json(metrics / "eval" / f"{run_name(*main, 'simcse')}.json")
    main_train = _json(metrics / "train" / f"{run_name(*main, 'simcse')}.json")
    band = [evals[(main[0], main[1], s)]["STSBenchmark"] for s in sw.seeds]
    band_text = f"{min(band):.2f}–{max(band):.2f}, width {max(band) - min(band):.2f}."
    paragraphs = [line for line in md.splitlines() if line.startswith("Seed band")]
    assert len(paragraphs) == 2
    for number, kind, paragraph in ((4, "tau", paragraphs[0]), (5, "m", paragraphs[1])):
        points, default = params.ablation_points(kind), params.ablation_default(kind)
        assert default in points and default not in params.ablation_values(kind)
        rows = _table(tables, f"Table {number} — ")[1:]
        assert len(rows) == len(points)
        scores = []
        for value, row in zip(points, rows):
            assert float(row[0].split()[0]) == pytest.approx(value)
            is_default = math.isclose(value, default)
            assert row[0].endswith(f"(main sweep, seed {ab.seed})") == is_default
            if is_default:  # from the main run's files, never from an ablation file at that value
                want = (main_eval["STSBenchmark"], main_train["stsb_dev_best"], main_train["best_step"])
            else:
                item = next((i for i in items if i["kind"] == kind and math.isclose(i["value"], value)), None)
                if item is None:
                    assert row[1:] == ["not run", "–", "–"]
                    continue
                want = (item["STSBenchmark"], item["stsb_dev_best"], item["best_step"])
            assert float(row[1]) == pytest.approx(want[0], abs=0.0051)
            assert float(row[2]) == pytest.approx(want[1], abs=0.0051)
            assert int(row[3]) == want[2]
            scores.append(want[0])
        # the seed band and the sentence under each table, from the files
        assert paragraph.split(": ", 1)[1].startswith(band_text), paragraph
        sym = {"tau": "τ", "m": "m"}[kind]
        if len(scores) >= 2:
            width = max(scores) - min(scores)
            verdict = "more than" if width > max(band) - min(band) else "not more than"
            assert (
                f"The {sym} sweep spans {width:.2f} ({min(scores):.2f}–{max(scores):.2f}), {verdict} "
                f"the seed band's {max(band) - min(band):.2f}"
            ) in paragraph
            assert ("within seed noise" in paragraph) == (verdict == "not more than")

    # ---- hard negatives
    hn = _hard_negatives(metrics, params)
    if hn is not None:
        for b, entry in hn["backbones"].items():
            t = _table(tables, f"Hardest negatives — {b}")
            losses = [k for k in entry["mean_cos"] if k != "start"]
            assert t[0][4:] == ["cos start"] + [f"cos {label(x)}" for x in losses]
            assert len(t) == 1 + len(entry["pairs"]) + 1 and len(entry["pairs"]) == hn["k"]
            for row, pair in zip(t[1:], entry["pairs"]):
                assert row[1:3] == [pair["sentence1"], pair["sentence2"]]
                assert (
                    float(row[3]) == pytest.approx(pair["gold"], abs=0.0051)
                    and pair["gold"] <= hn["max_gold"]
                )
                for cell, k in zip(row[4:], ["start", *losses]):
                    assert float(cell) == pytest.approx(pair["cos"][k], abs=0.00051)
            for cell, k in zip(t[-1][4:], ["start", *losses]):
                assert float(cell) == pytest.approx(entry["mean_cos"][k], abs=0.00051)
            assert f"all {entry['candidates']} candidate pairs" in t[-1][1]

    # ---- provenance
    assert f"Report built at commit `{commit}`" in md
    experiment = (params.raw.get("tracking") or {}).get("experiment")
    assert f"Parameter set: `{experiment}`" in md
    assert f"seeds: {', '.join(str(s) for s in sw.seeds)}" in md
    for b in sw.backbones:
        assert f"`{b}` ← `{params.backbone_source(b)}`" in md
    walls = [evals[k]["meta"]["wall_time_s"] for k in evals]
    walls += [_json(metrics / "train" / f"{run_name(*k, 'simcse')}.json")["wall_seconds"] for k in evals]
    walls += [
        i["wall_seconds"]
        for i in items
        if any(math.isclose(i["value"], v) for v in params.ablation_values(i["kind"]))
    ]
    walls += [hn["wall_seconds"]] if hn is not None else []
    m = re.search(rf"Wall time: \d+:\d\d:\d\d \(({NUM}) s\)", md)
    assert m and float(m.group(1)) == pytest.approx(sum(walls), abs=0.051)
    if hn is not None:  # one file per backbone x loss item, counted as such
        n = sum(
            (metrics / "hard_negatives" / f"{b}-{loss}.json").is_file()
            for b in sw.backbones
            for loss in sw.losses
        )
        assert f"hard_negatives {hn['wall_seconds']:.1f} s ({n} file{'s' if n != 1 else ''})" in md
    return tables


# ---------------------------------------------------------------- synthetic metrics
def write_synthetic_metrics(project: Path, params: Params) -> None:
    """Under ``project/metrics``: per-run eval/train/curve files for the sweep, a stale run outside it,
    ablation items (one value left out, one stale value, stale files at the default points), the hard
    negatives; significance.json by the real step."""
    root = Layout.at(project).metrics_dir
    rng = np.random.default_rng(0)
    meta = {
        "git_commit": "0123abc",
        "hardware": {"platform": "Linux-test", "cpu_count": 2, "torch_threads": 1, "cuda": False},
        "versions": {"torch": "2.x"},
    }

    def dump(path: Path, data) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))

    sw = params.sweep
    for b in sw.backbones:
        for loss in sw.losses:
            for seed in [*sw.seeds, 99]:  # seed 99: a stale run the report must ignore
                name = run_name(b, loss, seed, "simcse")
                ev = {t: float(70 + 5 * rng.random()) for t in TASKS}
                if b == "mini":
                    ev["STS12"] = 50.0  # identical for both losses: the t-test is undefined (n/a)
                ev["avg"] = float(np.mean([ev[t] for t in TASKS]))
                ev["wmean"] = {"avg": ev["avg"] - 1}
                ev["alignment"] = float(0.2 + 0.05 * rng.random())
                ev["uniformity"] = float(-2.5 + 0.3 * rng.random())
                ev["meta"] = {**meta, "backbone": b, "loss": loss, "seed": seed, "wall_time_s": 10.0 + seed}
                dump(root / "eval" / f"{name}.json", ev)
                train = {
                    "wall_seconds": 100.5 + seed,
                    "meta": meta,
                    "stsb_dev_best": float(80 + rng.random()),
                }
                dump(root / "train" / f"{name}.json", {**train, "best_step": 4 + seed, "steps": 8})
                dump(root / "curves/loss" / f"{name}.json", [{"step": i, "loss": 3 / i} for i in range(1, 9)])
                dump(
                    root / "curves/dev" / f"{name}.json",
                    [{"step": i, "stsb_dev_spearman": 70 + i + rng.random()} for i in (0, 4, 8)],
                )
    significance_step.run(params, Layout.at(project))
    # stale files at the default points (0.05 / 0.3, the main sweep's run) must be ignored
    stale = {"tau": params.ablation_default("tau"), "m": params.ablation_default("m")}
    for kind, values in (
        ("tau", [*params.ablation.temperatures[:-1], stale["tau"]]),
        ("m", [*params.ablation.ms, 0.9, stale["m"]]),
    ):
        for v in values:
            item = {
                "kind": kind,
                "value": v,
                "STSBenchmark": 12.345 if v == stale[kind] else float(75 + rng.random()),
                "stsb_dev_best": float(80 + rng.random()),
                "best_step": 8,
                "wall_seconds": 7.25,
                "meta": meta,
            }
            dump(root / "ablation" / f"{kind}-{v}.json", item)
    pairs = [
        {
            "index": 7,
            "sentence1": "a | pipe and `ticks` *stars*",
            "sentence2": "the <b>html</b> & more",
            "gold": 0.4,
            "cos": {"start": 0.91234, "infonce": 0.5, "focal_infonce": 0.41},
        },
        {
            "index": 3,
            "sentence1": "this is a very unusual request .",
            "sentence2": "i think it 's fine to ask this question .",
            "gold": 1.0,
            "cos": {"start": 0.64, "infonce": 0.55, "focal_infonce": 0.5},
        },
    ]
    for b in sw.backbones:
        for loss in sw.losses:
            dump(
                root / "hard_negatives" / f"{b}-{loss}.json",
                {
                    "split": "STSBenchmark-train",
                    "max_gold": 1.0,
                    "k": 2,
                    "seed": sw.seeds[0],
                    "backbone": b,
                    "loss": loss,
                    "source": params.backbone_source(b),
                    "start_pooler": "cls_before_pooler",
                    "model": f"models/{b}/{loss}/seed{sw.seeds[0]}",
                    "candidates": 1103,
                    "mean_cos": {"start": 0.3, loss: {"infonce": 0.2, "focal_infonce": 0.15}[loss]},
                    "pairs": [
                        {**p, "cos": {"start": p["cos"]["start"], loss: p["cos"][loss]}} for p in pairs
                    ],
                    "wall_seconds": 6.25,
                    "meta": meta,
                },
            )


@pytest.fixture
def synthetic(tmp_path) -> tuple[Params, Path]:
    path = _params_with(
        tmp_path,
        sweep={
            "backbones": ["bert-base-uncased", "mini"],
            "losses": ["infonce", "focal_infonce"],
            "seeds": [1, 2, 3],
        },
        ablation={"temperatures": [0.03, 0.07], "ms": [0.2, 0.4]},
        report={"hard_negatives": 2},
        tracking={"experiment": "synthetic"},
    )
    raw = yaml.safe_load(path.read_text())
    raw["backbone_overrides"] = {"mini": {"source": "example-org/mini"}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    params = load_params(path)
    write_synthetic_metrics(tmp_path, params)
    return params, tmp_path


def test_report_from_synthetic_metrics_shows_exactly_their_numbers(synthetic) -> None:
    params, root = synthetic
    paths = build_report(params, Layout.at(root), commit="cafe123")
    assert paths["markdown"] == root / "reports/report.md" and paths["html"].is_file()
    assert {p.name for p in (root / "reports/figures").glob("*.png")} == {
        "figure1.png",
        "alignment_uniformity.png",
        "ablation.png",
        "curves_bert-base-uncased.png",
        "curves_mini.png",
    }
    tables = check_report(root / "reports", root / "metrics", params, "cafe123")
    # published rows only where they exist (3 for bert-base-uncased), and the p of a tie is n/a
    t2 = _table(tables, "Table 2 — bert-base-uncased ")
    assert sum(r[0].startswith("Published:") for r in t2) == 3
    assert not any(r[0].startswith("Published:") for r in _table(tables, "Table 2 — mini "))
    p_row = next(r for r in _table(tables, "Table 2 — mini ") if r[0].startswith("paired t-test p"))
    assert p_row[2] == "n/a"  # STS12
    # the left-out tau is shown as not run, the stale m = 0.9 is not shown
    assert _table(tables, "Table 4 — ")[-1][1] == "not run"
    assert [r[0] for r in _table(tables, "Table 4 — ")[1:]] == ["0.03", "0.05 (main sweep, seed 1)", "0.07"]
    assert [r[0] for r in _table(tables, "Table 5 — ")[1:]] == ["0.2", "0.3 (main sweep, seed 1)", "0.4"]
    md = (root / "reports/report.md").read_text()
    assert "12.3" not in md  # the stale ablation files at the default points are not shown
    html_text = (root / "reports/index.html").read_text()
    assert "the &lt;b&gt;html&lt;/b&gt; &amp; more" in html_text  # sentences are escaped, not markup
    md = (root / "reports/report.md").read_text()
    assert "seed 99" not in md and "0123abc" in md


def test_a_failed_build_keeps_the_previous_report(synthetic) -> None:
    params, root = synthetic
    build_report(params, Layout.at(root), commit="c1")
    before = (root / "reports/report.md").read_text()
    (root / "metrics/significance.json").write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        build_report(params, Layout.at(root), commit="c2")
    assert (root / "reports/report.md").read_text() == before
    assert [p.name for p in root.iterdir() if p.name.startswith(".reports")] == []


# ---------------------------------------------------------------- sections, registries, published data
HEADINGS = [
    "What produced this report",
    "Departures from the reference recipe",
    "Table 2: STS tasks (Spearman × 100)",
    "How much the seeds can see",
    "Table 3: alignment, uniformity and STS-B",
    "The paper's claims, measured",
    "Tables 4 and 5: τ and m ablations (STS-B test)",
    "Figure 1: how Focal-InfoNCE rescales negatives",
    "Training curves",
    "Qualitative: the hardest negatives of STS-B train (§5.1)",
]


def _headings(md: str) -> list[str]:
    return re.findall(r"^## (.+)$", md, flags=re.M)


def extra_section(ctx: sections.Context) -> None:
    """A section written outside the report package: one heading and one table."""
    ctx.doc.h2("Extra table")
    ctx.doc.table(Table("Extra — runs", ["backbone", "runs"], [["all", str(len(ctx.data.evals))]]))


def test_the_section_list_drives_the_document(synthetic, monkeypatch) -> None:
    params, root = synthetic
    layout = Layout.at(root)
    build_report(params, layout, commit="c1")
    assert _headings((root / "reports/report.md").read_text()) == HEADINGS

    # the headings are those the sections of SECTIONS write, in SECTIONS order (figures not drawn)
    stub = types.SimpleNamespace(
        **{
            name: (lambda *args, **kwargs: root / "stub.png")
            for name in ("alignment_uniformity", "ablation_curves", "figure1", "training_curves")
        }
    )
    with monkeypatch.context() as m:
        m.setattr(sections, "figures", stub)
        data = load_report_data(params, layout)
        expected = []
        for section in SECTIONS:
            ctx = sections.Context(params, data, Doc("t"), root / "unused")
            section(ctx)
            expected += ctx.doc.headings()
    assert expected == HEADINGS

    # any list of sections, in any order: exactly those headings, in that order, no figure drawn
    paths = build_report(
        params, layout, commit="c2", sections=[sections.hard_negatives, extra_section, sections.sts_tables]
    )
    md = (root / "reports/report.md").read_text()
    assert _headings(md) == [HEADINGS[-1], "Extra table", HEADINGS[2]]
    assert set(paths) == {"markdown", "html"} and not (root / "reports/figures").exists()
    page = PageParser()
    page.feed((root / "reports/index.html").read_text())
    assert md_tables(md) == page.tables and md_tables(md)["Extra — runs"] == [
        ["backbone", "runs"],
        ["all", "12"],
    ]

    # adding a table to the report = adding its function to SECTIONS
    monkeypatch.setattr(sections, "SECTIONS", [*SECTIONS[:3], extra_section])
    build_report(params, layout, commit="c3")
    md = (root / "reports/report.md").read_text()
    assert _headings(md) == [*HEADINGS[:2], "Extra table"] and "Extra — runs" in md_tables(md)


def _significance(backbone: str, means: dict[str, dict[str, float]], baseline: str = "infonce") -> dict:
    """A significance.json document: ``means[loss][key]``, std 0.5 over seeds 1-3, every other loss
    tested against ``baseline`` (p 0.01, significant; Holm p 0.08, not significant)."""

    def test(loss: str, key: str) -> dict:
        d = means[loss][key] - means[baseline][key]
        return {"statistic": 5.0, "p_value": 0.01, "mean_diff": d, "ci_low": d - 1, "ci_high": d + 1,
                "n": 3, "alpha": 0.05, "significant": True, "p_holm": 0.08,
                "significant_holm": False}  # fmt: skip

    others = [x for x in means if x != baseline]
    return {
        "baseline": baseline,
        "alpha": 0.05,
        "backbones": {
            backbone: {
                "losses": {
                    x: {k: {"mean": v, "std": 0.5, "n": 3} for k, v in m.items()} for x, m in means.items()
                },
                "seeds": {x: [1, 2, 3] for x in means},
                "paired_seeds": {x: [1, 2, 3] for x in others},
                "ttest": {x: {k: test(x, k) for k in means[x]} for x in others},
            }
        },
    }


@pytest.fixture
def toy_loss(tmp_path, monkeypatch) -> str:
    """A loss known only by the SPEC of a module outside the package (registered for this test only)."""
    (tmp_path / "toy_loss_plugin.py").write_text(
        'SPEC = {"name": "toy", "class": "Toy", "label": "Toy-NCE", "color": "#123456",\n'
        '        "hyper": {"m": {"default": 0.3, "min": 0.0}}}\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loss_registry.loss_names()  # the built-ins first, then a registry this test may change
    monkeypatch.setattr(loss_registry, "_REGISTRY", dict(loss_registry._REGISTRY))
    return register_module("toy_loss_plugin").name


def test_a_loss_registered_only_by_its_spec_shows_its_label_and_colour(tmp_path, toy_loss) -> None:
    assert (labels.loss_label(toy_loss), labels.loss_color(toy_loss)) == ("Toy-NCE", "#123456")
    assert figures.loss_color(toy_loss) == "#123456" and not hasattr(figures, "LOSS_COLORS")
    assert (labels.loss_label("unregistered"), figures.loss_color("unregistered")) == (
        "unregistered",
        "#7f7f7f",
    )
    assert (labels.loss_label("focal_infonce"), labels.loss_color("focal_infonce")) == (
        "Focal-InfoNCE",
        "#d62728",
    )

    params = load_params(
        _params_with(
            tmp_path,
            sweep={"backbones": ["mini"], "losses": ["infonce", toy_loss]},
            ablation={"loss": toy_loss},
        )
    )
    sig = _significance(
        "mini", {"infonce": {"STS12": 70.0, "avg": 71.0}, toy_loss: {"STS12": 72.5, "avg": 71.25}}
    )
    t2 = tables.table2(params, ReportData(significance=sig), "mini")
    rows = {r[0]: r for r in t2.rows}
    assert rows["Toy-NCE, ours"][2:] == ["72.50 ± 0.50", "71.25 ± 0.50"]
    assert rows["Δ mean (Toy-NCE − InfoNCE (SimCSE))"][2:] == ["+2.50", "+0.25"]
    assert rows["paired t-test p, raw (Toy-NCE − InfoNCE (SimCSE)); * = raw p < 0.05"][2:] == ["0.01 *"] * 2
    assert rows["p (Holm) (Toy-NCE − InfoNCE (SimCSE)); * = Holm-adjusted p < 0.05"][2:] == ["0.08"] * 2
    hn = {"max_gold": 1.0, "k": 0, "seed": 1, "backbones": {"mini": {
        "source": "m", "start_pooler": "cls", "candidates": 3, "pairs": [],
        "mean_cos": {"start": 0.3, "infonce": 0.2, toy_loss: 0.1}}}}  # fmt: skip
    assert tables.hard_negatives_table(params, hn, "mini").header[-2:] == [
        "cos InfoNCE (SimCSE)",
        "cos Toy-NCE",
    ]


def test_every_tested_loss_has_its_own_delta_and_p_rows(tmp_path) -> None:
    params = load_params(_params_with(tmp_path, sweep={"losses": ["focal_infonce", "infonce"]}))
    b = params.sweep.backbones[0]
    sig = _significance(
        b,
        {
            "infonce": {"STSBenchmark": 70.0, "avg": 71.0},
            "focal_infonce": {"STSBenchmark": 69.0, "avg": 72.0},
        },
    )
    t3 = tables.table3(params, ReportData(significance=sig), b)
    assert [r[0] for r in t3.rows] == [
        "Focal-InfoNCE, ours",  # sweep order
        "InfoNCE (SimCSE), ours",
        "Δ mean (Focal-InfoNCE − InfoNCE (SimCSE))",
        "paired t-test p, raw (Focal-InfoNCE − InfoNCE (SimCSE)); * = raw p < 0.05",
        "p (Holm) (Focal-InfoNCE − InfoNCE (SimCSE)); * = Holm-adjusted p < 0.05",
    ]  # Table 3's Holm row: STS-B's from Table 2's family, alignment / uniformity their own
    assert t3.rows[2][2:] == ["–", "–", "-1.00"] and t3.row_classes == ["ours", "ours"] + ["test"] * 3
    assert t3.rows[4][2:] == ["–", "–", "0.08"]


def test_the_ablation_is_drawn_and_captioned_as_its_own_loss(tmp_path, monkeypatch, toy_loss) -> None:
    params = load_params(
        _params_with(
            tmp_path,
            sweep={"losses": ["infonce", toy_loss]},
            ablation={"loss": toy_loss, "temperatures": [0.1], "ms": [0.5]},
        )
    )
    item = {"STSBenchmark": 70.0, "stsb_dev_best": 71.0, "best_step": 4}
    data = ReportData(
        significance={},
        ablation={
            "tau": [AblationPoint(0.05, item, 1), AblationPoint(0.1, None)],
            "m": [AblationPoint(0.3, item, 1)],
        },
    )
    drawn: list[str] = []
    monkeypatch.setattr(figures, "loss_color", lambda loss: drawn.append(loss) or labels.loss_color(loss))
    ctx = sections.Context(params, data, Doc("t"), tmp_path / "out")
    sections.ablations(ctx)
    assert drawn == [toy_loss, toy_loss] and ctx.paths["ablation"].is_file()  # one panel per kind
    captions = [t.caption for kind, t in ctx.doc.blocks if kind == "table"]
    assert len(captions) == 2 and all(c.startswith("Toy-NCE on ") for c in captions)
    assert [r[0] for r in ctx.doc.blocks[1][1].rows] == ["0.05 (main sweep, seed 1)", "0.1"]
    assert all("as long as the main runs" in c and "one seed (1) per point" in c for c in captions)
    # no main-sweep evaluations here: no seed band, said so
    assert ctx.doc.blocks[2] == (
        "p",
        "Seed band: not available (fewer than two main-sweep seeds of Toy-NCE on `all-MiniLM-L6-v2` are "
        "evaluated). The τ sweep has 1 scored point(s): no range to compare with seed noise.",
    )


def test_published_rows_come_from_the_data_file_and_may_hold_any_tasks() -> None:
    text = (REPO / "src/focalcse/report/published.yaml").read_text()
    assert parse_published(yaml.safe_load(text)) == PUBLISHED and len(PUBLISHED) == 12
    future = {
        "backbone": "b",
        "loss": "infonce",
        "label": "l",
        "source": "s",
        "scores": {"STS99": 1, "avg": 2.5},
    }
    assert parse_published({"rows": [future]})[0].scores == {"STS99": 1.0, "avg": 2.5}
    for bad in (
        {k: v for k, v in future.items() if k != "source"},
        {**future, "extra": 1},
        {**future, "paper_baseline": "yes"},
        {**future, "derived": {"avg": "2 + 0.4 (sum)"}},  # 2.4, not 2.5
        {**future, "derived": {"avg": "two and a half"}},
        {**future, "derived": {"STS13": "2.5"}},  # not one of its scores
        {**future, "label": ""},
        {**future, "scores": {}},
        {**future, "scores": {"avg": "77"}},
        {**future, "scores": {"avg": True}},
        {**future, "scores": {"avg": float("nan")}},
    ):
        with pytest.raises(PublishedError, match=r"rows\[0\]"):
            parse_published({"rows": [bad]})
    with pytest.raises(PublishedError, match="rows"):
        parse_published([future])
    bert = published_rows("google-bert/bert-base-uncased")
    assert [r.scores["avg"] for r in bert] == [76.25, 75.68, 77.32]
    assert published_rows("mini", "example-org/mini") == [] and published_rows("x", "FacebookAI/roberta-base")


# the abstract's gains of Focal-InfoNCE over the paper's own SimCSE runs (method.md), by backbone
ABSTRACT_GAINS = {
    "bert-base-uncased": 1.64,
    "bert-large-uncased": 0.82,
    "roberta-base": 1.51,
    "roberta-large": 0.75,
}


def _published_doc() -> dict:
    return yaml.safe_load((REPO / "src/focalcse/report/published.yaml").read_text())


def test_derived_rows_equal_their_stated_arithmetic_and_the_papers_gains() -> None:
    raw = _published_doc()
    derived = [r for r in raw["rows"] if "derived" in r]
    assert {r["backbone"] for r in derived} == {"bert-large-uncased", "roberta-base", "roberta-large"}
    for r in derived:
        for key, text in r["derived"].items():
            m = re.match(r"^\s*(\d+\.\d+)\s*[−-]\s*(\d+\.\d+)\s*\(", text)  # "a − b (why)"
            assert m, text
            a, b = float(m.group(1)), float(m.group(2))
            assert r["scores"][key] == pytest.approx(a - b, abs=1e-9)
            # a is the same backbone's Focal-InfoNCE average, b the abstract's gain for it
            focal = next(
                x for x in raw["rows"] if x["backbone"] == r["backbone"] and x["loss"] == "focal_infonce"
            )
            assert (a, b) == (focal["scores"]["avg"], ABSTRACT_GAINS[r["backbone"]])
    # one paper baseline per backbone: Focal-InfoNCE's average minus the abstract's gain
    for backbone, gain in ABSTRACT_GAINS.items():
        rows = [x for x in raw["rows"] if x["backbone"] == backbone]
        (own,) = [x for x in rows if x.get("paper_baseline")]
        (focal,) = [x for x in rows if x["loss"] == "focal_infonce"]
        assert own["loss"] == "infonce" and "SimCSE paper" not in own["source"]
        assert own["scores"]["avg"] == pytest.approx(focal["scores"]["avg"] - gain, abs=1e-9)
    assert {x["scores"]["avg"] for x in raw["rows"] if x.get("paper_baseline")} == {
        75.68,
        77.90,
        76.07,
        77.99,
    }
    # labels and sources (method.md): the large models' Focal averages come from the README's model list
    large = [x for x in raw["rows"] if x["loss"] == "focal_infonce" and "large" in x["backbone"]]
    assert [x["scores"]["avg"] for x in large] == [78.72, 78.74]
    assert all("README's list of models" in x["source"] and "paper" not in x["source"] for x in large)


def test_the_loader_refuses_an_average_that_is_not_the_mean_of_its_tasks() -> None:
    raw = _published_doc()
    parse_published(raw)  # the real file passes
    (i, full) = next((i, r) for i, r in enumerate(raw["rows"]) if len(r["scores"]) == 8)
    mean = float(np.mean([full["scores"][t] for t in raw["average_of"]]))
    for avg, ok in (
        (round(mean, 2), True),
        (mean + 0.0049, True),
        (mean + 0.0051, False),
        (mean - 0.01, False),
    ):
        bad = {**raw, "rows": [*raw["rows"][:i], {**full, "scores": {**full["scores"], "avg": avg}}]}
        if ok:
            parse_published(bad)
        else:
            with pytest.raises(PublishedError, match=rf"rows\[{i}\]\.scores\.avg = .* mean of its 7 tasks"):
                parse_published(bad)
    # a derived number that is not its arithmetic is refused too, naming the row
    (j, der) = next((j, r) for j, r in enumerate(raw["rows"]) if "derived" in r)
    wrong = {**raw, "rows": [*raw["rows"][:j], {**der, "scores": {"avg": der["scores"]["avg"] + 0.01}}]}
    with pytest.raises(PublishedError, match=rf"rows\[{j}\]\.derived\.avg"):
        parse_published(wrong)


def test_table2_shows_every_published_number_as_the_data_file_has_it(tmp_path) -> None:
    """For every published backbone: render Table 2 to Markdown, parse it back, and compare each
    published / derived row's cells, label, source and arithmetic with the data file."""
    raw = _published_doc()
    backbones = list(dict.fromkeys(r["backbone"] for r in raw["rows"]))
    for b in backbones:
        params = load_params(_params_with(tmp_path, sweep={"backbones": [b]}))
        means = {k: 70.0 for k in [*TASKS, "avg"]}
        sig = _significance(b, {"infonce": means, "focal_infonce": means})
        doc = Doc("t")
        doc.table(tables.table2(params, ReportData(significance=sig), b))
        md = to_markdown(doc, tmp_path)
        t2 = _table(md_tables(md), f"Table 2 — {b} ")
        keys = [column_keys()[c] for c in t2[0][2:]]
        shown = [r for r in t2[1:] if r[0].startswith(("Published:", "Derived:"))]
        rows = [r for r in raw["rows"] if r["backbone"] == b]
        assert len(shown) == len(rows) >= 2
        for r, row in zip(rows, shown):
            assert row[0].startswith("Derived:" if "derived" in r else "Published:")
            assert r["label"] in row[0] and f"[{r['source']}]" in row[0]
            for text in r.get("derived", {}).values():
                assert text in row[0]
            for key, cell in zip(keys, row[2:]):
                assert cell == (f"{r['scores'][key]:.2f}" if key in r["scores"] else "–")
        # the caption says which baseline the published Focal rows compare with, and the gain over it
        caption = re.search(r"^_(Spearman.*)_$", md, flags=re.M).group(1)
        own = next(r for r in rows if r.get("paper_baseline"))
        focal = next(r for r in rows if r["loss"] == "focal_infonce")
        simcse = next(r for r in rows if r["loss"] == "infonce" and not r.get("paper_baseline"))
        gain = focal["scores"]["avg"] - own["scores"]["avg"]
        assert "compare with the Focal-InfoNCE paper's own SimCSE baseline" in caption
        assert f"{focal['scores']['avg']:.2f} − {own['scores']['avg']:.2f} = {gain:+.2f}" in caption
        assert f"{gain:+.2f}" == f"{ABSTRACT_GAINS[b]:+.2f}"
        assert f"against the SimCSE paper's {simcse['scores']['avg']:.2f}" in caption


def _set_stsb(root: Path, path: Path, value: float) -> None:
    data = _json(path)
    data["STSBenchmark"] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("main", "tau_item", "m_items", "tau_verdict", "m_verdict"),
    [
        # band 76.10-76.68 (0.58); tau points 76.50 (0.03) and 76.10 (main): 0.40; m: 75.00 .. 76.10: 1.10
        ((76.10, 76.40, 76.68), 76.50, (75.00, 75.80), "not more than", "more than"),
        # a wide band (2.00) holds both sweeps
        ((75.00, 77.00, 76.00), 76.50, (75.50, 75.80), "not more than", "not more than"),
        # a narrow band (0.05) is exceeded by both
        ((76.00, 76.05, 76.02), 76.50, (75.00, 76.00), "more than", "more than"),
    ],
)
def test_the_seed_band_and_its_verdict_come_from_the_files(
    synthetic, monkeypatch, main, tau_item, m_items, tau_verdict, m_verdict
) -> None:
    params, root = synthetic
    layout = Layout.at(root)
    b, loss = params.ablation_backbone, params.ablation.loss
    for seed, value in zip(params.sweep.seeds, main):
        _set_stsb(root, layout.eval_metrics(b, loss, seed, "simcse"), value)
    significance_step.run(params, layout)
    _set_stsb(root, layout.ablation_metrics("tau", "0.03"), tau_item)
    for v, value in zip(("0.2", "0.4"), m_items):
        _set_stsb(root, layout.ablation_metrics("m", v), value)
    drawn = {}
    real = figures.ablation_curves
    monkeypatch.setattr(
        figures, "ablation_curves", lambda *a, **k: drawn.update(k, series=a[0]) or real(*a, **k)
    )
    build_report(params, layout, commit="c")
    check_report(layout.reports_dir, layout.metrics_dir, params, "c")  # the generic checks, from the files
    md = (layout.reports_dir / "report.md").read_text()
    lo, hi = min(main), max(main)
    band = f"{lo:.2f}–{hi:.2f}, width {hi - lo:.2f}."
    tau = [tau_item, main[0]]  # tau 0.03 and the default point (the main sweep's seed-1 run); 0.07 not run
    m = [m_items[0], main[0], m_items[1]]
    for sym, scores, verdict in (("τ", tau, tau_verdict), ("m", m, m_verdict)):
        w = max(scores) - min(scores)
        sentence = (
            f"The {sym} sweep spans {w:.2f} ({min(scores):.2f}–{max(scores):.2f}), {verdict} the seed "
            f"band's {hi - lo:.2f}: "
        )
        line = next(x for x in md.splitlines() if sentence in x)
        assert line.startswith(
            "Seed band (main sweep, Focal-InfoNCE on `bert-base-uncased`, STS-B test over seeds 1, 2, 3): "
            + band
        )
        assert line.endswith("within seed noise.") == (verdict == "not more than")
    # the figure shades the same band and its y-axis holds the band and every point
    assert drawn["band"] == pytest.approx((lo, hi)) and drawn["default_label"] == "main sweep, seed 1"
    assert [y for _, y in sorted(drawn["series"]["τ"])] == pytest.approx(tau)
    assert [v for v, _ in sorted(drawn["series"]["τ"])] == pytest.approx([0.03, 0.05])
    for pts in drawn["series"].values():
        y0, y1 = figures.y_limits([y for _, y in pts], drawn["band"])
        assert y0 < min(lo, *(y for _, y in pts)) and y1 > max(hi, *(y for _, y in pts))
    assert "the shaded band is the main sweep's min–max over seeds 1, 2, 3" in md


def test_the_ablation_y_axis_is_not_zoomed_past_the_band() -> None:
    assert figures.y_limits([76.40, 76.42], (75.0, 77.0)) == pytest.approx((75.0 - 0.5, 77.0 + 0.5))
    lo, hi = figures.y_limits([70.0, 80.0], None)
    assert lo == pytest.approx(70.0 - 1.5) and hi == pytest.approx(80.0 + 1.5)
    lo, hi = figures.y_limits([76.40, 76.41], None)  # never a range of a few hundredths
    assert hi - lo >= 1.0


def test_departures_are_computed_from_params(tmp_path) -> None:
    cpu = load_params(REPO / "params.yaml")
    r = recipe(cpu)
    text = " ".join(r.departures)
    assert "`all-MiniLM-L6-v2`" in text and "already sentence-tuned" in text
    assert f"{cpu.data.num_sentences:,} sentences" in text and "10^6" in text
    assert f"every {cpu.train.eval_steps} steps (reference 125)" in text
    # the CPU default is fp32, as the paper's recipe; its bf16 overlay departs from it
    assert "autocast" not in text and any("encoder in fp32" in x for x in r.matches)
    from focalcse.paramsets import load_set

    assert "Encoder under bf16 autocast" in " ".join(recipe(load_set(REPO, "cpu-bf16")).departures)
    assert any("fp32" in x and "cross-entropy" in x for x in r.matches)
    assert any("gradient clipping to global norm 1.0" in x for x in r.matches)
    # the same report on other params says other things: nothing here is the CPU default hard-coded
    other = load_params(
        _params_with(
            tmp_path,
            data={"num_sentences": 1_000_000},
            train={"eval_steps": 125, "precision": "fp32", "max_grad_norm": 0.0, "batch_size": 32},
            eval={"precision": "fp32"},
        )
    )
    r2 = recipe(other)
    text2 = " ".join(r2.departures)
    assert "sentences sampled" not in text2 and "STS-B dev every" not in text2 and "autocast" not in text2
    assert "Gradient clipping to global norm 0.0" in text2 and "batch 32, lr 3e-05" in text2
    assert "Evaluation encodes" not in text2
    assert any("every 125 steps" in x for x in r2.matches) and any("encoder in fp32" in x for x in r2.matches)
    paper = recipe(load_any(REPO / "params/paper.yaml"))  # the paper grid: its backbones and recipe
    assert not any("Backbone" in x or "batch" in x or "Corpus" in x for x in paper.departures)


def test_a_new_task_needs_no_change_to_the_report(tmp_path, monkeypatch) -> None:
    """A task added to the registry gets its column (registry order, its display label), and the
    published rows, which lack it, show – there; an average over other tasks than the paper's 7 says
    so in its label, and the published 7-task averages are not put under it."""
    new = task_registry.Task("STS17", "STS-17", {"test": 250}, lambda root, check=True: None)
    monkeypatch.setitem(task_registry.TASKS, "STS17", new)
    assert labels.metric_keys(["STS17", "STS12", "unknown"]) == ["STS12", "STS17", "avg"]
    assert [labels.column_label(k) for k in ("STS17", "STSBenchmark", "avg")] == ["STS-17", "STS-B", "Avg."]
    params = load_params(_params_with(tmp_path, eval={"tasks": ["STS17", "STS12"]}))
    b = "bert-base-uncased"
    means = {"STS12": 70.0, "STS17": 60.0, "STS13": 65.0, "avg": 65.0}  # STS13: not evaluated, not shown
    sig = _significance(b, {"infonce": means, "focal_infonce": means})
    t2 = tables.table2(params, ReportData(significance=sig), b)
    assert t2.header == ["Model", "seeds", "STS12", "STS-17", "Avg. (1 of the paper's 7)"]
    published = [r for r in t2.rows if r[0].startswith("Published:")]
    assert [r[2:] for r in published] == [["68.40", "–", "–"], ["–", "–", "–"], ["68.58", "–", "–"]]


# ---------------------------------------------------------------- a tiny dvc repro
@pytest.fixture(scope="module")
def tiny_run(tiny_repro: Path) -> Path:
    return tiny_repro  # the shared tiny `dvc repro` (conftest); read-only here


def _git_head(dest: Path) -> str:
    import subprocess

    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=dest, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.slow
def test_dvc_repro_builds_a_report_matching_the_tiny_runs_metrics(tiny_run: Path) -> None:
    params = load_params(tiny_run / "params.yaml")
    tables = check_report(tiny_run / "reports", tiny_run / "metrics", params, _git_head(tiny_run))
    for number, kind in ((4, "tau"), (5, "m")):  # every point: the trained values and the default
        assert len(_table(tables, f"Table {number} — ")) == 1 + len(params.ablation_points(kind))
    # a tiny random BERT: no published row beside its runs; the paper's rows only in the reference table
    ours = _table(tables, f"Table 2 — {params.sweep.backbones[0]} ")
    assert not [r for r in ours[1:] if r[0].startswith(("Published:", "Derived:"))]
    assert len(_table(tables, "Published Table 2 rows (reference)")) > 1
    # every ablation item trained what params say, as long as the main run it varies, and kept no model
    ab = params.ablation
    main = _json(
        tiny_run / "metrics/train" / f"{run_name(params.ablation_backbone, ab.loss, ab.seed, 'simcse')}.json"
    )
    items = [_json(p) for p in result_files(tiny_run / "metrics/ablation")]
    for kind in ("tau", "m"):
        mine = sorted((i for i in items if i["kind"] == kind), key=lambda i: i["value"])
        assert [i["value"] for i in mine] == sorted(
            params.ablation_values(kind)
        )  # the default: not retrained
        for item in mine:
            cfg = item["meta"]["train_config"]
            assert cfg == params.ablation_train_config(kind, item["value"]).to_dict()
            assert (
                item["steps"] == main["steps"] and cfg["max_steps"] == params.ablation_base_config().max_steps
            )
            assert cfg["loss"] == ab.loss and cfg["seed"] == ab.seed and item["backbone"] == "tiny"
    assert sorted(p.name for p in (tiny_run / "models/simcse/tiny").iterdir()) == ["focal_infonce", "infonce"]


@pytest.mark.slow
def test_hard_negatives_match_an_independent_cls_computation(tiny_run: Path) -> None:
    """Recompute the [CLS] cosines with plain transformers (not focalcse's encode) and check the
    stage picked the top pairs among STS-B train pairs with gold <= max_gold."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    params = load_params(tiny_run / "params.yaml")
    hn = _hard_negatives(tiny_run / "metrics", params)["backbones"]["tiny"]
    csv = Path(params.data.mirror) / "senteval/downstream/STS/STSBenchmark/sts-train.csv"
    rows = [line.split("\t") for line in csv.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold = [float(r[4]) for r in rows]
    cand = [i for i, g in enumerate(gold) if g <= params.report.hard_negative_max_gold]
    assert hn["candidates"] == len(cand)

    def cls_cos(folder: str, idx: list[int]) -> np.ndarray:
        tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
        out = []
        with torch.inference_mode():
            for i in idx:
                a, b = (tok(" ".join(s.split()), return_tensors="pt") for s in (rows[i][5], rows[i][6]))
                va, vb = model(**a).last_hidden_state[:, 0], model(**b).last_hidden_state[:, 0]
                out.append(F.cosine_similarity(va, vb).item())
        return np.asarray(out)

    start = cls_cos(hn["source"], cand)  # (candidates,)
    chosen = [p["index"] for p in hn["pairs"]]
    assert len(chosen) == params.report.hard_negatives and all(gold[i] <= hn_max(params) for i in chosen)
    assert [p["cos"]["start"] for p in hn["pairs"]] == pytest.approx(
        start[[cand.index(i) for i in chosen]], abs=1e-4
    )
    # the chosen pairs are the top k (up to float noise between batched and one-by-one encoding)
    kth = np.sort(start)[-params.report.hard_negatives]
    assert min(p["cos"]["start"] for p in hn["pairs"]) >= kth - 1e-5
    after = cls_cos(str(tiny_run / hn["models"]["focal_infonce"]), chosen)  # relative to the project
    assert [p["cos"]["focal_infonce"] for p in hn["pairs"]] == pytest.approx(after, abs=1e-4)
    assert [(p["sentence1"], p["sentence2"]) for p in hn["pairs"]] == [
        (" ".join(rows[i][5].split()), " ".join(rows[i][6].split())) for i in chosen
    ]


def hn_max(params: Params) -> float:
    return params.report.hard_negative_max_gold


def test_a_sweep_without_the_papers_backbones_shows_their_published_rows_for_reference(tmp_path) -> None:
    """The CPU default trains all-MiniLM-L6-v2, which has no published rows: the report still shows
    every published and derived row of the paper's backbones, as the data file has them, in a
    reference table of its own (never inside our Table 2)."""
    raw = _published_doc()
    params = load_params(_params_with(tmp_path))  # the CPU default's sweep
    b = params.sweep.backbones[0]
    means = {k: 70.0 for k in [*TASKS, "avg"]}
    data = ReportData(significance=_significance(b, {"infonce": means, "focal_infonce": means}))
    doc = Doc("t")
    doc.table(tables.table2(params, data, b))
    doc.table(sections.published_reference(params, data))
    md = to_markdown(doc, tmp_path)
    ours = _table(md_tables(md), f"Table 2 — {b} ")
    assert not [r for r in ours[1:] if r[0].startswith(("Published:", "Derived:"))]
    ref_table = _table(md_tables(md), "Published Table 2 rows (reference)")
    keys = [column_keys()[c] for c in ref_table[0][2:]]
    shown = ref_table[1:]
    assert len(shown) == len(raw["rows"])
    for r, row in zip(raw["rows"], shown):
        assert row[0].startswith("Derived:" if "derived" in r else "Published:") and row[1] == r["backbone"]
        assert r["label"] in row[0] and f"[{r['source']}]" in row[0]
        for key, cell in zip(keys, row[2:]):
            assert cell == (f"{r['scores'][key]:.2f}" if key in r["scores"] else "–")
    derived = {r["backbone"]: r["scores"]["avg"] for r in raw["rows"] if "derived" in r}
    assert derived == {"bert-large-uncased": 77.90, "roberta-base": 76.07, "roberta-large": 77.99}
    # a sweep of one of the paper's backbones shows that backbone's rows in its Table 2 only
    params = load_params(_params_with(tmp_path, sweep={"backbones": ["bert-base-uncased"]}))
    data = ReportData(
        significance=_significance("bert-base-uncased", {"infonce": means, "focal_infonce": means})
    )
    table = sections.published_reference(params, data)
    assert table is not None and not any(row[1] == "bert-base-uncased" for row in table.rows)


def test_the_report_writes_and_prints_what_produced_the_run(synthetic, monkeypatch) -> None:
    from focalcse.provenance import cpu_info
    from focalcse.report.provenance import RUN_COMMAND_ENV, RUN_STARTED_ENV, run_record

    params, root = synthetic
    monkeypatch.setenv(RUN_COMMAND_ENV, "make reproduce PARAMS=synthetic")
    monkeypatch.setenv(RUN_STARTED_ENV, "1000")
    build_report(params, Layout.at(root), commit="cafe123")
    record = json.loads((root / "reports/provenance.json").read_text())
    assert record["commit"] == "cafe123" and record["param_set"] == "synthetic"
    assert record["command"] == "make reproduce PARAMS=synthetic"
    assert record["cpu_model"] == cpu_info()["cpu_model"] and record["date"][:2] == "20"
    # the synthetic items' metas carry no run_started: none ran in this invocation, so its time is a
    # rerun's, not a full run's
    assert record["wall_seconds"] is None and "a rerun: 0 of " in record["unrecorded"]["wall_seconds"]
    assert record["rerun"]["items_run"] == 0 and record["rerun"]["seconds"] > 1e9 - 1000
    md = (root / "reports/report.md").read_text()
    assert "Command: `make reproduce PARAMS=synthetic`" in md and "Commit: `cafe123`" in md
    # outside `make reproduce`: no command nor wall time, each with its reason
    bare = run_record(params, ReportData(significance={}), "c", env={}, now=2000.0)
    assert bare["command"] is None and bare["wall_seconds"] is None and bare["date"] is None
    assert (
        RUN_STARTED_ENV in bare["unrecorded"]["wall_seconds"]
        and RUN_STARTED_ENV in bare["unrecorded"]["date"]
    )
    # no clock reading outside `make reproduce`: two builds an hour apart write the same record
    assert run_record(params, ReportData(significance={}), "c", env={}, now=5600.0) == bare
    assert run_record(params, ReportData(significance={}), "c", env={RUN_STARTED_ENV: "1500"}, now=2000.0)[
        "wall_seconds"
    ] == pytest.approx(500.0)


def test_a_partial_rerun_keeps_the_full_runs_wall_time(synthetic) -> None:
    """Every item ran in this invocation (its meta's run_started is this run's): a full run, its wall
    time recorded. Some were up to date: the previous full run's record is kept, this one beside it."""
    from focalcse.report.provenance import RUN_STARTED_ENV, run_record

    params, _ = synthetic

    def data(*started: str) -> ReportData:
        trains = {
            ("b", "l", i): {"wall_seconds": 1.0, "meta": {"run_started": s}} for i, s in enumerate(started)
        }
        return ReportData(significance={}, trains=trains)

    env = {RUN_STARTED_ENV: "1000", "FOCALCSE_RUN_COMMAND": "make reproduce"}
    full = run_record(params, data("1000", "1000"), "aaaaaaa", env=env, now=1600.0)
    assert full["wall_seconds"] == pytest.approx(600.0) and "rerun" not in full
    partial = run_record(params, data("1000", "500"), "bbbbbbb", env=env, now=1100.0, previous=full)
    assert partial["wall_seconds"] == pytest.approx(600.0) and partial["commit"] == "aaaaaaa"
    assert partial["date"] == full["date"]
    assert partial["rerun"] == {
        "commit": "bbbbbbb",
        "cpu_model": full["cpu_model"],
        "command": "make reproduce",
        "date": partial["rerun"]["date"],
        "items_run": 1,
        "items": 2,
        "seconds": pytest.approx(100.0),
    }
    # no full run to keep: the wall time is unrecorded, saying how to get one
    alone = run_record(params, data("1000", "500"), "bbbbbbb", env=env, now=1100.0)
    assert alone["wall_seconds"] is None and "REPRO_ARGS=-f" in alone["unrecorded"]["wall_seconds"]
    assert alone["rerun"]["items_run"] == 1 and alone["commit"] == "bbbbbbb"


@pytest.mark.parametrize(
    ("diff", "p_holm", "claim", "lower", "family", "reading"),
    [
        (+0.8, 0.01, "higher", False, "fam", "agrees"),
        (-0.8, 0.01, "higher", False, "fam", "contradicts"),
        (+0.8, 0.20, "higher", False, "fam", "not significant"),
        (+0.8, 0.01, "higher", False, None, "descriptive"),  # in no Holm family: no verdict
        (-0.01, 0.01, "lower", True, "fam", "agrees"),  # uniformity down: the paper's improvement
        (+0.12, 0.008, "lower", True, "fam", "contradicts"),  # uniformity up, significant
        (+0.8, 0.01, "no gain", False, "fam", "contradicts"),
        (-0.8, 0.01, "no gain", False, "fam", "agrees"),
        (+0.8, 0.30, "no gain", False, "fam", "consistent (no significant gain)"),
        (float("nan"), float("nan"), "higher", False, "fam", "descriptive"),
    ],
)
def test_a_claims_reading_is_decided_on_the_holm_p_and_the_claimed_direction(
    diff, p_holm, claim, lower, family, reading
) -> None:
    from focalcse.report.tables import _reading

    test = {"mean_diff": diff, "p_holm": p_holm, "p_value": p_holm / 3}
    assert _reading(test, claim, lower, family, 0.05) == reading
    assert _reading(None, claim, lower, family, 0.05) == "not tested"
