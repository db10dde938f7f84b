"""The report's table builders: pure functions, params and data in, a :class:`~focalcse.report.render.Table` out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from focalcse.config import Params, TrainConfig, all_frameworks
from focalcse.eval.stats import POWER, Span, seeds_needed, span
from focalcse.layout import ABLATION_KINDS
from focalcse.report.data import AblationPoint, ReportData, ablation_default
from focalcse.report.labels import (
    avg_is_the_papers,
    column_label,
    framework_label,
    loss_label,
    metric_columns,
    run_label,
)
from focalcse.report.published import (
    PUBLISHED_FRAMEWORKS,
    PublishedRow,
    published_gains,
    published_rows,
)
from focalcse.report.render import (
    MISSING,
    Table,
    fmt,
    fmt_diff,
    fmt_p,
    fmt_summary,
)

TITLE = "Focal-InfoNCE reproduction report"
ABLATION_SYMBOLS = {"tau": "τ", "m": "m"}
ABLATION_TABLES = {"tau": 4, "m": 5}  # the paper's table number of each ablation kind

Digits = int | str  # decimals, or a format spec such as ".3g"

# (key, column, format): alignment / uniformity to 3 significant digits, Spearman to 2 decimals
TABLE3_KEYS: tuple[tuple[str, str, Digits], ...] = (
    ("alignment", "Alignment ↓", ".3g"),
    ("uniformity", "Uniformity ↓", ".3g"),
    ("STSBenchmark", column_label("STSBenchmark"), 2),
)
# Table 3 over several frameworks: the paper's column names
TABLE3_FRAMEWORK_LABELS = {"alignment": "ALGN ↓", "uniformity": "UNIF ↓"}


def loss_rows(
    params: Params,
    sig: dict[str, Any],
    backbone: str,
    columns: Sequence[tuple[str, Digits]],
    holm: bool = False,
    label: Callable[[str], str] = loss_label,
) -> tuple[list[list[str]], list[str]]:
    """Rows and row classes shared by Tables 2 and 3: per sweep loss, ours (mean ± std over seeds);
    per loss tested against the baseline, its Δ mean and paired t-test p (raw) and, with ``holm``, the
    Holm-adjusted p under it; one cell per column. ``label`` names a loss's row (default its label;
    a framework's table passes :func:`~focalcse.report.labels.run_label` of that framework)."""
    entry = sig["backbones"][backbone]
    rows, classes = [], []
    for loss in [x for x in params.sweep.losses if x in entry["losses"]]:
        summ = entry["losses"][loss]
        rows.append(
            [f"{label(loss)}, ours", str(len(entry["seeds"][loss]))]
            + [fmt_summary(summ.get(k), d) for k, d in columns]
        )
        classes.append("ours")
    baseline = label(sig["baseline"])
    for loss, tests in entry.get("ttest", {}).items():
        n = str(len(entry["paired_seeds"][loss]))
        pair = f"{label(loss)} − {baseline}"
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


def published_cell(row: PublishedRow, key: str, params: Params) -> str:
    """A published number under column ``key``; its 7-task average only under an ``avg`` that is
    the paper's 7 tasks too (else –: an average over other tasks is not comparable)."""
    if key == "avg" and not avg_is_the_papers(params.eval.tasks):
        return MISSING
    return fmt(row.scores.get(key))


def published_label(row: PublishedRow) -> str:
    """A published row's first cell: ``Published: label [source]``, or for a row with derived
    numbers ``Derived: label; avg = a − b (why) [source]``."""
    if not row.derived:
        note = f" ({row.avg_note})" if row.avg_note else ""
        return f"Published: {row.label}{note} [{row.source}]"
    how = "; ".join(f"{column_label(k)} = {text}" for k, text in row.derived.items())
    return f"Derived: {row.label}; {how} [{row.source}]"


def framework_runs_label(params: Params, framework: str) -> Callable[[str], str]:
    """How a framework's table names a loss's row: SimCSE's tables by the loss label alone (as before
    frameworks existed); another framework's as the paper's Table 3, e.g. ``DiffCSE + Focal-InfoNCE``."""
    if framework == params.sweep.reference:
        return loss_label
    return lambda loss: run_label(framework, loss, params.significance.baseline)


