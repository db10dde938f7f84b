"""Significance over seeds: mean±std per backbone × loss × score, a paired t-test of every loss
against the baseline loss on the seeds both have, and Holm–Bonferroni adjusted p-values per family.
Pure functions on evaluation results (no I/O).

A Holm family is the tests of ONE backbone and ONE treatment loss against the baseline on the
evaluated tasks and their average (:func:`holm_keys`: the paper's 7 tasks + ``avg``, 8 p-values);
alignment and uniformity are descriptive and stay outside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from focalcse.eval.stats import holm, paired_ttest, summarize

Run = Mapping[str, Any]  # one evaluation result: scores plus meta.backbone / meta.loss / meta.seed


def score_keys(tasks: Sequence[str]) -> list[str]:
    """The scores summarised and tested: each task, ``avg``, alignment and uniformity."""
    return [*tasks, "avg", "alignment", "uniformity"]


def holm_keys(tasks: Sequence[str]) -> list[str]:
    """The keys of one Holm family: each task and ``avg``."""
    return [*tasks, "avg"]


def add_holm(tests: dict[str, dict[str, Any]], family: Sequence[str], alpha: float) -> None:
    """Add ``p_holm`` (Holm-adjusted over ``family``) and ``significant_holm`` (``p_holm < alpha``) to
    the tests of ``family`` in ``tests`` (one backbone, one loss against the baseline), in place."""
    adjusted = holm([tests[k]["p_value"] for k in family])
    for key, p in zip(family, adjusted):
        tests[key]["p_holm"] = float(p)
        tests[key]["significant_holm"] = bool(p < alpha)


def by_loss(runs: Sequence[Run], backbone: str, seeds: Sequence[int]) -> dict[str, dict[int, Run]]:
    """``{loss: {seed: run}}`` of ``backbone``'s runs whose seed is in ``seeds``."""
    out: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r["meta"]["backbone"] == backbone and r["meta"]["seed"] in seeds:
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
        k: paired_ttest([treatment[s][k] for s in paired], [baseline[s][k] for s in paired], alpha).to_dict()
        for k in keys
    }
    return paired, tests


def significance(
    runs: Sequence[Run],
    backbones: Sequence[str],
    losses: Sequence[str],
    seeds: Sequence[int],
    tasks: Sequence[str],
    baseline: str,
    alpha: float,
) -> dict[str, Any]:
    """The ``significance.json`` document (without ``meta``).

    Per backbone: ``losses`` (summaries), ``seeds`` (the seeds each loss has), and for every other
    loss of ``losses`` with runs: ``paired_seeds[loss]`` and ``ttest[loss][key]`` against ``baseline``;
    the tests of ``holm_family`` (each task and ``avg``) also carry ``p_holm`` / ``significant_holm``,
    adjusted within that backbone and loss.
    """
    keys = score_keys(tasks)
    family = holm_keys(tasks)
    out: dict[str, Any] = {"baseline": baseline, "alpha": alpha, "holm_family": family, "backbones": {}}
    for backbone in backbones:
        grouped = by_loss(runs, backbone, seeds)
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
        out["backbones"][backbone] = entry
    return out


def summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """DVC's metrics (``metrics/summary.json``) from a :func:`significance` document: per loss the
    mean (``avg``) and std (``std``) over seeds of the 7-task average, and for every loss tested
    against the baseline the raw (``p``) and Holm-adjusted (``p_holm``) p-values of that average.

    ``dvc exp show`` prints one column per key with the whole key path as its header, so the keys
    are few and short: ``<loss>.<stat>`` when the sweep has one backbone (its name is in the
    companion ``meta``), ``<backbone>.<loss>.<stat>`` with several. The per-task scores, STS-B and
    the rest stay in ``significance.json`` and the per-item files."""
    out: dict[str, Any] = {}
    for backbone, entry in doc["backbones"].items():
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
        out[backbone] = rows
    return next(iter(out.values())) if len(out) == 1 else out
