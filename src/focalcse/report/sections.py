"""The report's sections, in the order they appear: :data:`SECTIONS`.

A section is a function ``(ctx) -> None`` that appends its heading, paragraphs, tables and figures
to ``ctx.doc`` (and records each figure it draws in ``ctx.paths``). Adding a table to the report is
writing one such function and putting it in :data:`SECTIONS`; the renderers, the HTML page and the
build need no change. The table builders (``table2`` ...) are pure: params and data in, a
:class:`~focalcse.report.render.Table` out.

A sweep with frameworks besides SimCSE (``sweep.frameworks``) adds, and only then: a section on the
frameworks (DiffCSE's generator, PromptBERT's denoising), Table 2 for every framework, their published
rows for reference, Table 3 over every framework (the paper's layout: SimCSE, SimCSE + Focal-InfoNCE,
DiffCSE, DiffCSE + Focal-InfoNCE, ...) and the PromptBERT rows of §5.3. Every test is within one
framework and backbone (:mod:`focalcse.eval.significance`). The per-run figures (training curves,
the alignment-uniformity scatter), the ablations and the hard negatives stay SimCSE's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from focalcse.config import BASE_FRAMEWORK, Params, TrainConfig
from focalcse.eval.stats import Span, span
from focalcse.layout import ABLATION_KINDS
from focalcse.report import figures
from focalcse.report.data import AblationPoint, ReportData, ablation_default
from focalcse.report.labels import column_label, framework_label, loss_label, metric_columns, run_label
from focalcse.report.published import (
    PUBLISHED_FRAMEWORKS,
    PublishedRow,
    backbone_key,
    published_backbones,
    published_rows,
)
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


def published_label(row: PublishedRow) -> str:
    """A published row's first cell: ``Published: label [source]``, or for a row with derived
    numbers ``Derived: label; avg = a − b (why) [source]``."""
    if not row.derived:
        note = f" ({row.avg_note})" if row.avg_note else ""
        return f"Published: {row.label}{note} [{row.source}]"
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


def framework_runs_label(params: Params, framework: str) -> Callable[[str], str]:
    """How a framework's table names a loss's row: SimCSE's tables by the loss label alone (as before
    frameworks existed); another framework's as the paper's Table 3, e.g. ``DiffCSE + Focal-InfoNCE``."""
    if framework == BASE_FRAMEWORK:
        return loss_label
    return lambda loss: run_label(framework, loss, params.significance.baseline)


def table2(params: Params, data: ReportData, backbone: str, framework: str = BASE_FRAMEWORK) -> Table:
    """Per backbone: ours (mean ± std over seeds) per loss; Δ, the paired t-test p and its
    Holm-adjusted p per column for each loss against the baseline; the published (and derived) rows
    where the backbone has them. For a framework other than SimCSE: its runs, each loss tested against
    the same framework's baseline-loss runs (one Holm family per framework, backbone and loss)."""
    if framework != BASE_FRAMEWORK:
        return framework_table2(params, data, backbone, framework)
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


def framework_table2(params: Params, data: ReportData, backbone: str, framework: str) -> Table:
    """Table 2 of one framework other than SimCSE (see :func:`table2`)."""
    sig = data.significance_of(framework)
    if sig is None or backbone not in sig["backbones"]:
        raise ValueError(f"significance.json has no {framework} entry for {backbone}")
    name = framework_label(framework)
    cols = metric_columns(params, sig)
    header = ["Model", "seeds", *[column_label(c) for c in cols]]
    label = framework_runs_label(params, framework)
    rows, classes = loss_rows(params, sig, backbone, [(c, 2) for c in cols], holm=True, label=label)
    published = published_rows(backbone, params.backbone_source(backbone), framework=framework)
    for r in published:
        rows.append([published_label(r), MISSING] + [fmt(r.scores.get(c)) for c in cols])
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