def table2(params: Params, data: ReportData, backbone: str, framework: str | None = None) -> Table:
    """Per backbone: ours (mean ± std over seeds) per loss; Δ, the paired t-test p and its
    Holm-adjusted p per column for each loss against the baseline; the published (and derived) rows
    where the backbone has them. For a framework other than SimCSE: its runs, each loss tested against
    the same framework's baseline-loss runs (one Holm family per framework, backbone and loss)."""
    if framework not in (None, params.sweep.reference):
        return framework_table2(params, data, backbone, framework)
    sig = data.significance
    cols = metric_columns(params, sig)
    header = ["Model", "seeds", *[column_label(c, params.eval.tasks) for c in cols]]
    rows, classes = loss_rows(params, sig, backbone, [(c, 2) for c in cols], holm=True)
    published = published_rows(backbone, params.backbone_source(backbone))
    for r in published:
        rows.append([published_label(r), MISSING] + [published_cell(r, c, params) for c in cols])
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


def framework_table2(params: Params, data: ReportData, backbone: str, framework: str) -> Table:
    """Table 2 of one framework other than SimCSE (see :func:`table2`)."""
    sig = data.significance_of(framework)
    if sig is None or backbone not in sig["backbones"]:
        raise ValueError(f"significance.json has no {framework} entry for {backbone}")
    name = framework_label(framework)
    cols = metric_columns(params, sig)
    header = ["Model", "seeds", *[column_label(c, params.eval.tasks) for c in cols]]
    label = framework_runs_label(params, framework)
    rows, classes = loss_rows(params, sig, backbone, [(c, 2) for c in cols], holm=True, label=label)
    published = published_rows(backbone, params.backbone_source(backbone), framework=framework)
    for r in published:
        rows.append([published_label(r), MISSING] + [published_cell(r, c, params) for c in cols])
        classes.append("published")
    seeds = ", ".join(str(s) for s in params.sweep.seeds)
    family = sig.get("holm_family") or list(cols)
    caption = (
        f'{name}: Spearman × 100, SimCSE\'s "all" setting, mean ± std (ddof 1) over seeds {seeds}; '
        f"two-sided paired t-test over matched seeds of each loss against {name} trained with the "
        f"baseline loss (`{sig['baseline']}`) on this backbone. * on a raw-p row: p < {sig['alpha']} for that "
        f"column alone; * on a p (Holm) row: Holm–Bonferroni-adjusted p < {sig['alpha']}, the family "
        f"being the {len(family)} tests ({', '.join(column_label(k) for k in family)}) of one loss "
        f"against the baseline within {name} on this backbone: one family per framework, backbone and "
        "loss, so no framework changes another's p-values."
    )
    if published:
        caption += f" Italic rows: {name}'s published numbers (not produced here), each with its source."
    else:
        caption += (
            f" No published {name} numbers exist for this backbone: compare the losses with each other, "
            "not with the published numbers."
        )
    return Table(
        f"Table 2 — {name} — {backbone} (source `{params.backbone_source(backbone)}`)",
        header,
        rows,
        caption,
        classes,
    )


def framework_has_runs(data: ReportData, framework: str, backbone: str) -> bool:
    """Whether ``significance.json`` summarises any run of ``framework`` on ``backbone``."""
    sig = data.significance_of(framework)
    return sig is not None and bool(sig["backbones"].get(backbone, {}).get("losses"))


def framework_published_reference(params: Params, data: ReportData) -> Table | None:
    """The published rows of the sweep's frameworks besides SimCSE (their own papers' / repositories'
    BERT-base rows, no Focal-InfoNCE) that no framework Table 2 shows beside our runs; None if none."""
    shown = {
        (r.framework, r.backbone)
        for f in params.sweep.others
        for b in params.sweep.backbones_of(f)
        for r in published_rows(b, params.backbone_source(b), framework=f)
    }
    rows_ = [  # in sweep order
        r
        for f in params.sweep.others
        for r in PUBLISHED_FRAMEWORKS
        if r.framework == f and (r.framework, r.backbone) not in shown
    ]
    if not rows_:
        return None
    cols = metric_columns(params, data.significance)
    rows = [
        [published_label(r), framework_label(r.framework), r.backbone] + [fmt(r.scores.get(c)) for c in cols]
        for r in rows_
    ]
    names = _and(list(dict.fromkeys(framework_label(r.framework) for r in rows_)))
    # what each framework of the sweep says of the paper's own numbers for it, in the registry's order
    said = [
        note
        for f in all_frameworks()
        if f in params.sweep.others and (note := getattr(params.frameworks.settings(f), "PUBLISHED_NOTE", ""))
    ]
    caption = (
        f"{names} as their own authors published them (unsupervised, each framework's own InfoNCE-based "
        "objective, no Focal-InfoNCE), for reference only: not produced here, each with its source. "
        + (f"{'; '.join(said)}. " if said else "")
        + "Compare none of these rows with the runs above, which start from another "
        "backbone and train on a small sample."
    )
    return Table(
        f"Published {names} rows (reference)",
        ["Row", "framework", "backbone", *[column_label(c, params.eval.tasks) for c in cols]],
        rows,
        caption,
        ["published"] * len(rows),
    )


