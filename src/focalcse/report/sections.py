"""The report's sections, in the order they appear: :data:`SECTIONS`.

A section is a function ``(ctx) -> None`` that appends its heading, paragraphs, tables and figures
to ``ctx.doc`` (and records each figure it draws in ``ctx.paths``). Adding a table to the report is
writing one such function and putting it in :data:`SECTIONS`; the renderers, the HTML page and the
build need no change. The table builders (``table2`` ...) are pure: params and data in, a
:class:`~focalcse.report.render.Table` out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.config import Params, TrainConfig
from focalcse.eval.stats import Span, span
from focalcse.layout import ABLATION_KINDS
from focalcse.report import figures
from focalcse.report.data import AblationPoint, ReportData, ablation_default
from focalcse.report.labels import column_label, loss_label, metric_columns
from focalcse.report.published import PublishedRow, published_backbones, published_rows
from focalcse.report.recipe import recipe
from focalcse.report.render import (
    MISSING,
    Doc,
    Figure,
    Table,
    fmt,
    fmt_diff,
    fmt_p,
    fmt_seconds,
    fmt_summary,
)

TITLE = "Focal-InfoNCE reproduction report"
ABLATION_SYMBOLS = {"tau": "τ", "m": "m"}
ABLATION_TABLES = {"tau": 4, "m": 5}  # the paper's table number of each ablation kind

Digits = int | str  # decimals, or a format spec such as ".3g"


@dataclass
class Context:
    """What a section reads (params, data, provenance) and where it writes (the doc, figures)."""

    params: Params
    data: ReportData
    doc: Doc
    out: Path  # the report folder being built; figures go under out/figures
    params_file: str = "params.yaml"
    commit: str = "unknown"
    paths: dict[str, Path] = field(default_factory=dict)  # figure key -> PNG

    @property
    def fig_dir(self) -> Path:
        return self.out / "figures"

    def add_figure(self, key: str, path: Path, caption: str) -> None:
        self.paths[key] = path
        self.doc.figure(Figure(path, caption))


Section = Callable[[Context], None]


# ---------------------------------------------------------------- table builders
def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def p_labels(pair: str, alpha: float) -> tuple[str, str]:
    """The first cells of the raw-p and Holm-p rows of ``pair``, each naming what its ``*`` means."""
    return (
        f"paired t-test p, raw ({pair}); * = raw p < {alpha:g}",
        f"p (Holm) ({pair}); * = Holm-adjusted p < {alpha:g}",
    )


def loss_rows(
    params: Params,
    sig: dict[str, Any],
    backbone: str,
    columns: Sequence[tuple[str, Digits]],
    holm: bool = False,
) -> tuple[list[list[str]], list[str]]:
    """Rows and row classes shared by Tables 2 and 3: per sweep loss, ours (mean ± std over seeds);
    per loss tested against the baseline, its Δ mean and paired t-test p (raw) and, with ``holm``, the
    Holm-adjusted p under it; one cell per column."""
    entry = sig["backbones"][backbone]
    rows, classes = [], []
    for loss in [x for x in params.sweep.losses if x in entry["losses"]]:
        summ = entry["losses"][loss]
        rows.append(
            [f"{loss_label(loss)}, ours", str(len(entry["seeds"][loss]))]
            + [fmt_summary(summ.get(k), d) for k, d in columns]
        )
        classes.append("ours")
    baseline = loss_label(sig["baseline"])
    for loss, tests in entry.get("ttest", {}).items():
        n = str(len(entry["paired_seeds"][loss]))
        pair = f"{loss_label(loss)} − {baseline}"
        raw, adjusted = p_labels(pair, sig["alpha"])
        rows.append([f"Δ mean ({pair})", n] + [fmt_diff(tests.get(k), d) for k, d in columns])
        rows.append([raw, n] + [fmt_p(tests.get(k)) for k, _ in columns])
        classes += ["test", "test"]
        if holm:
            rows.append(
                [adjusted, n] + [fmt_p(tests.get(k), "p_holm", "significant_holm") for k, _ in columns]
            )
            classes.append("test")
    return rows, classes


def published_label(row: PublishedRow) -> str:
    """A published row's first cell: ``Published: label [source]``, or for a row with derived
    numbers ``Derived: label; avg = a − b (why) [source]``."""
    if not row.derived:
        return f"Published: {row.label} [{row.source}]"
    how = "; ".join(f"{column_label(k)} = {text}" for k, text in row.derived.items())
    return f"Derived: {row.label}; {how} [{row.source}]"


def published_gain_note(published: Sequence[PublishedRow]) -> str:
    """A sentence saying which baseline the published Focal-InfoNCE rows are compared with, with the
    gain over the paper's own baseline and over the SimCSE paper's row (from the rows' averages)."""
    own = next((r for r in published if r.paper_baseline and "avg" in r.scores), None)
    treated = [r for r in published if r.loss != "infonce" and "avg" in r.scores]
    if own is None or not treated:
        return ""
    other = next(
        (r for r in published if r.loss == own.loss and not r.paper_baseline and "avg" in r.scores), None
    )

    def gain(a: float, b: float) -> str:
        return fmt_diff({"mean_diff": a - b})

    gains = []
    for r in treated:
        avg = r.scores["avg"]
        text = f"{r.label}: {fmt(avg)} − {fmt(own.scores['avg'])} = {gain(avg, own.scores['avg'])}"
        if other is not None:
            text += (
                f" (against the SimCSE paper's {fmt(other.scores['avg'])}: {gain(avg, other.scores['avg'])})"
            )
        gains.append(text)
    return (
        " The published Focal-InfoNCE rows compare with the Focal-InfoNCE paper's own SimCSE baseline "
        f"(“{own.label}”), not with the SimCSE paper's: {'; '.join(gains)}."
    )


def table2(params: Params, data: ReportData, backbone: str) -> Table:
    """Per backbone: ours (mean ± std over seeds) per loss; Δ, the paired t-test p and its
    Holm-adjusted p per column for each loss against the baseline; the published (and derived) rows
    where the backbone has them."""
    sig = data.significance
    cols = metric_columns(params, sig)
    header = ["Model", "seeds", *[column_label(c) for c in cols]]
    rows, classes = loss_rows(params, sig, backbone, [(c, 2) for c in cols], holm=True)
    published = published_rows(backbone, params.backbone_source(backbone))
    for r in published:
        rows.append([published_label(r), MISSING] + [fmt(r.scores.get(c)) for c in cols])
        classes.append("published")
    seeds = ", ".join(str(s) for s in params.sweep.seeds)
    family = sig.get("holm_family") or [c for c in cols]
    caption = (
        f'Spearman × 100, SimCSE\'s "all" setting, mean ± std (ddof 1) over seeds {seeds}; '
        f"two-sided paired t-test over matched seeds. * on a raw-p row: p < {sig['alpha']} for that "
        f"column alone; * on a p (Holm) row: Holm–Bonferroni-adjusted p < {sig['alpha']}, the family "
        f"being the {len(family)} tests ({', '.join(column_label(k) for k in family)}) of one loss "
        "against the baseline on this backbone (family-wise error ≤ α)."
    )
    if published:
        caption += (
            " Italic rows: published numbers (not produced here), each with its source; “Derived” rows "
            "are computed from published numbers by the arithmetic shown, not published themselves."
            + published_gain_note(published)
        )
    else:
        caption += (
            " No published numbers exist for this backbone: compare the losses with each other, "
            "not with the paper's absolute numbers."
        )
    return Table(
        f"Table 2 — {backbone} (source `{params.backbone_source(backbone)}`)", header, rows, caption, classes
    )


# (key, column, format): alignment / uniformity to 3 significant digits, Spearman to 2 decimals
TABLE3_KEYS: tuple[tuple[str, str, Digits], ...] = (
    ("alignment", "Alignment ↓", ".3g"),
    ("uniformity", "Uniformity ↓", ".3g"),
    ("STSBenchmark", column_label("STSBenchmark"), 2),
)


def table3(params: Params, data: ReportData, backbone: str) -> Table:
    """Alignment, uniformity (STS-B test; lower is better) and STS-B Spearman per loss, mean ± std."""
    header = ["Model", "seeds", *[label for _, label, _ in TABLE3_KEYS]]
    rows, classes = loss_rows(params, data.significance, backbone, [(k, d) for k, _, d in TABLE3_KEYS])
    caption = (
        "Alignment = E‖f(x)−f(y)‖² over STS-B test pairs with gold > 4; uniformity = log E e^{−2‖f(x)−f(y)‖²} "
        "over all STS-B test sentences; L2-normalised vectors (Wang & Isola, 2020). The paper's Table 3 "
        "numbers were lost in the captured text, so no published row is shown."
    )
    return Table(f"Table 3 — {backbone}", header, rows, caption, classes)


def ablation_defaults(params: Params) -> dict[str, float | None]:
    """Per ablation kind, its default point (the ablation loss's effective τ / m; None: no such key)."""
    return {kind: ablation_default(params, kind) for kind in ABLATION_KINDS}


@dataclass(frozen=True)
class SeedBand:
    """The main sweep's STS-B test range over seeds for the ablation's backbone and loss."""

    span: Span
    seeds: tuple[int, ...]


def seed_band(params: Params, data: ReportData) -> SeedBand | None:
    """min–max of STS-B test over ``sweep.seeds`` of (ablation backbone, ``ablation.loss``) in the
    main sweep; None with fewer than two evaluated seeds (no spread to compare with)."""
    b, loss = params.ablation_backbone, params.ablation.loss
    found = {
        s: data.evals[(b, loss, s)]["STSBenchmark"]
        for s in params.sweep.seeds
        if "STSBenchmark" in data.evals.get((b, loss, s), {})
    }
    if len(found) < 2:
        return None
    return SeedBand(span(list(found.values())), tuple(found))


def ablation_scores(points: Sequence[AblationPoint]) -> list[tuple[float, float]]:
    """(value, STS-B test) of the points that have a score, ascending value."""
    return sorted((p.value, p.item["STSBenchmark"]) for p in points if p.item and "STSBenchmark" in p.item)


def band_sentence(kind: str, points: Sequence[AblationPoint], band: SeedBand | None) -> str:
    """Whether ``kind``'s ablation range (max − min of STS-B test over its points) exceeds the seed
    band's width, in words, with both numbers."""
    sym = ABLATION_SYMBOLS[kind]
    scores = [y for _, y in ablation_scores(points)]
    if len(scores) < 2:
        return f"The {sym} sweep has {len(scores)} scored point(s): no range to compare with seed noise."
    sweep = span(scores)
    spans = f"The {sym} sweep spans {fmt(sweep.width)} ({fmt(sweep.low)}–{fmt(sweep.high)})"
    if band is None:
        return f"{spans}; there is no seed band to compare it with (fewer than two main-sweep seeds)."
    width = fmt(band.span.width)
    if sweep.width > band.span.width:
        return (
            f"{spans}, more than the seed band's {width}: its differences exceed the seed-to-seed "
            "spread of the main runs (one seed per point, so this is not a significance test)."
        )
    return f"{spans}, not more than the seed band's {width}: its differences are within seed noise."


def band_line(params: Params, band: SeedBand | None) -> str:
    """The seed band under a table: its runs, its range and width."""
    ab = params.ablation
    who = f"{loss_label(ab.loss)} on `{params.ablation_backbone}`"
    if band is None:
        return f"Seed band: not available (fewer than two main-sweep seeds of {who} are evaluated)."
    seeds = ", ".join(str(s) for s in band.seeds)
    return (
        f"Seed band (main sweep, {who}, STS-B test over seeds {seeds}): "
        f"{fmt(band.span.low)}–{fmt(band.span.high)}, width {fmt(band.span.width)}."
    )


def _length(cfg: TrainConfig, params: Params) -> str:
    if cfg.max_steps:
        return f"{cfg.max_steps} steps"
    epochs = f"{cfg.epochs} epoch{'s' if cfg.epochs != 1 else ''}"
    return f"{epochs} over the {params.data.num_sentences:,}-sentence sample"


def ablation_table(params: Params, data: ReportData, kind: str) -> Table:
    """Table 4 (``tau``) or 5 (``m``): STS-B test Spearman at every point of ``kind``, the default
    point being the main sweep's run."""
    sym = ABLATION_SYMBOLS[kind]
    ab = params.ablation
    rows, classes = [], []
    for point in data.ablation.get(kind, []):
        mark = f" (main sweep, seed {point.main_seed})" if point.main_seed is not None else ""
        item = point.item
        if item is None:
            rows.append([f"{point.value:g}{mark}", "not run", MISSING, MISSING])
        else:
            rows.append(
                [
                    f"{point.value:g}{mark}",
                    fmt(item.get("STSBenchmark")),
                    fmt(item.get("stsb_dev_best")),
                    str(item["best_step"]) if "best_step" in item else MISSING,
                ]
            )
        classes.append("ours")
    defaults = ablation_defaults(params)
    default = defaults[kind]
    others = "".join(
        f", {ABLATION_SYMBOLS[k]} = {v:g}" for k, v in defaults.items() if k != kind and v is not None
    )
    base = params.ablation_base_config()
    caption = (
        f"{loss_label(ab.loss)} on `{params.ablation_backbone}`{others}; one seed ({ab.seed}) per point, each "
        f"run trained as long as the main runs ({_length(base, params)}); STS-B test Spearman × 100 of "
        "the best-on-STS-B-dev checkpoint."
    )
    if default is not None:
        caption += (
            f" The {sym} = {default:g} row is the main sweep's seed-{ab.seed} run (reused, not retrained); "
            "the other rows are the ablation runs."
        )
    return Table(
        f"Table {ABLATION_TABLES[kind]} — effect of {sym}",
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
def _ablation_items(data: ReportData) -> list[dict[str, Any]]:
    """The ablation runs' own items (the main-sweep default points are counted with the main runs)."""
    return [p.item for points in data.ablation.values() for p in points if p.item and p.main_seed is None]


def _metas(data: ReportData) -> list[dict[str, Any]]:
    metas = [r.get("meta", {}) for r in [*data.evals.values(), *data.trains.values()]]
    metas += [it.get("meta", {}) for it in _ablation_items(data)]
    if data.hard_negatives:
        metas += data.hard_negatives.get("metas", [])
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
        "ablate_tau / ablate_m": [it["wall_seconds"] for it in _ablation_items(data) if "wall_seconds" in it],
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
    return [
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


# ---------------------------------------------------------------- sections
def intro(ctx: Context) -> None:
    losses = _and([f"with {loss_label(loss)}" for loss in ctx.params.sweep.losses])
    ctx.doc.p(
        "Hou & Li, “Improving Contrastive Learning of Sentence Embeddings with Focal-InfoNCE” "
        f"(Findings of EMNLP 2023, arXiv 2310.06918): unsupervised SimCSE trained {losses} "
        "from the same starting model, several seeds each. Generated by the DVC `report` "
        "stage from the pipeline's metrics files; every number below comes from those files, except rows "
        "marked as published."
    )


def provenance(ctx: Context) -> None:
    ctx.doc.h2("What produced this report")
    ctx.doc.bullets(provenance_items(ctx.params, ctx.data, ctx.params_file, ctx.commit))


def sts_tables(ctx: Context) -> None:
    ctx.doc.h2("Table 2: STS tasks (Spearman × 100)")
    for b in ctx.data.significance["backbones"]:
        ctx.doc.table(table2(ctx.params, ctx.data, b))
    reference = published_reference(ctx.params, ctx.data)
    if reference is not None:
        ctx.doc.table(reference)


def published_reference(params: Params, data: ReportData) -> Table | None:
    """The published (and derived) Table 2 rows of the paper's backbones that no sweep backbone
    shows under its own Table 2: the paper's numbers for reference, never beside our runs."""
    shown = {
        r.backbone
        for b in data.significance["backbones"]
        for r in published_rows(b, params.backbone_source(b))
    }
    others = [b for b in published_backbones() if b not in shown]
    if not others:
        return None
    cols = metric_columns(params, data.significance)
    rows, classes = [], []
    for b in others:
        for r in published_rows(b):
            rows.append([published_label(r), b] + [fmt(r.scores.get(c)) for c in cols])
            classes.append("published")
    caption = (
        "The paper's backbones, for reference only: published numbers (not produced here), each with "
        "its source; “Derived” rows are computed from published numbers by the arithmetic shown "
        "(the Focal-InfoNCE paper's own SimCSE baselines: its Focal-InfoNCE averages minus the "
        "abstract's gains), not published themselves. Compare a Focal-InfoNCE row with its paper's "
        "own baseline, and none of them with the runs above, which start from another backbone."
        + published_gain_note([r for b in others[:1] for r in published_rows(b)])
    )
    return Table(
        "Published Table 2 rows (reference)",
        ["Row", "backbone", *[column_label(c) for c in cols]],
        rows,
        caption,
        classes,
    )


def alignment_uniformity(ctx: Context) -> None:
    ctx.doc.h2("Table 3: alignment, uniformity and STS-B")
    for b in ctx.data.significance["backbones"]:
        ctx.doc.table(table3(ctx.params, ctx.data, b))
    points = [
        {
            "backbone": b,
            "loss": loss,
            "seed": seed,
            "alignment": ev["alignment"],
            "uniformity": ev["uniformity"],
        }
        for (b, loss, seed), ev in ctx.data.evals.items()
        if "alignment" in ev and "uniformity" in ev
    ]
    if points:
        ctx.add_figure(
            "alignment_uniformity",
            figures.alignment_uniformity(points, ctx.fig_dir / "alignment_uniformity.png"),
            "Alignment against uniformity on STS-B test, one point per run (label = seed); lower-left is better.",
        )


def ablations(ctx: Context) -> None:
    params, data = ctx.params, ctx.data
    ctx.doc.h2("Tables 4 and 5: τ and m ablations (STS-B test)")
    band = seed_band(params, data)
    for kind in ABLATION_TABLES:
        ctx.doc.table(ablation_table(params, data, kind))
        ctx.doc.p(f"{band_line(params, band)} {band_sentence(kind, data.ablation.get(kind, []), band)}")
    series = {ABLATION_SYMBOLS[k]: ablation_scores(points) for k, points in data.ablation.items()}
    if any(series.values()):
        defaults = {ABLATION_SYMBOLS[k]: v for k, v in ablation_defaults(params).items() if v is not None}
        ab = params.ablation
        shade = (band.span.low, band.span.high) if band else None
        ctx.add_figure(
            "ablation",
            figures.ablation_curves(
                series,
                defaults,
                f"{params.ablation.loss} on {params.ablation_backbone}: STS-B test vs τ and m",
                ctx.fig_dir / "ablation.png",
                loss=params.ablation.loss,
                band=shade,
                default_label=f"main sweep, seed {ab.seed}",
            ),
            "Tables 4 and 5 as curves (STS-B test Spearman × 100); the dotted line is the default point "
            f"(the main sweep's seed-{ab.seed} run); "
            + (
                f"the shaded band is the main sweep's min–max over seeds "
                f"{', '.join(str(s) for s in band.seeds)} ({fmt(band.span.low)}–{fmt(band.span.high)}). "
                if band
                else "no seed band (fewer than two main-sweep seeds). "
            )
            + "One seed per point; each run trains as long as the main runs.",
        )


def focal_figure(ctx: Context) -> None:
    ctx.doc.h2("Figure 1: how Focal-InfoNCE rescales negatives")
    ctx.add_figure(
        "figure1",
        figures.figure1(ctx.params.report.figure1_ms, ctx.fig_dir / "figure1.png"),
        "Figure 1: the negative logit s(s+m) (times τ) against InfoNCE's s, per m. The paper's rule: a "
        "negative with s > 1−m is hard (orange, up-weighted: s(s+m) > s there), every other one easy "
        "(green, down-weighted), including s < 0, where s(s+m) is above s but the pair is already far "
        "apart. The dot marks the vertex of s(s+m) at s = −m/2, where the gradient factor (2s+m)/τ of the loss "
        "with respect to s changes sign: below it the loss pulls a negative's similarity up toward −m/2 "
        "instead of pushing it down.",
    )


def departures(ctx: Context) -> None:
    ctx.doc.h2("Departures from the reference recipe")
    r = recipe(ctx.params)
    experiment = (ctx.params.raw.get("tracking") or {}).get("experiment", "unnamed")
    ctx.doc.p(
        f"What parameter set `{experiment}` still does differently from SimCSE's unsupervised recipe and "
        "the official Focal-InfoNCE fork (docs/method.md), computed from its params:"
    )
    ctx.doc.bullets(r.departures or ["nothing: every checked item matches"])
    if r.matches:
        ctx.doc.p("Matching the reference: " + "; ".join(r.matches) + ".")


def training_curves(ctx: Context) -> None:
    ctx.doc.h2("Training curves")
    ctx.doc.p(
        "Training loss and STS-B dev Spearman against step, per loss (colour) and seed (line style); the "
        "model kept is the best on dev. Also declared as DVC plots (`dvc plots show`)."
    )
    for b in ctx.params.sweep.backbones:
        runs = {(loss, seed): c for (bb, loss, seed), c in ctx.data.curves.items() if bb == b}
        if runs:
            key = f"curves_{b.replace('/', '__')}"
            ctx.add_figure(
                key,
                figures.training_curves(runs, f"Training curves: {b}", ctx.fig_dir / f"{key}.png"),
                f"Loss and STS-B dev Spearman vs step, {b}.",
            )


def hard_negatives(ctx: Context) -> None:
    ctx.doc.h2("Qualitative: the hardest negatives of STS-B train (§5.1)")
    hn = ctx.data.hard_negatives
    if hn:
        for b in hn["backbones"]:
            ctx.doc.table(hard_negatives_table(ctx.params, hn, b))
    else:
        ctx.doc.p(
            "Not available: no metrics/hard_negatives/ item of the sweep (run the `hard_negatives` stage)."
        )


# The report, top to bottom.
SECTIONS: list[Section] = [
    intro,
    provenance,
    departures,
    sts_tables,
    alignment_uniformity,
    ablations,
    focal_figure,
    training_curves,
    hard_negatives,
]
