"""Significance over seeds: mean±std per backbone × loss × score, and a paired t-test of every loss
against the baseline loss on the seeds both have. Pure functions on evaluation results (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from focalcse.eval.stats import paired_ttest, summarize

Run = Mapping[str, Any]  # one evaluation result: scores plus meta.backbone / meta.loss / meta.seed


def score_keys(tasks: Sequence[str]) -> list[str]:
    """The scores summarised and tested: each task, ``avg``, alignment and uniformity."""
    return [*tasks, "avg", "alignment", "uniformity"]


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
    loss of ``losses`` with runs: ``paired_seeds[loss]`` and ``ttest[loss][key]`` against ``baseline``.
    """
    keys = score_keys(tasks)
    out: dict[str, Any] = {"baseline": baseline, "alpha": alpha, "backbones": {}}
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
        out["backbones"][backbone] = entry
    return out
