"""The report: everything the paper reports (Tables 2-5, Figure 1, §5.1's hard negatives) plus the
training curves, as ``report.md`` and one self-contained ``index.html`` (PNGs embedded as base64).

Every number shown is read from a pipeline output under ``metrics/`` (significance, per-run evaluation
and training metrics, curves, ablation items, hard negatives), except the published rows of Table 2,
which come from :data:`PUBLISHED` with the source of each row.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.pipeline import METRIC_KEYS, run_name

LOSS_LABELS = {"infonce": "InfoNCE (SimCSE)", "focal_infonce": "Focal-InfoNCE"}
COLUMN_LABELS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "avg": "Avg."}
ABLATION_SYMBOLS = {"tau": "τ", "m": "m"}
MISSING = "–"


# ---------------------------------------------------------------- published numbers
@dataclass(frozen=True)
class PublishedRow:
    """A published Table 2 row (Spearman × 100, SimCSE's "all" setting); ``scores`` may hold only
    ``avg`` where only the average is published."""

    backbone: str  # Hugging Face hub id of the backbone it was trained from
    loss: str
    label: str
    source: str
    scores: dict[str, float]


def _row(*values: float) -> dict[str, float]:
    return dict(zip(METRIC_KEYS, values, strict=True))


# From docs/method.md ("Reported numbers"); each row names where it was published.
PUBLISHED: tuple[PublishedRow, ...] = (
    PublishedRow(
        "bert-base-uncased",
        "infonce",
        "unsup-SimCSE BERT-base",
        "SimCSE paper (Gao et al., 2021)",
        _row(68.40, 82.41, 74.38, 80.91, 78.56, 76.85, 72.23, 76.25),
    ),
    PublishedRow(
        "bert-base-uncased",
        "infonce",
        "unsup-SimCSE BERT-base, Focal-InfoNCE paper's baseline",
        "Focal-InfoNCE paper §4.1 text (average only)",
        {"avg": 75.68},
    ),
    PublishedRow(
        "bert-base-uncased",
        "focal_infonce",
        "Focal-InfoNCE BERT-base",
        "official Focal-InfoNCE README",
        _row(68.58, 83.29, 75.20, 82.54, 79.62, 79.31, 72.72, 77.32),
    ),
    PublishedRow(
        "bert-large-uncased",
        "infonce",
        "unsup-SimCSE BERT-large",
        "SimCSE paper (average only)",
        {"avg": 78.41},
    ),
    PublishedRow(
        "bert-large-uncased",
        "focal_infonce",
        "Focal-InfoNCE BERT-large",
        "Focal-InfoNCE paper (average only)",
        {"avg": 78.72},
    ),
    PublishedRow(
        "roberta-base", "infonce", "unsup-SimCSE RoBERTa-base", "SimCSE paper (average only)", {"avg": 76.57}
    ),
    PublishedRow(
        "roberta-base",
        "focal_infonce",
        "Focal-InfoNCE RoBERTa-base",
        "official Focal-InfoNCE README, earlier version",
        _row(70.68, 82.22, 74.60, 82.60, 81.69, 81.72, 69.52, 77.58),
    ),
    PublishedRow(
        "roberta-large",
        "infonce",
        "unsup-SimCSE RoBERTa-large",
        "SimCSE paper (average only)",
        {"avg": 78.90},
    ),
    PublishedRow(
        "roberta-large",
        "focal_infonce",
        "Focal-InfoNCE RoBERTa-large",
        "Focal-InfoNCE paper (average only)",
        {"avg": 78.74},
    ),
)


def published_rows(*names: str) -> list[PublishedRow]:
    """Published rows for the first of ``names`` (a sweep name, then its source) that has any."""
    for name in names:
        key = name.removeprefix("google-bert/").removeprefix("FacebookAI/")
        rows = [r for r in PUBLISHED if r.backbone == key]
        if rows:
            return rows
    return []


# ---------------------------------------------------------------- inputs
@dataclass(frozen=True)
class ReportInputs:
    """Where the pipeline's outputs are."""

    significance: Path
    eval_dir: Path
    train_dir: Path
    curves_dir: Path
    ablation_dir: Path
    hard_negatives: Path

    @classmethod
    def under(cls, metrics_dir: str | os.PathLike) -> ReportInputs:
        """The layout of ``dvc.yaml``: ``metrics/significance.json``, ``metrics/eval/`` and so on."""
        root = Path(metrics_dir)
        return cls(
            significance=root / "significance.json",
            eval_dir=root / "eval",
            train_dir=root / "train",
            curves_dir=root / "curves",
            ablation_dir=root / "ablation",
            hard_negatives=root / "hard_negatives.json",
        )


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _maybe_json(path: Path) -> Any:
    return _read_json(path) if path.is_file() else None


@dataclass
class ReportData:
    """The pipeline outputs the report shows, restricted to the current params' sweep."""

    significance: dict[str, Any]
    evals: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    trains: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    curves: dict[tuple[str, str, int], tuple[list, list]] = field(default_factory=dict)
    ablation: dict[str, list[tuple[float, dict[str, Any] | None]]] = field(default_factory=dict)
    hard_negatives: dict[str, Any] | None = None


def load_report_data(params: Params, inputs: ReportInputs) -> ReportData:
    """Read every output the report uses; runs outside the current sweep are ignored."""
    data = ReportData(significance=_read_json(inputs.significance))
    sw = params.sweep
    for b in sw.backbones:
        for loss in sw.losses:
            for seed in sw.seeds:
                name = run_name(b, loss, seed)
                key = (b, loss, seed)
                ev = _maybe_json(inputs.eval_dir / f"{name}.json")
                if ev is not None:
                    data.evals[key] = ev
                tr = _maybe_json(inputs.train_dir / f"{name}.json")
                if tr is not None:
                    data.trains[key] = tr
                lc = _maybe_json(inputs.curves_dir / "loss" / f"{name}.json")
                dc = _maybe_json(inputs.curves_dir / "dev" / f"{name}.json")
                if lc is not None or dc is not None:
                    data.curves[key] = (lc or [], dc or [])
    items = (
        [_read_json(p) for p in sorted(inputs.ablation_dir.glob("*.json"))]
        if inputs.ablation_dir.is_dir()
        else []
    )
    for kind, values in (("tau", params.ablation.temperatures), ("m", params.ablation.ms)):
        data.ablation[kind] = [
            (
                v,
                next(
                    (
                        it
                        for it in items
                        if it.get("kind") == kind and math.isclose(float(it.get("value", math.nan)), v)
                    ),
                    None,
                ),
            )
            for v in values
        ]
    data.hard_negatives = _maybe_json(inputs.hard_negatives)
    return data


# ---------------------------------------------------------------- formatting
def fmt(x: float | None, digits: int | str = 2) -> str:
    """``digits`` decimals, or a format spec such as ``".3g"``; ``–`` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    return format(x, digits if isinstance(digits, str) else f".{digits}f")


def fmt_summary(summary: dict[str, float] | None, digits: int | str = 2) -> str:
    """``mean ± std`` of a :class:`focalcse.stats.Summary` dict."""
    if not summary:
        return MISSING
    return f"{fmt(summary['mean'], digits)} ± {fmt(summary['std'], digits)}"


def fmt_p(test: dict[str, Any] | None) -> str:
    """A p-value to 3 significant digits, ``*`` when below alpha; ``n/a`` when undefined."""
    if not test:
        return MISSING
    p = test.get("p_value")
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    return f"{p:.3g}{' *' if test.get('significant') else ''}"


def fmt_diff(test: dict[str, Any] | None, digits: int | str = 2) -> str:
    """The paired test's mean difference with its sign."""
    if not test or test.get("mean_diff") is None:
        return MISSING
    d = test["mean_diff"]
    return (
        MISSING if math.isnan(d) else format(d, "+" + (digits if isinstance(digits, str) else f".{digits}f"))
    )


def loss_label(loss: str) -> str:
    return LOSS_LABELS.get(loss, loss)


def fmt_seconds(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


# ---------------------------------------------------------------- document model
@dataclass
class Table:
    """A table both renderers share, so Markdown and HTML show the same strings."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    row_classes: list[str] = field(default_factory=list)  # "ours" | "test" | "published" | ""
    text_columns: tuple[int, ...] = ()  # left-aligned prose columns (sentences)


@dataclass
class Figure:
    path: Path  # the PNG
    caption: str


@dataclass
class Doc:
    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h2(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        self.blocks.append(("ul", list(items)))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def figure(self, figure: Figure) -> None:
        self.blocks.append(("figure", figure))


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    lines = [f"**{t.title}**", ""] if t.title else []
    lines.append("| " + " | ".join(_md_cell(h) for h in t.header) + " |")
    lines.append("|" + "---|" * len(t.header))
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    if t.caption:
        lines += ["", f"_{t.caption}_"]
    return "\n".join(lines)


def to_markdown(doc: Doc, out_dir: Path) -> str:
    out = [f"# {doc.title}", ""]
    for kind, block in doc.blocks:
        if kind == "h2":
            out += [f"## {block}", ""]
        elif kind == "p":
            out += [block, ""]
        elif kind == "ul":
            out += [f"- {item}" for item in block] + [""]
        elif kind == "table":
            out += [table_markdown(block), ""]
        elif kind == "figure":
            rel = block.path.relative_to(out_dir).as_posix()
            out += [f"![{block.caption}]({rel})", "", f"_{block.caption}_", ""]
    return "\n".join(out)


_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")


def _inline_html(text: str) -> str:
    """Escape ``text``; render `code` and **bold** (the only inline markup the report uses)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1))}</code>")
        else:
            out.append(f"<strong>{html.escape(m.group(2))}</strong>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1150px;margin:24px auto;
 padding:0 16px;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #444;padding-bottom:6px}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ccc;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0 4px 0;font-size:0.86em}
th,td{border:1px solid #bbb;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}
tr.published td{color:#555;font-style:italic;background:#f7f7fb}
tr.test td{background:#fffbe6}
tr.ours td:first-child{font-weight:600}
.caption{font-size:0.84em;color:#555;margin:2px 0 14px 0}
.tabletitle{font-weight:600;margin-top:12px}
figure{margin:10px 0 18px 0}
figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:0.84em;color:#555}
code{background:#f3f3f3;padding:0 3px;border-radius:3px}
td.text,th.text{text-align:left;max-width:330px}
"""


def table_html(t: Table) -> str:
    parts = [f'<div class="tabletitle">{_inline_html(t.title)}</div>'] if t.title else []
    parts.append("<table>")

    def td(tag: str, j: int, text: str) -> str:
        return f'<{tag} class="text">{text}</{tag}>' if j in t.text_columns else f"<{tag}>{text}</{tag}>"

    parts.append("<tr>" + "".join(td("th", j, _inline_html(h)) for j, h in enumerate(t.header)) + "</tr>")
    for i, row in enumerate(t.rows):
        cls = t.row_classes[i] if i < len(t.row_classes) else ""
        # data cells are plain text: sentences may hold backticks or asterisks
        cells = "".join(td("td", j, html.escape(str(c))) for j, c in enumerate(row))
        parts.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    parts.append("</table>")
    if t.caption:
        parts.append(f'<div class="caption">{_inline_html(t.caption)}</div>')
    return "\n".join(parts)


def to_html(doc: Doc) -> str:
    """One HTML page with no external resource: inline CSS, PNGs as base64 data URIs."""
    body = [f"<h1>{_inline_html(doc.title)}</h1>"]
    for kind, block in doc.blocks:
        if kind == "h2":
            body.append(f"<h2>{_inline_html(block)}</h2>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(block)}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block) + "</ul>")
        elif kind == "table":
            body.append(table_html(block))
        elif kind == "figure":
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{html.escape(block.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(doc.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------- tables
def metric_columns(params: Params, significance: dict[str, Any]) -> list[str]:
    """Table 2's columns: the evaluated tasks in the paper's order, then ``avg``."""
    present = {k for e in significance["backbones"].values() for summ in e["losses"].values() for k in summ}
    return [k for k in METRIC_KEYS if (k == "avg" or k in params.eval.tasks) and k in present]


def table2(params: Params, data: ReportData, backbone: str) -> Table:
    """Per backbone: ours (mean ± std over seeds) per loss, Δ and paired t-test p per column, and the
    published rows where the backbone has them."""
    sig = data.significance
    entry = sig["backbones"][backbone]
    cols = metric_columns(params, sig)
    header = ["Model", "seeds", *[COLUMN_LABELS.get(c, c) for c in cols]]
    rows, classes = [], []
    for loss in [x for x in params.sweep.losses if x in entry["losses"]]:
        summ = entry["losses"][loss]
        rows.append(
            [f"{loss_label(loss)}, ours", str(len(entry["seeds"][loss]))]
            + [fmt_summary(summ.get(c)) for c in cols]
        )
        classes.append("ours")
    if entry.get("ttest"):
        n = str(len(entry.get("paired_seeds", [])))
        pair = f"{sig['treatment']} − {sig['baseline']}"
        rows.append([f"Δ mean ({pair})", n] + [fmt_diff(entry["ttest"].get(c)) for c in cols])
        classes.append("test")
        rows.append([f"paired t-test p ({pair})", n] + [fmt_p(entry["ttest"].get(c)) for c in cols])
        classes.append("test")
    published = published_rows(backbone, params.backbone_source(backbone))
    for r in published:
        rows.append([f"Published: {r.label} [{r.source}]", MISSING] + [fmt(r.scores.get(c)) for c in cols])
        classes.append("published")
    seeds = ", ".join(str(s) for s in params.sweep.seeds)
    caption = (
        f'Spearman × 100, SimCSE\'s "all" setting, mean ± std (ddof 1) over seeds {seeds}; '
        f"two-sided paired t-test over matched seeds, * = p < {sig['alpha']}."
    )
    if published:
        caption += " Italic rows: published numbers (not produced here), each with its source."
    else:
        caption += (
            " No published numbers exist for this backbone: compare the losses with each other, "
            "not with the paper's absolute numbers."
        )
    return Table(
        f"Table 2 — {backbone} (source `{params.backbone_source(backbone)}`)", header, rows, caption, classes
    )


# (key, column, format): alignment / uniformity to 3 significant digits, Spearman to 2 decimals
TABLE3_KEYS = (
    ("alignment", "Alignment ↓", ".3g"),
    ("uniformity", "Uniformity ↓", ".3g"),
    ("STSBenchmark", "STS-B", 2),
)


def table3(params: Params, data: ReportData, backbone: str) -> Table:
    """Alignment, uniformity (STS-B test; lower is better) and STS-B Spearman per loss, mean ± std."""
    sig = data.significance
    entry = sig["backbones"][backbone]
    header = ["Model", "seeds", *[label for _, label, _ in TABLE3_KEYS]]
    rows, classes = [], []
    for loss in [x for x in params.sweep.losses if x in entry["losses"]]:
        summ = entry["losses"][loss]
        rows.append(
            [f"{loss_label(loss)}, ours", str(len(entry["seeds"][loss]))]
            + [fmt_summary(summ.get(k), d) for k, _, d in TABLE3_KEYS]
        )
        classes.append("ours")
    if entry.get("ttest"):
        n = str(len(entry.get("paired_seeds", [])))
        pair = f"{sig['treatment']} − {sig['baseline']}"
        rows.append([f"Δ mean ({pair})", n] + [fmt_diff(entry["ttest"].get(k), d) for k, _, d in TABLE3_KEYS])
        rows.append(
            [f"paired t-test p ({pair})", n] + [fmt_p(entry["ttest"].get(k)) for k, _, _ in TABLE3_KEYS]
        )
        classes += ["test", "test"]
    caption = (
        "Alignment = E‖f(x)−f(y)‖² over STS-B test pairs with gold > 4; uniformity = log E e^{−2‖f(x)−f(y)‖²} "
        "over all STS-B test sentences; L2-normalised vectors (Wang & Isola, 2020). The paper's Table 3 "
        "numbers were lost in the captured text, so no published row is shown."
    )
    return Table(f"Table 3 — {backbone}", header, rows, caption, classes)


def ablation_table(params: Params, data: ReportData, kind: str) -> Table:
    """Table 4 (``tau``) or 5 (``m``): STS-B test Spearman per swept value."""
    sym = ABLATION_SYMBOLS[kind]
    ab = params.ablation
    base = params.train_config(params.ablation_backbone, ab.loss, ab.seed)
    default = base.temperature if kind == "tau" else base.m
    rows, classes = [], []
    for value, item in data.ablation.get(kind, []):
        mark = " (train default)" if math.isclose(value, default) else ""
        if item is None:
            rows.append([f"{value:g}{mark}", "not run", MISSING, MISSING])
        else:
            rows.append(
                [
                    f"{value:g}{mark}",
                    fmt(item["STSBenchmark"]),
                    fmt(item["stsb_dev_best"]),
                    str(item["best_step"]),
                ]
            )
        classes.append("ours")
    other = f"m = {base.m:g}" if kind == "tau" else f"τ = {base.temperature:g}"
    steps = f"{ab.max_steps} steps" if ab.max_steps else "the whole sample"
    caption = (
        f"{loss_label(ab.loss)} on `{params.ablation_backbone}`, seed {ab.seed}, {steps} per value, {other}; "
        "STS-B test Spearman × 100 of the best-on-STS-B-dev checkpoint (one seed: differences of a "
        "point or two are within seed noise)."
    )
    number = 4 if kind == "tau" else 5
    return Table(
        f"Table {number} — effect of {sym}",
        [sym, "STS-B test", "best STS-B dev", "best step"],
        rows,
        caption,
        classes,
    )


def hard_negatives_table(params: Params, hn: dict[str, Any], backbone: str) -> Table:
    entry = hn["backbones"][backbone]
    losses = [k for k in entry["mean_cos"] if k != "start"]
    header = ["#", "sentence 1", "sentence 2", "gold", "cos start"] + [f"cos {loss_label(x)}" for x in losses]
    rows = []
    for i, p in enumerate(entry["pairs"], 1):
        rows.append(
            [str(i), p["sentence1"], p["sentence2"], fmt(p["gold"]), fmt(p["cos"]["start"], 3)]
            + [fmt(p["cos"][x], 3) for x in losses]
        )
    rows.append(
        ["mean", f"all {entry['candidates']} candidate pairs", "", f"≤ {hn['max_gold']:g}"]
        + [fmt(entry["mean_cos"]["start"], 3)]
        + [fmt(entry["mean_cos"][x], 3) for x in losses]
    )
    caption = (
        f"STS-B train pairs with gold ≤ {hn['max_gold']:g} (of 5), the {hn['k']} of highest cosine under the "
        f"starting model (`{entry['source']}`, pooler `{entry['start_pooler']}`), and their cosine after "
        f"training with each loss (seed {hn['seed']}). The last row is the mean over all candidates: "
        "models differ in anisotropy, so compare each pair with its model's mean."
    )
    return Table(
        f"Hardest negatives — {backbone}",
        header,
        rows,
        caption,
        ["" for _ in rows[:-1]] + ["test"],
        text_columns=(1, 2),
    )


# ---------------------------------------------------------------- provenance
def _metas(data: ReportData) -> list[dict[str, Any]]:
    metas = [r.get("meta", {}) for r in [*data.evals.values(), *data.trains.values()]]
    metas += [it.get("meta", {}) for items in data.ablation.values() for _, it in items if it]
    if data.hard_negatives:
        metas.append(data.hard_negatives.get("meta", {}))
    return metas


def wall_times(data: ReportData) -> dict[str, tuple[float, int]]:
    """Seconds and file count per stage, from the wall times the metrics files record."""
    out = {
        "train": [r["wall_seconds"] for r in data.trains.values() if r.get("wall_seconds") is not None],
        "evaluate": [
            r["meta"]["wall_time_s"]
            for r in data.evals.values()
            if r.get("meta", {}).get("wall_time_s") is not None
        ],
        "ablate_tau / ablate_m": [
            it["wall_seconds"]
            for items in data.ablation.values()
            for _, it in items
            if it and "wall_seconds" in it
        ],
        "hard_negatives": [data.hard_negatives["wall_seconds"]]
        if data.hard_negatives and "wall_seconds" in data.hard_negatives
        else [],
    }
    return {k: (float(sum(v)), len(v)) for k, v in out.items()}


def _hardware_text(hw: dict[str, Any]) -> str:
    text = f"{hw.get('platform', '?')}, {hw.get('cpu_count', '?')} CPUs ({hw.get('torch_threads', '?')} torch threads)"
    return text + (f", GPU {hw['gpu']}" if hw.get("gpu") else ", no GPU")


def provenance_items(params: Params, data: ReportData, params_file: str, commit: str) -> list[str]:
    metas = _metas(data)
    commits = sorted({m["git_commit"] for m in metas if m.get("git_commit")})
    hardware = sorted({_hardware_text(m["hardware"]) for m in metas if m.get("hardware")})
    versions = next((m["versions"] for m in metas if m.get("versions")), {})
    experiment = (params.raw.get("tracking") or {}).get("experiment", "unnamed")
    walls = wall_times(data)
    total = sum(s for s, _ in walls.values())
    items = [
        f"Report built at commit `{commit}`; the metrics it reads were produced at "
        + (", ".join(f"`{c}`" for c in commits) if commits else "an unknown commit"),
        f"Parameter set: `{experiment}` (tracking.experiment) from `{params_file}`",
        "Backbones: " + "; ".join(f"`{b}` ← `{params.backbone_source(b)}`" for b in params.sweep.backbones),
        f"Losses: {', '.join(params.sweep.losses)}; seeds: {', '.join(str(s) for s in params.sweep.seeds)}",
        "Hardware: " + ("; ".join(hardware) if hardware else "not recorded"),
        "Versions: " + (", ".join(f"{k} {v}" for k, v in versions.items()) if versions else "not recorded"),
        f"Wall time: {fmt_seconds(total)} ({total:.1f} s), the sum of the stage wall times recorded in the "
        "metrics files (process start-up and the sample, prepare_sts, significance and report stages not "
        "included): "
        + "; ".join(f"{k} {s:.1f} s ({n} file{'s' if n != 1 else ''})" for k, (s, n) in walls.items()),
    ]
    return items


# ---------------------------------------------------------------- build
def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def build_report(
    params: Params,
    inputs: ReportInputs,
    out_dir: str | os.PathLike,
    params_file: str | os.PathLike = "params.yaml",
    commit: str | None = None,
) -> dict[str, Path]:
    """Write ``out_dir/report.md``, ``out_dir/index.html`` and ``out_dir/figures/*.png``.

    The folder is built beside ``out_dir`` and swapped in whole, so a failure leaves the old report.
    Returns the paths of ``markdown``, ``html`` and each figure.
    """
    from focalcse import figures
    from focalcse.provenance import git_commit

    data = load_report_data(params, inputs)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        paths = _build(params, data, tmp, str(params_file), commit or git_commit(), figures)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {k: out / p.relative_to(tmp) for k, p in paths.items()}


def _build(
    params: Params, data: ReportData, out: Path, params_file: str, commit: str, figures: Any
) -> dict[str, Path]:
    fig_dir = out / "figures"
    paths: dict[str, Path] = {}
    sig = data.significance
    doc = Doc("Focal-InfoNCE reproduction report")
    doc.p(
        "Hou & Li, “Improving Contrastive Learning of Sentence Embeddings with Focal-InfoNCE” "
        "(Findings of EMNLP 2023, arXiv 2310.06918): unsupervised SimCSE trained with InfoNCE and with "
        "Focal-InfoNCE from the same starting model, several seeds each. Generated by the DVC `report` "
        "stage from the pipeline's metrics files; every number below comes from those files, except rows "
        "marked as published."
    )
    doc.h2("What produced this report")
    doc.bullets(provenance_items(params, data, params_file, commit))

    doc.h2("Table 2: STS tasks (Spearman × 100)")
    for b in sig["backbones"]:
        doc.table(table2(params, data, b))

    doc.h2("Table 3: alignment, uniformity and STS-B")
    for b in sig["backbones"]:
        doc.table(table3(params, data, b))
    points = [
        {
            "backbone": b,
            "loss": loss,
            "seed": seed,
            "alignment": ev["alignment"],
            "uniformity": ev["uniformity"],
        }
        for (b, loss, seed), ev in data.evals.items()
        if "alignment" in ev and "uniformity" in ev
    ]
    if points:
        paths["alignment_uniformity"] = figures.alignment_uniformity(
            points, fig_dir / "alignment_uniformity.png"
        )
        doc.figure(
            Figure(
                paths["alignment_uniformity"],
                "Alignment against uniformity on STS-B test, one point per run (label = seed); lower-left is better.",
            )
        )

    doc.h2("Tables 4 and 5: τ and m ablations (STS-B test)")
    for kind in ("tau", "m"):
        doc.table(ablation_table(params, data, kind))
    series = {
        ABLATION_SYMBOLS[k]: [(v, it["STSBenchmark"]) for v, it in items if it]
        for k, items in data.ablation.items()
    }
    if any(series.values()):
        base = params.train_config(params.ablation_backbone, params.ablation.loss, params.ablation.seed)
        paths["ablation"] = figures.ablation_curves(
            series,
            {"τ": base.temperature, "m": base.m},
            f"{params.ablation.loss} on {params.ablation_backbone}: STS-B test vs τ and m",
            fig_dir / "ablation.png",
        )
        doc.figure(Figure(paths["ablation"], "Tables 4 and 5 as curves (STS-B test Spearman × 100)."))

    doc.h2("Figure 1: how Focal-InfoNCE rescales negatives")
    paths["figure1"] = figures.figure1(params.report.figure1_ms, fig_dir / "figure1.png")
    doc.figure(
        Figure(
            paths["figure1"],
            "Figure 1: the negative logit s(s+m) (times τ) against InfoNCE's s. Orange: rescaled logit above "
            "InfoNCE's (hard negatives, s > 1−m; also s < 0, rare for in-batch negatives); green: below it "
            "(easy negatives, 0 < s < 1−m, down-weighted).",
        )
    )

    doc.h2("Training curves")
    doc.p(
        "Training loss and STS-B dev Spearman against step, per loss (colour) and seed (line style); the "
        "model kept is the best on dev. Also declared as DVC plots (`dvc plots show`)."
    )
    for b in params.sweep.backbones:
        runs = {(loss, seed): c for (bb, loss, seed), c in data.curves.items() if bb == b}
        if runs:
            key = f"curves_{b.replace('/', '__')}"
            paths[key] = figures.training_curves(runs, f"Training curves: {b}", fig_dir / f"{key}.png")
            doc.figure(Figure(paths[key], f"Loss and STS-B dev Spearman vs step, {b}."))

    doc.h2("Qualitative: the hardest negatives of STS-B train (§5.1)")
    if data.hard_negatives:
        for b in data.hard_negatives["backbones"]:
            doc.table(hard_negatives_table(params, data.hard_negatives, b))
    else:
        doc.p("Not available: metrics/hard_negatives.json is missing (run the `hard_negatives` stage).")

    paths["markdown"] = out / "report.md"
    paths["html"] = out / "index.html"
    _write_atomic(paths["markdown"], to_markdown(doc, out))
    _write_atomic(paths["html"], to_html(doc))
    return paths
