"""Significance over seeds: mean±std per framework × backbone × loss × score, a paired t-test of
every loss against the baseline loss of the SAME framework and backbone on the seeds both have, and
Holm–Bonferroni adjusted p-values per family. Pure functions on evaluation results (no I/O).

A Holm family is the tests of ONE framework, ONE backbone and ONE treatment loss against that
framework's baseline-loss runs on that backbone, on the evaluated tasks and their average
(:func:`holm_keys`: the paper's 7 tasks + ``avg``, 8 p-values), as one table of the paper holds them
(Table 2 per framework and backbone; with one treatment loss, as in the paper, the family is the whole
framework × backbone table). Frameworks are never pooled into one family, so adding a framework to a
sweep changes no SimCSE p-value. Alignment and uniformity (Table 3's geometry) are a second family of
their own per framework × backbone × loss (:data:`GEOMETRY_FAMILY`, 2 p-values, ``holm_family_geometry``
in the document): their ``p_holm`` / ``significant_holm`` are adjusted over those two tests only, so the
STS family and its adjusted p-values are exactly what they were before the geometry family existed.

SimCSE's results sit at the top level (``backbones``), exactly as before frameworks existed; every
other framework's under ``frameworks.<framework>.backbones`` (the key is absent for a SimCSE-only
sweep, so its document is unchanged). A run's framework is ``meta.framework`` (a name, or a dict with
``name``), SimCSE when absent.

Every test also says how much its seeds can see: ``sd_diff``, the standard deviation of the paired
differences, and ``mdd_80``, the smallest true difference that many seeds detect at ``alpha`` with 80 %
power at that spread (:func:`focalcse.eval.stats.detectable_difference`). The report turns a test's
spread into the seeds that the paper's published gains would need (:func:`focalcse.eval.stats.seeds_needed`;
the gains live in the report layer)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from focalcse.eval.stats import POWER, detectable_difference, holm, paired_ttest, summarize

Run = Mapping[str, Any]  # one evaluation result: scores plus meta.backbone / loss / seed (/ framework)

# Where the Holm family is, in words (written into a document that has more than one framework).
HOLM_SCOPE = "one framework, one backbone, one loss against that framework's baseline-loss runs"


def run_framework(run: Run) -> str | None:
    """The framework of an evaluation result: ``meta.framework`` (a name or ``{"name": ...}``), None
    when the meta names none (such a run is the reference framework's: :func:`significance`)."""
    f = run.get("meta", {}).get("framework")
    if isinstance(f, Mapping):
        f = f.get("name")
    return None if f is None else str(f)


def score_keys(tasks: Sequence[str]) -> list[str]:
    """The scores summarised and tested: each task, ``avg``, alignment and uniformity."""
    return [*tasks, "avg", "alignment", "uniformity"]


def holm_keys(tasks: Sequence[str]) -> list[str]:
    """The keys of one Holm family: each task and ``avg``."""
    return [*tasks, "avg"]


# The second Holm family of one framework × backbone × loss: the embedding geometry of Table 3.
GEOMETRY_FAMILY: tuple[str, ...] = ("alignment", "uniformity")


def add_holm(tests: dict[str, dict[str, Any]], family: Sequence[str], alpha: float) -> None:
    """Add ``p_holm`` (Holm-adjusted over ``family``) and ``significant_holm`` (``p_holm < alpha``) to
    the tests of ``family`` in ``tests`` (one backbone, one loss against the baseline), in place."""
    adjusted = holm([tests[k]["p_value"] for k in family])
    for key, p in zip(family, adjusted):
        tests[key]["p_holm"] = float(p)
        tests[key]["significant_holm"] = bool(p < alpha)


def by_loss(
    runs: Sequence[Run], backbone: str, seeds: Sequence[int], framework: str | None = None
) -> dict[str, dict[int, Run]]:
    """``{loss: {seed: run}}`` of ``framework``'s runs of ``backbone`` whose seed is in ``seeds`` (None:
    the runs whose meta names no framework)."""
    out: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r["meta"]["backbone"] == backbone and r["meta"]["seed"] in seeds and run_framework(r) == framework:
            out.setdefault(r["meta"]["loss"], {})[int(r["meta"]["seed"])] = r
    return out


def summarize_losses(losses: Mapping[str, Mapping[int, Run]], keys: Sequence[str]) -> dict[str, Any]:
    """Per loss: mean±std over its seeds of every key all its runs have, plus ``wmean_avg``."""
    out: dict[str, Any] = {}
    for loss, seeds in sorted(losses.items()):
        order = sorted(seeds)
        out[loss] = {
            k: summarize([seeds[s][k] for s in order]).to_dict()
            for k in keys
            if all(k in seeds[s] for s in seeds)
        }
        out[loss]["wmean_avg"] = summarize([seeds[s]["wmean"]["avg"] for s in order]).to_dict()
    return out


def compare(
    treatment: Mapping[int, Run], baseline: Mapping[int, Run], keys: Sequence[str], alpha: float
) -> tuple[list[int], dict[str, Any]]:
    """Paired t-test ``treatment - baseline`` per key over the seeds both have."""
    paired = sorted(set(treatment) & set(baseline))
    tests = {
        k: _test([treatment[s][k] for s in paired], [baseline[s][k] for s in paired], alpha) for k in keys
    }
    return paired, tests


def _test(treatment: list[float], baseline: list[float], alpha: float) -> dict[str, Any]:
    """One key's paired t-test, with the spread of its differences and the difference its seeds detect."""
    test = paired_ttest(treatment, baseline, alpha).to_dict()
    n = len(treatment)
    diffs = [a - b for a, b in zip(treatment, baseline, strict=True)]
    test["sd_diff"] = summarize(diffs).std if n > 1 else math.nan
    test["mdd_80"] = detectable_difference(test["sd_diff"], n, alpha, POWER)
    return test


def backbone_entries(
    runs: Sequence[Run],
    backbones: Sequence[str],
    losses: Sequence[str],
    seeds: Sequence[int],
    keys: Sequence[str],
    family: Sequence[str],
    baseline: str,
    alpha: float,
    framework: str | None = None,
) -> dict[str, Any]:
    """``{backbone: entry}`` of one framework: summaries, seeds, and every other loss tested against
    ``baseline`` of the same framework and backbone (Holm within each loss's family)."""
    out: dict[str, Any] = {}
    for backbone in backbones:
        grouped = by_loss(runs, backbone, seeds, framework)
        entry: dict[str, Any] = {
            "losses": summarize_losses(grouped, keys),
            "seeds": {loss: sorted(s) for loss, s in sorted(grouped.items())},
            "paired_seeds": {},
            "ttest": {},
        }
        for loss in losses:
            if loss != baseline and loss in grouped and baseline in grouped:
                entry["paired_seeds"][loss], entry["ttest"][loss] = compare(
                    grouped[loss], grouped[baseline], keys, alpha
                )
                add_holm(entry["ttest"][loss], family, alpha)
                add_holm(entry["ttest"][loss], GEOMETRY_FAMILY, alpha)
        out[backbone] = entry
    return out


def significance(
    runs: Sequence[Run],
    backbones: Sequence[str],
    losses: Sequence[str],
    seeds: Sequence[int],
    tasks: Sequence[str],
    baseline: str,
    alpha: float,
    frameworks: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``significance.json`` document (without ``meta``).

    Per backbone: ``losses`` (summaries), ``seeds`` (the seeds each loss has), and for every other
    loss of ``losses`` with runs: ``paired_seeds[loss]`` and ``ttest[loss][key]`` against ``baseline``;
    the tests of ``holm_family`` (each task and ``avg``) also carry ``p_holm`` / ``significant_holm``,
    adjusted within that backbone and loss, and so do those of ``holm_family_geometry`` (alignment and
    uniformity), adjusted as their own family of two. That is the reference framework's part
    (``backbones``: the first of ``frameworks``, whose runs' meta may also name none); each other
    framework of ``frameworks`` gets the same under ``frameworks.<framework>.backbones``, its losses
    tested against its own baseline-loss runs, and the document then says where the Holm family is
    (``holm_scope``). A one-framework document has neither key.
    """
    keys = score_keys(tasks)
    family = holm_keys(tasks)
    out: dict[str, Any] = {
        "baseline": baseline,
        "alpha": alpha,
        "holm_family": family,
        "holm_family_geometry": list(GEOMETRY_FAMILY),
    }
    if frameworks:  # the reference's runs as one group, whether or not their meta names it
        runs = [r for r in runs if run_framework(r) != frameworks[0]] + [
            {**r, "meta": {k: v for k, v in r["meta"].items() if k != "framework"}}
            for r in runs
            if run_framework(r) == frameworks[0]
        ]
    out["backbones"] = backbone_entries(runs, backbones, losses, seeds, keys, family, baseline, alpha)
    others = list(frameworks[1:])
    if others:
        out["holm_scope"] = HOLM_SCOPE
        out["frameworks"] = {
            f: {
                "backbones": backbone_entries(
                    runs, backbones, losses, seeds, keys, family, baseline, alpha, f
                )
            }
            for f in others
        }
    return out


def _summary_rows(entry: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per loss of one backbone entry: ``avg`` and ``std`` of the 7-task average, and for a tested
    loss ``p`` / ``p_holm`` of that average."""
    rows: dict[str, dict[str, float]] = {}
    for loss, scores in entry["losses"].items():
        if "avg" not in scores:
            continue
        row = {"avg": scores["avg"]["mean"], "std": scores["avg"]["std"]}
        test = entry["ttest"].get(loss, {}).get("avg")
        if test is not None:
            row["p"] = test["p_value"]
            row["p_holm"] = test["p_holm"]
        rows[loss] = row
    return rows


def summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """DVC's metrics (``metrics/summary.json``) from a :func:`significance` document: per loss the
    mean (``avg``) and std (``std``) over seeds of the 7-task average, and for every loss tested
    against the baseline the raw (``p``) and Holm-adjusted (``p_holm``) p-values of that average.

    ``dvc exp show`` prints one column per key with the whole key path as its header, so the keys
    are few and short: ``<loss>.<stat>`` when the sweep has one backbone (its name is in the
    companion ``meta``), ``<backbone>.<loss>.<stat>`` with several. Another framework's losses (tested
    against the same framework's baseline) add ``<framework>.<loss>.<stat>`` (one backbone) or
    ``<backbone>.<framework>.<loss>.<stat>``, after the reference framework's keys; a
    framework with no evaluated run adds nothing. The per-task scores, STS-B and the rest stay in
    ``significance.json`` and the per-item files."""
    out: dict[str, Any] = {backbone: _summary_rows(entry) for backbone, entry in doc["backbones"].items()}
    for framework, fdoc in (doc.get("frameworks") or {}).items():
        for backbone, entry in fdoc["backbones"].items():
            rows = _summary_rows(entry)
            if not rows:
                continue
            here = out.setdefault(backbone, {})
            if framework in here:
                raise ValueError(f"summary: framework {framework!r} has the name of a loss of {backbone}")
            here[framework] = rows
    return next(iter(out.values())) if len(out) == 1 else out