def table3(params: Params, data: ReportData, backbone: str) -> Table:
    """Alignment, uniformity (STS-B dev; lower is better) and STS-B Spearman per loss, mean ± std.
    With frameworks besides SimCSE, the paper's Table 3: every framework's rows (``SimCSE``,
    ``SimCSE + Focal-InfoNCE``, ``DiffCSE``, ...), each loss tested against the same framework's
    baseline-loss runs (paired t-test over matched seeds: raw p, and the Holm p of each column's family:
    alignment and uniformity their own, STS-B Table 2's)."""
    if params.sweep.others:
        return framework_table3(params, data, backbone)
    header = ["Model", "seeds", *[label for _, label, _ in TABLE3_KEYS]]
    rows, classes = loss_rows(
        params, data.significance, backbone, [(k, d) for k, _, d in TABLE3_KEYS], holm=True
    )
    caption = (
        "Alignment = E‖f(x)−f(y)‖² over STS-B dev pairs with gold > 4 (SimCSE's analysis; method.md); uniformity = log E e^{−2‖f(x)−f(y)‖²} "
        "over all STS-B dev sentences; L2-normalised vectors (Wang & Isola, 2020); lower is better for "
        "both. Δ and p: two-sided paired t-test over matched seeds against the baseline loss."
        + table3_tests_note(data.significance)
        + " The paper's Table 3 numbers were lost in the captured text, so no published row is shown."
    )
    return Table(f"Table 3 — {backbone}", header, rows, caption, classes)


def framework_table3(params: Params, data: ReportData, backbone: str) -> Table:
    """Table 3 over every framework of the sweep (see :func:`table3`)."""
    header = ["Model", "seeds", *[TABLE3_FRAMEWORK_LABELS.get(k, label) for k, label, _ in TABLE3_KEYS]]
    cols = [(k, d) for k, _, d in TABLE3_KEYS]
    rows, classes, absent = [], [], []
    for f in params.sweep.all_frameworks:
        if not framework_has_runs(data, f, backbone):
            absent.append(framework_label(f))
            continue
        sig = data.significance_of(f)
        # every framework's rows named as the paper's Table 3, SimCSE's too ("SimCSE + Focal-InfoNCE")
        r, c = loss_rows(
            params, sig, backbone, cols, holm=True, label=partial(run_label, f, baseline=sig["baseline"])
        )
        rows += r
        classes += c
    base = f"the baseline loss (`{params.significance.baseline}`)"
    caption = (
        f"The paper's Table 3 layout: each framework trained with {base}, named by the framework alone "
        "(“SimCSE”, “DiffCSE”), and with every other loss (“+ loss”). ALGN = alignment, "
        "E‖f(x)−f(y)‖² over STS-B dev pairs with gold > 4 (SimCSE's analysis; method.md); UNIF = uniformity, log E e^{−2‖f(x)−f(y)‖²} "
        "over all STS-B dev sentences; L2-normalised vectors (Wang & Isola, 2020); lower is better for "
        "both. STS-B: test Spearman × 100. Mean ± std (ddof 1) over seeds; each Δ and raw p is a "
        "two-sided paired t-test over matched seeds against the SAME framework trained with "
        f"{base} on this backbone, one Holm family per framework, backbone and loss."
        + table3_tests_note(data.significance)
        + " The paper's Table 3 numbers were lost in the captured text, so no published row is shown."
    )
    if absent:
        caption += f" Not evaluated yet on this backbone (no item in significance.json): {_and(absent)}."
    return Table(f"Table 3 — {backbone}", header, rows, caption, classes)