def last_step_note(
    params: Params, data: ReportData, backbone: str, framework: str = BASE_FRAMEWORK
) -> str | None:
    """Under a Table 2: for every run of ``framework`` on ``backbone`` with training metrics, whether
    its best STS-B dev checkpoint (``best_step``) was its last step (``steps``), in one or two
    sentences; a run best at its last step was still improving when training stopped. None when no
    run of the table has training metrics."""
    trains = data.trains if framework == BASE_FRAMEWORK else data.framework_trains.get(framework, {})
    label = framework_runs_label(params, framework)
    last, earlier, unknown, no_dev = [], [], [], []
    steps = set()
    for loss in params.sweep.losses:
        for seed in params.sweep.seeds:
            tr = trains.get((backbone, loss, seed))
            if tr is None:
                continue
            name = f"{label(loss)} seed {seed}"
            dev = tr.get("stsb_dev_best", 0.0)
            if tr.get("best_step") is None or tr.get("steps") is None:
                unknown.append(name)
            elif dev is None or not math.isfinite(dev):  # no dev selection: the last step is kept
                no_dev.append(name)
            elif tr["best_step"] == tr["steps"]:
                last.append(name)
                steps.add(tr["steps"])
            else:
                earlier.append(name)
    if not (last or earlier or unknown or no_dev):
        return None
    texts = []
    if last and not earlier:
        at = f"step {steps.pop()}" if len(steps) == 1 else "each run's last step"
        who = "Every run's" if not (unknown or no_dev) else f"Every recorded dev-selected run's ({len(last)})"
        texts.append(
            f"{who} best STS-B dev checkpoint was its last step ({at}): the models were still improving "
            "when training stopped, so the comparison is of models that had not converged."
        )
    elif last:
        texts.append(
            f"Best STS-B dev checkpoint at the last step (still improving when training stopped): "
            f"{_and(last)}; before the last step: {_and(earlier)}."
        )
    elif earlier:
        texts.append("No run's best STS-B dev checkpoint was its last step.")
    if no_dev:
        texts.append(f"Not selected on STS-B dev (the last step is kept): {_and(no_dev)}.")
    if unknown:
        texts.append(f"Best step or step count not recorded: {_and(unknown)}.")
    return " ".join(texts)


def framework_has_runs(data: ReportData, framework: str, backbone: str) -> bool:
    """Whether ``significance.json`` summarises any run of ``framework`` on ``backbone``."""
    sig = data.significance_of(framework)
    return sig is not None and bool(sig["backbones"].get(backbone, {}).get("losses"))


