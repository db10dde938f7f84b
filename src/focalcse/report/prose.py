"""The report's sentences about its numbers: every verdict ("significant", "improves") decides on
the Holm-adjusted p of the family it names (method.md, "Statistics")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from focalcse.config import Params
from focalcse.eval.stats import span
from focalcse.report.data import AblationPoint, ReportData
from focalcse.report.labels import loss_label, run_label
from focalcse.report.published import (
    backbone_key,
    published_backbones,
)
from focalcse.report.render import (
    fmt,
    fmt_diff,
)
from focalcse.report.tables import (
    ABLATION_SYMBOLS,
    SeedBand,
    _and,
    ablation_scores,
    framework_has_runs,
    framework_runs_label,
    holm_decision,
    holm_family_text,
    paper_claim,
)

# ---------------------------------------------------------------- table builders


def last_step_note(
    params: Params, data: ReportData, backbone: str, framework: str | None = None
) -> str | None:
    """Under a Table 2: for every run of ``framework`` on ``backbone`` with training metrics, whether
    its best STS-B dev checkpoint (``best_step``) was its last step (``steps``), in one or two
    sentences; a run best at its last step was still improving when training stopped. None when no
    run of the table has training metrics."""
    framework = framework or params.sweep.reference
    trains = data.trains if framework == params.sweep.reference else data.framework_trains.get(framework, {})
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
    decision = holm_decision(test, alpha, family)
    if decision == "not tested":
        return "not tested"
    p = test.get("p_value")
    raw = f"raw p = {p:.3g}" if _defined(p) else "raw p undefined"
    n = test.get("n", "?")
    diff = fmt_diff(test, digits)
    if decision == "descriptive":
        return f"{diff} ({raw}, n = {n}; descriptive: in no Holm family, no significance verdict)"
    if decision == "undefined":
        return f"{diff} ({raw}, Holm p undefined over {family}, n = {n}; no verdict)"
    ph = test["p_holm"]
    if decision == "significant":
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


def framework_claim(params: Params, data: ReportData, backbone: str, framework: str) -> str | None:
    """One plain paragraph: what ``framework``'s measured numbers on ``backbone`` do and do not say
    about the paper's claim on it, worded by its settings class (``claim_paragraph``) from the verdict
    of each measure its ``PAPER_CLAIM`` names; None without a claim or without its runs there."""
    claim = paper_claim(params, framework)
    if claim is None or not framework_has_runs(data, framework, backbone):
        return None
    sig = data.significance_of(framework)
    entry = sig["backbones"][backbone]
    measured = [
        (
            run_label(framework, loss, sig["baseline"]),
            {key: _said(sig, tests, key, **options) for key, options in claim["measures"]},
        )
        for loss, tests in entry.get("ttest", {}).items()
    ]
    n_seeds = len(params.sweep.seeds)
    runs = [ev for (b, _, _), ev in data.framework_evals.get(framework, {}).items() if b == backbone]
    paper = set(published_backbones())
    facts = {
        "backbone": backbone,
        "measured": measured,
        "size": f"{params.data.num_sentences:,} training sentences, {n_seeds} seed{'s' if n_seeds != 1 else ''}",
        "device": _device(runs),
        "small": not {backbone_key(backbone), backbone_key(params.backbone_source(backbone))} & paper,
    }
    return params.frameworks.settings(framework).claim_paragraph(facts)


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