def paper_claim(params: Params, framework: str) -> dict[str, Any] | None:
    """Framework ``framework``'s ``PAPER_CLAIM`` (its settings class: where the report checks the
    paper's claim about it, and on which measures), or None when it declares none."""
    return getattr(params.frameworks.settings(framework), "PAPER_CLAIM", None)


# how a claim table's caption names a measure it shows (``PAPER_CLAIM`` measures, report/prose.py)
_CLAIM_COLUMNS = {"STSBenchmark": "STS-B = STS-B test"}


def claim_table(params: Params, data: ReportData, backbone: str, framework: str) -> Table | None:
    """The table of a framework's ``PAPER_CLAIM`` section (PromptBERT's §5.3): the framework trained
    with the baseline loss against it with every other loss on the claim's measures, Δ, raw p and
    Holm p (of the framework's Table 2 family); None without its runs on ``backbone``."""
    claim = paper_claim(params, framework)
    if claim is None or not framework_has_runs(data, framework, backbone):
        return None
    sig = data.significance_of(framework)
    name = framework_label(framework)
    geometry = {k: (label, digits) for k, label, digits in TABLE3_KEYS if k != "STSBenchmark"}
    keys = [k for k, _ in claim["measures"] if k in metric_columns(params, sig) or k in geometry]
    rows, classes = loss_rows(
        params,
        sig,
        backbone,
        [(k, geometry[k][1] if k in geometry else 2) for k in keys],
        holm=True,
        label=framework_runs_label(params, framework),
    )
    n_tasks = len([c for c in metric_columns(params, sig) if c != "avg"])
    family = holm_family_text(sig, "avg") or "no Holm family"
    named = [
        f"Avg. = the {n_tasks}-task average" if k == "avg" else _CLAIM_COLUMNS.get(k, column_label(k))
        for k in keys
        if k not in geometry
    ]
    geo = [k for k in keys if k in geometry]
    caption = (
        f"{', '.join(named)}, Spearman × 100, mean ± std (ddof 1) over "
        f"seeds; Δ and raw p: two-sided paired t-test over matched seeds against {name} trained with "
        f"the baseline loss (`{sig['baseline']}`) (the same tests as in {name}'s Table 2); p (Holm): "
        f"adjusted within {family} of {name}'s Table 2"
        + (
            f" ({' and '.join(geo)}: within {holm_family_text(sig, geo[0]) or 'no Holm family'}; lower is better)"
            if geo
            else ""
        )
        + ", on which the sentence below decides."
    )
    return Table(
        f"{claim['table']} — {backbone}",
        ["Model", "seeds", *[geometry[k][0] if k in geometry else column_label(k) for k in keys]],
        rows,
        caption,
        classes,
    )


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


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def p_labels(pair: str, alpha: float) -> tuple[str, str]:
    """The first cells of the raw-p and Holm-p rows of ``pair``, each naming what its ``*`` means."""
    return (
        f"paired t-test p, raw ({pair}); * = raw p < {alpha:g}",
        f"p (Holm) ({pair}); * = Holm-adjusted p < {alpha:g}",
    )


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


def table3_tests_note(sig: dict[str, Any]) -> str:
    """Which Holm family each Table 3 column's Holm p (and the report's verdict) comes from."""
    sts = holm_family_text(sig, "STSBenchmark") or "no Holm family"
    geometry = [k for k in ("alignment", "uniformity") if holm_family_text(sig, k)]
    if geometry:
        return (
            " The p (Holm) row adjusts alignment and uniformity within their own Holm family "
            f"({holm_family_text(sig, geometry[0])} of each loss against the baseline), and STS-B within "
            f"{sts} of Table 2; a difference is called significant only when its Holm p < α."
        )
    return (
        f" The p (Holm) row adjusts STS-B within {sts} of Table 2. Alignment and uniformity are "
        "descriptive here (this significance.json puts them in no Holm family): their raw p is no "
        "significance verdict."
    )