def framework_published_reference(params: Params, data: ReportData) -> Table | None:
    """The published rows of the sweep's frameworks besides SimCSE (their own papers' / repositories'
    BERT-base rows, no Focal-InfoNCE) that no framework Table 2 shows beside our runs; None if none."""
    shown = {
        (r.framework, r.backbone)
        for f in params.sweep.frameworks
        for b in params.sweep.backbones_of(f)
        for r in published_rows(b, params.backbone_source(b), framework=f)
    }
    rows_ = [  # in sweep order
        r
        for f in params.sweep.frameworks
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
    caption = (
        f"{names} as their own authors published them (unsupervised, each framework's own InfoNCE-based "
        "objective, no Focal-InfoNCE), for reference only: not produced here, each with its source. The "
        "Focal-InfoNCE paper's own DiffCSE and DiffCSE + Focal-InfoNCE numbers (its Table 3) were lost in "
        "the captured text, so none is shown; §5.3 reports no gain of Focal-InfoNCE with PromptBERT "
        "without a table. Compare none of these rows with the runs above, which start from another "
        "backbone and train on a small sample."
    )
    return Table(
        f"Published {names} rows (reference)",
        ["Row", "framework", "backbone", *[column_label(c) for c in cols]],
        rows,
        caption,
        ["published"] * len(rows),
    )


# (key, column, format): alignment / uniformity to 3 significant digits, Spearman to 2 decimals
TABLE3_KEYS: tuple[tuple[str, str, Digits], ...] = (
    ("alignment", "Alignment ↓", ".3g"),
    ("uniformity", "Uniformity ↓", ".3g"),
    ("STSBenchmark", column_label("STSBenchmark"), 2),
)


# Table 3 over several frameworks: the paper's column names
TABLE3_FRAMEWORK_LABELS = {"alignment": "ALGN ↓", "uniformity": "UNIF ↓"}


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


def table3(params: Params, data: ReportData, backbone: str) -> Table:
    """Alignment, uniformity (STS-B dev; lower is better) and STS-B Spearman per loss, mean ± std.
    With frameworks besides SimCSE, the paper's Table 3: every framework's rows (``SimCSE``,
    ``SimCSE + Focal-InfoNCE``, ``DiffCSE``, ...), each loss tested against the same framework's
    baseline-loss runs (paired t-test over matched seeds: raw p, and the Holm p of each column's family:
    alignment and uniformity their own, STS-B Table 2's)."""
    if params.sweep.frameworks:
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


def promptbert_table(params: Params, data: ReportData, backbone: str) -> Table | None:
    """§5.3: PromptBERT trained with the baseline loss against PromptBERT with every other loss, the
    7-task average and STS-B, Δ, raw p and Holm p (of PromptBERT's Table 2 family); None without
    PromptBERT runs on ``backbone``."""
    if not framework_has_runs(data, "promptbert", backbone):
        return None
    sig = data.significance_of("promptbert")
    keys = [k for k in ("avg", "STSBenchmark") if k in metric_columns(params, sig)]
    rows, classes = loss_rows(
        params,
        sig,
        backbone,
        [(k, 2) for k in keys],
        holm=True,
        label=framework_runs_label(params, "promptbert"),
    )
    n_tasks = len([c for c in metric_columns(params, sig) if c != "avg"])
    family = holm_family_text(sig, "avg") or "no Holm family"
    caption = (
        f"Avg. = the {n_tasks}-task average, STS-B = STS-B test, Spearman × 100, mean ± std (ddof 1) over "
        "seeds; Δ and raw p: two-sided paired t-test over matched seeds against PromptBERT trained with "
        f"the baseline loss (`{sig['baseline']}`) (the same tests as in PromptBERT's Table 2); p (Holm): "
        f"adjusted within {family} of PromptBERT's Table 2, on which the sentence below decides."
    )
    return Table(
        f"PromptBERT + Focal-InfoNCE (§5.3) — {backbone}",
        ["Model", "seeds", *[column_label(k) for k in keys]],
        rows,
        caption,
        classes,
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


def _defined(p: Any) -> bool:
    return p is not None and p == p


def _direction(
    test: dict[str, Any] | None,
    alpha: float,
    family: str | None = None,
    lower_is_better: bool = False,
    digits: int = 2,
) -> str:
    """A paired test in words: its Δ, the raw p (information only), and the verdict, decided on the
    Holm-adjusted ``p_holm`` of ``family`` (its name in words, :func:`holm_family_text`): a
    significant gain / loss (improvement / worsening for ``lower_is_better`` scores such as alignment
    and uniformity, where a negative Δ is the improvement) when ``p_holm`` < ``alpha``, else not
    significant. A test in no Holm family (``family`` None, or no ``p_holm``) is called descriptive
    and gets no verdict: the raw p alone never makes a difference significant."""
    if not test or test.get("mean_diff") is None:
        return "not tested"
    p = test.get("p_value")
    raw = f"raw p = {p:.3g}" if _defined(p) else "raw p undefined"
    n = test.get("n", "?")
    diff = fmt_diff(test, digits)
    if family is None or "p_holm" not in test:
        return f"{diff} ({raw}, n = {n}; descriptive: in no Holm family, no significance verdict)"
    ph = test["p_holm"]
    if not _defined(ph):
        return f"{diff} ({raw}, Holm p undefined over {family}, n = {n}; no verdict)"
    if ph < alpha:
        better = (test["mean_diff"] < 0) if lower_is_better else (test["mean_diff"] > 0)
        if lower_is_better:
            word = "a significant improvement" if better else "a significant worsening"
        else:
            word = "a significant gain" if better else "a significant loss"
        verdict = f"{word} at α = {alpha:g} after Holm"
    else:
        verdict = f"not significant at α = {alpha:g} after Holm"
    return f"{diff} ({raw}, Holm p = {ph:.3g} over {family}, n = {n}; {verdict})"


def _said(sig: dict[str, Any], tests: dict[str, Any], key: str, **kwargs: Any) -> str:
    """:func:`_direction` of ``tests[key]``, decided within the Holm family ``sig`` puts ``key`` in."""
    return _direction(tests.get(key), sig["alpha"], holm_family_text(sig, key), **kwargs)


def _device(runs: Sequence[dict[str, Any]]) -> str:
    """``"CPU "`` / ``"GPU "`` when every run's meta records the same kind of device, else ``""``."""
    kinds = set()
    for ev in runs:
        hw = ev.get("meta", {}).get("hardware") or {}
        kinds.add(None if "cuda" not in hw else ("GPU" if hw["cuda"] else "CPU"))
    return f"{kinds.pop()} " if len(kinds) == 1 and None not in kinds else ""


def promptbert_sentence(params: Params, data: ReportData, backbone: str) -> str:
    """One plain paragraph: what the measured PromptBERT numbers on ``backbone`` do and do not say
    about §5.3 (no gain from Focal-InfoNCE with PromptBERT; the paper's guess why)."""
    sig = data.significance_of("promptbert")
    entry = sig["backbones"][backbone]
    parts = []
    for loss, tests in entry.get("ttest", {}).items():
        parts.append(
            f"{run_label('promptbert', loss, sig['baseline'])} against PromptBERT: 7-task average "
            f"{_said(sig, tests, 'avg')}, STS-B {_said(sig, tests, 'STSBenchmark')}"
        )
    measured = "; ".join(parts) if parts else "no loss was tested against PromptBERT's baseline-loss runs"
    n_seeds = len(params.sweep.seeds)
    runs = [ev for (b, _, _), ev in data.framework_evals.get("promptbert", {}).items() if b == backbone]
    device = _device(runs)
    size = f"{params.data.num_sentences:,} training sentences, {n_seeds} seed{'s' if n_seeds != 1 else ''}"
    paper = set(published_backbones())
    if not {backbone_key(backbone), backbone_key(params.backbone_source(backbone))} & paper:
        setting = f"in small {device}runs from `{backbone}` ({size}), not from the paper's BERT-base"
    else:
        setting = f"in {device}runs from `{backbone}` ({size})"
    return (
        f"Measured here, {setting}: {measured}. The paper (§5.3) saw no improvement from Focal-InfoNCE "
        "with PromptBERT and guessed that PromptBERT's positives come from two different templates, not "
        "from dropout alone. These numbers can agree or disagree with the paper's finding only for this "
        "setting: a difference not significant after Holm from so few seeds is not evidence of no "
        "effect, a significant one on this backbone and corpus need not carry over to BERT-base, and "
        "nothing here "
        "tests the paper's explanation (that would need PromptBERT runs that change how positives are "
        "made)."
    )


def diffcse_sentence(params: Params, data: ReportData, backbone: str) -> str | None:
    """One plain paragraph: what the measured DiffCSE numbers on ``backbone`` do and do not say about
    the paper's Table 3 claim (Focal-InfoNCE improves DiffCSE's alignment, uniformity and STS-B);
    None without DiffCSE runs there."""
    if not framework_has_runs(data, "diffcse", backbone):
        return None
    sig = data.significance_of("diffcse")
    entry = sig["backbones"][backbone]
    parts = [
        f"{run_label('diffcse', loss, sig['baseline'])} against DiffCSE: STS-B "
        f"{_said(sig, tests, 'STSBenchmark')}, alignment "
        f"{_said(sig, tests, 'alignment', lower_is_better=True, digits=4)}, "
        f"uniformity {_said(sig, tests, 'uniformity', lower_is_better=True, digits=3)}"
        for loss, tests in entry.get("ttest", {}).items()
    ]
    measured = "; ".join(parts) if parts else "no loss was tested against DiffCSE's baseline-loss runs"
    n_seeds = len(params.sweep.seeds)
    size = f"{params.data.num_sentences:,} training sentences, {n_seeds} seed{'s' if n_seeds != 1 else ''}"
    generator = params.frameworks.diffcse.generator or "the small MLM of the pretrain_generator stage"
    paper = set(published_backbones())
    small = not {backbone_key(backbone), backbone_key(params.backbone_source(backbone))} & paper
    setting = f"in {'small ' if small else ''}runs from `{backbone}` ({size}, generator: {generator})"
    return (
        f"Measured here, {setting}: {measured} (alignment and uniformity: lower is better). The paper's Table 3 reports that Focal-InfoNCE improves DiffCSE on BERT-base in "
        "alignment, uniformity and STS-B Spearman; its numbers were lost in the captured text, so only the "
        "direction can be compared. These runs test that direction for this setting only: "
        + (
            "a backbone already tuned for sentence similarity, a short run and a weak stand-in generator "
            "(distilbert-base-uncased cannot be downloaded here) are far from the paper's, so agreement does "
            "not confirm the BERT-base result and disagreement does not refute it; "
            if small
            else ""
        )
        + "a difference not significant after Holm from so few seeds is not evidence of no effect."
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
    for runs in [*data.framework_evals.values(), *data.framework_trains.values()]:
        metas += [r.get("meta", {}) for r in runs.values()]
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
    if data.framework_evals or data.framework_trains:  # a sweep with frameworks besides SimCSE
        out["train_framework"] = [
            r["wall_seconds"]
            for runs in data.framework_trains.values()
            for r in runs.values()
            if r.get("wall_seconds") is not None
        ]
        out["evaluate_framework"] = [
            r["meta"]["wall_time_s"]
            for runs in data.framework_evals.values()
            for r in runs.values()
            if r.get("meta", {}).get("wall_time_s") is not None
        ]
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
        *(
            [
                f"Frameworks: {', '.join(framework_label(f) for f in params.sweep.all_frameworks)} (sweep.frameworks)"
            ]
            if params.sweep.frameworks
            else []
        ),
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
        + (
            f" As the paper's Table 3 and §5.3, the same losses also train "
            f"{_and([framework_label(f) for f in ctx.params.sweep.frameworks])}, each loss compared with "
            "the same framework trained with the baseline loss."
            if ctx.params.sweep.frameworks
            else ""
        )
    )


def provenance(ctx: Context) -> None:
    ctx.doc.h2("What produced this report")
    ctx.doc.bullets(provenance_items(ctx.params, ctx.data, ctx.params_file, ctx.commit))


def sts_tables(ctx: Context) -> None:
    ctx.doc.h2("Table 2: STS tasks (Spearman × 100)")
    for b in ctx.data.significance["backbones"]:
        ctx.doc.table(table2(ctx.params, ctx.data, b))
        if (note := last_step_note(ctx.params, ctx.data, b)) is not None:
            ctx.doc.p(note)
    reference = published_reference(ctx.params, ctx.data)
    if reference is not None:
        ctx.doc.table(reference)
    framework_sts_tables(ctx)


def framework_sts_tables(ctx: Context) -> None:
    """Table 2 of every framework besides SimCSE, per backbone, and their published rows; what is
    missing (no item evaluated, or significance.json written before the framework joined) is said."""
    params, data = ctx.params, ctx.data
    if not params.sweep.frameworks:
        return
    ctx.doc.p(
        "The same table for every other framework of the sweep: its runs with each loss, tested against "
        "the same framework trained with the baseline loss on the same backbone."
    )
    for f in params.sweep.frameworks:
        for b in params.sweep.backbones_of(f):
            if framework_has_runs(data, f, b):
                ctx.doc.table(table2(params, data, b, f))
                if (note := last_step_note(params, data, b, f)) is not None:
                    ctx.doc.p(note)
            else:
                ctx.doc.p(
                    f"Table 2 — {framework_label(f)} — `{b}`: not available (no evaluated {f} item of "
                    "this backbone in metrics/significance.json; run the `evaluate_framework` and "
                    "`significance` stages)."
                )
    reference = framework_published_reference(params, data)
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
        if "diffcse" in ctx.params.sweep.frameworks and (text := diffcse_sentence(ctx.params, ctx.data, b)):
            ctx.doc.p(text)
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
            "Alignment against uniformity on STS-B dev, one point per run (label = seed); lower-left is better."
            + (
                " SimCSE runs only (the other frameworks' are in Table 3)."
                if ctx.params.sweep.frameworks
                else ""
            ),
        )


def ablations(ctx: Context) -> None:
    params, data = ctx.params, ctx.data
    ctx.doc.h2("Tables 4 and 5: τ and m ablations (STS-B test)")
    band = seed_band(params, data)
    swept = [kind for kind in ABLATION_TABLES if params.ablation_values(kind)]  # [] = no such table
    for kind in ABLATION_TABLES:
        if kind not in swept:
            key = "ablation.temperatures" if kind == "tau" else "ablation.ms"
            ctx.doc.p(
                f"Table {ABLATION_TABLES[kind]} (effect of {ABLATION_SYMBOLS[kind]}): not run in this "
                f"parameter set (`{key}` is empty)."
            )
            continue
        ctx.doc.table(ablation_table(params, data, kind))
        ctx.doc.p(f"{band_line(params, band)} {band_sentence(kind, data.ablation.get(kind, []), band)}")
    series = {
        ABLATION_SYMBOLS[k]: ablation_scores(points) for k, points in data.ablation.items() if k in swept
    }
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
        + (
            " SimCSE runs only: the other frameworks' curves are in metrics/curves/ (`dvc plots show`)."
            if ctx.params.sweep.frameworks
            else ""
        )
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


def framework_notes(params: Params) -> list[str]:
    """What the sweep's frameworks besides SimCSE are here, computed from params: how each makes its
    positives, DiffCSE's generator, PromptBERT's denoising, and what stays SimCSE-only."""
    notes = []
    fw = params.frameworks
    if "diffcse" in params.sweep.frameworks:
        d = fw.diffcse
        if d.generator:
            gen = f"the generator is `{d.generator}` (`frameworks.diffcse.generator`)"
        else:
            g = d.pretrain
            gen = (
                "the generator is the small MLM the `pretrain_generator` stage trained on the training "
                f"corpus with the backbone's tokenizer ({g.layers} layers, hidden {g.hidden}, {g.steps} steps from "
                "random weights), not `distilbert-base-uncased` (the official generator for BERT, which "
                'cannot be downloaded here), because `frameworks.diffcse.generator` is ""; its edits are '
                "therefore cruder than the official ones"
            )
        notes.append(
            "DiffCSE (Chuang et al., 2022): SimCSE's contrastive loss (the loss under test) plus "
            f"λ = {d.lambda_weight:g} × a conditional replaced-token-detection loss on sentences masked at "
            f"{d.mask_ratio:g} and refilled by a frozen MLM generator"
            f"{', BatchNorm projector' if d.batchnorm else ''}; {gen}."
        )
    if "promptbert" in params.sweep.frameworks:
        pb = fw.promptbert
        notes.append(
            "PromptBERT (Jiang et al., 2022): the sentence vector is the [MASK] state of a template "
            f"(templates `{pb.templates}`); the two views of a sentence use two different templates, "
            f"{'denoised' if pb.denoise else 'not denoised'} in training (`frameworks.promptbert.denoise`), "
            "and the loss under test replaces InfoNCE. The dev checkpoint is selected "
            f"{'with' if pb.denoise else 'without'} template denoising (as the official training run, "
            "CLTrainer.evaluate). "
            + (
                "**Variant:** the test sets are scored *with* template denoising "
                "(`frameworks.promptbert.eval_denoise: true`); the official unsupervised evaluation "
                "(evaluation.py, eval_only.sh) scores them without it, so these PromptBERT scores are not "
                "comparable with the published ones."
                if pb.eval_denoise
                else "The test sets are scored without template denoising, as the official unsupervised "
                "evaluation (evaluation.py, eval_only.sh; `frameworks.promptbert.eval_denoise: false`)."
            )
        )
    notes.append(
        "Per-run figures (training curves, the alignment-uniformity scatter), the τ / m ablations and the "
        "hard negatives are SimCSE's only; the tables below cover every framework."
    )
    return notes


def frameworks(ctx: Context) -> None:
    """Only with frameworks besides SimCSE: what they are here (see :func:`framework_notes`)."""
    if not ctx.params.sweep.frameworks:
        return
    names = _and([framework_label(f) for f in ctx.params.sweep.frameworks])
    ctx.doc.h2(f"Frameworks besides SimCSE: {names}")
    ctx.doc.bullets(framework_notes(ctx.params))


def promptbert(ctx: Context) -> None:
    """Only with PromptBERT in the sweep: §5.3's comparison, per backbone, and what it says."""
    if "promptbert" not in ctx.params.sweep.frameworks:
        return
    ctx.doc.h2("PromptBERT with Focal-InfoNCE (§5.3)")
    for b in ctx.params.sweep.backbones_of("promptbert"):
        table = promptbert_table(ctx.params, ctx.data, b)
        if table is None:
            ctx.doc.p(f"`{b}`: no evaluated PromptBERT item in metrics/significance.json yet.")
            continue
        ctx.doc.table(table)
        ctx.doc.p(promptbert_sentence(ctx.params, ctx.data, b))


# The report, top to bottom.
SECTIONS: list[Section] = [
    intro,
    provenance,
    departures,
    frameworks,
    sts_tables,
    alignment_uniformity,
    promptbert,
    ablations,
    focal_figure,
    training_curves,
    hard_negatives,
]