def holm_family_text(sig: dict[str, Any], key: str) -> str | None:
    """The Holm family the tests of ``key`` belong to in ``sig``, in words (``the 8-column STS
    family``, ``the 2-test alignment/uniformity family``); None when ``key`` is in none (e.g.
    alignment in a significance.json written before the geometry family existed)."""
    sts = list(sig.get("holm_family") or [])
    geometry = list(sig.get("holm_family_geometry") or [])
    if key in sts:
        return f"the {len(sts)}-column STS family"
    if key in geometry:
        return f"the {len(geometry)}-test {'/'.join(geometry)} family"
    return None


def power_table(params: Params, data: ReportData) -> Table | None:
    """How much the seeds can see, per comparison (framework × backbone × loss against the baseline):
    the paired t-test's seeds, the observed difference of ``avg`` and its paired standard deviation,
    the smallest true difference those seeds detect at α with 80 % power (``mdd_80``), and the seeds
    each published Focal-InfoNCE gain would need at that spread (:func:`published_gains`). None when
    ``significance.json`` predates ``mdd_80``."""
    gains = published_gains()
    columns = [(loss, b, g) for loss, per in gains.items() for b, g in per.items()]
    rows = []
    for framework in params.sweep.all_frameworks:
        sig = data.significance_of(framework)
        if sig is None:
            continue
        alpha = sig["alpha"]
        for backbone, entry in sig["backbones"].items():
            for loss, tests in entry["ttest"].items():
                test = tests.get("avg")
                if test is None:
                    continue
                if "mdd_80" not in test:
                    return None
                needed = {(lo, b): seeds_needed(g, test["sd_diff"], alpha, POWER) for lo, b, g in columns}
                rows.append(
                    [
                        f"{framework_label(framework)}, `{backbone}`: {loss_label(loss)} − {loss_label(sig['baseline'])}",
                        str(test["n"]),
                        fmt_diff(test),
                        fmt(test["sd_diff"]),
                        fmt(test["mdd_80"]),
                        *[
                            str(needed[(lo, b)]) if lo == loss and needed[(lo, b)] is not None else MISSING
                            for lo, b, _ in columns
                        ],
                    ]
                )
    if not rows:
        return None
    return Table(
        "How much the seeds can see (STS avg, paired t-test)",
        [
            "comparison",
            "seeds",
            "Δ avg",
            "sd of paired Δ",
            f"smallest Δ detected ({POWER:.0%} power)",
            *[f"seeds for {b}'s published +{g:.2f}" for _, b, g in columns],
        ],
        rows,
        f"The smallest true difference of the average that the two-sided paired t-test over these seeds "
        f"detects at α = {alpha:g} with {POWER:.0%} power, given the observed standard deviation of the "
        "per-seed differences (noncentral t), and the seeds the paper's published gains over its own SimCSE "
        "baseline would need at that spread (– where the loss is not the published one). The same "
        "figures for every task are `mdd_80` and `sd_diff` in metrics/significance.json.",
        text_columns=(0,),
    )


# ---------------------------------------------------------------- the paper's claims, measured
PAPER_LOSS = "focal_infonce"  # the loss the paper's claims are about
# framework -> what the paper says Focal-InfoNCE does to it: (measure, claim, lower is better, where)
PAPER_DIRECTIONS: dict[str, tuple[tuple[str, str, bool, str], ...]] = {
    "simcse": (
        ("avg", "higher", False, "Table 2"),
        ("STSBenchmark", "higher", False, "Tables 2, 3"),
        ("alignment", "lower", True, "§4.2, Table 3"),
        ("uniformity", "lower", True, "§3, §4.2, Table 3"),
    ),
    "diffcse": (
        ("STSBenchmark", "higher", False, "Table 3, §5.3"),
        ("alignment", "lower", True, "Table 3, §5.3"),
        ("uniformity", "lower", True, "Table 3, §5.3"),
    ),
    "promptbert": (("STSBenchmark", "no gain", False, "§5.3"), ("avg", "no gain", False, "§5.3")),
}
_MEASURE_LABELS = {"avg": "Avg. (7 tasks)", "alignment": "Alignment ↓", "uniformity": "Uniformity ↓"}


@dataclass(frozen=True)
class ClaimCheck:
    """One measure of one framework: the paper's claim about Focal-InfoNCE, the measured paired test
    against the baseline loss and what it says of the claim (decided on the Holm p only)."""

    framework: str
    measure: str
    claim: str  # "higher" | "lower" | "no gain"
    where: str
    test: dict[str, Any] | None
    family: str | None  # the Holm family in words; None: descriptive
    reading: str  # "agrees" | "contradicts" | "not significant" | "descriptive" | "not tested"

    @property
    def measured(self) -> str:
        if not self.test or self.test.get("mean_diff") is None:
            return "not tested"
        return "higher" if self.test["mean_diff"] > 0 else "lower"


def holm_decision(test: dict[str, Any] | None, alpha: float, family: str | None) -> str:
    """What a paired test says, decided on its Holm-adjusted ``p_holm`` alone: ``not tested`` (no
    Δ), ``descriptive`` (in no Holm family: ``family`` None or no ``p_holm``), ``undefined`` (a NaN
    or missing Holm p), ``significant`` (``p_holm`` < ``alpha``) or ``not significant``. The one rule
    the report's verdict sentences and its claims table both word."""
    if not test or test.get("mean_diff") is None:
        return "not tested"
    if family is None or "p_holm" not in test:
        return "descriptive"
    ph = test["p_holm"]
    if ph is None or ph != ph:
        return "undefined"
    return "significant" if ph < alpha else "not significant"


def _reading(
    test: dict[str, Any] | None, claim: str, lower_is_better: bool, family: str | None, alpha: float
) -> str:
    decision = holm_decision(test, alpha, family)
    if decision in ("not tested", "descriptive"):
        return decision
    if decision == "undefined":
        return "descriptive"
    if decision == "not significant":
        return "consistent (no significant gain)" if claim == "no gain" else "not significant"
    up = test["mean_diff"] > 0
    if claim == "no gain":
        gain = (not up) if lower_is_better else up
        return "contradicts" if gain else "agrees"
    return "agrees" if up == (claim == "higher") else "contradicts"


def claim_checks(params: Params, data: ReportData, backbone: str) -> list[ClaimCheck]:
    """Every measure the paper makes a claim on (:data:`PAPER_DIRECTIONS`), for each framework of the
    sweep with runs on ``backbone`` and a Focal-InfoNCE test there."""
    out = []
    for f in params.sweep.all_frameworks:
        sig = data.significance_of(f)
        if f not in PAPER_DIRECTIONS or sig is None or not framework_has_runs(data, f, backbone):
            continue
        tests = ((sig["backbones"].get(backbone) or {}).get("ttest") or {}).get(PAPER_LOSS)
        if tests is None:
            continue
        for key, claim, lower, where in PAPER_DIRECTIONS[f]:
            family = holm_family_text(sig, key)
            reading = _reading(tests.get(key), claim, lower, family, sig["alpha"])
            out.append(ClaimCheck(f, key, claim, where, tests.get(key), family, reading))
    return out


def claims_table(params: Params, data: ReportData, backbone: str) -> Table | None:
    """The paper's claims about Focal-InfoNCE next to what these runs measured, one row per
    framework and measure: claim, measured direction, Δ, Holm p and the reading (None without any)."""
    checks = claim_checks(params, data, backbone)
    if not checks:
        return None
    rows = [
        [
            framework_label(c.framework),
            _MEASURE_LABELS.get(c.measure, column_label(c.measure)),
            f"{c.claim} ({c.where})",
            c.measured,
            fmt_diff(c.test, 4 if c.measure == "alignment" else 3 if c.measure == "uniformity" else 2),
            fmt_p(c.test, "p_holm", "significant_holm"),
            c.reading,
        ]
        for c in checks
    ]
    caption = (
        f"Focal-InfoNCE against the baseline loss within each framework: Δ = mean paired difference over "
        "matched seeds; the reading is decided on the Holm p alone (α = "
        f"{data.significance.get('alpha', params.significance.alpha):g}; STS measures in the STS family, "
        "alignment and uniformity in theirs): agrees / contradicts = significant in the claimed / the "
        "opposite direction; not significant = no verdict either way. Alignment and uniformity: lower "
        "is better. These runs are not the paper's setting (backbone, length, data), so a reading says "
        "what this setting shows, not whether the paper's numbers hold."
    )
    return Table(
        f"The paper's claims, measured — {backbone}",
        ["Framework", "measure", "paper", "measured", "Δ", "p (Holm)", "reading"],
        rows,
        caption,
    )
