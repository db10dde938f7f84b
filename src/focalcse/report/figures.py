"""The report's figures (matplotlib, Agg backend, PNG): Figure 1, training curves, alignment-uniformity,
ablation curves. Plotting lives here and in :mod:`focalcse.report` only, never in the core modules.
Each loss is drawn in the colour its registry ``SPEC`` declares (:func:`focalcse.report.labels.loss_color`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from focalcse.report.labels import loss_color

UP_COLOR, DOWN_COLOR = "#ff7f0e", "#2ca02c"  # the paper's Figure 1: orange up-, green down-weighted
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return path


def rescaled_logit(s: np.ndarray, m: float) -> np.ndarray:
    """Focal-InfoNCE's negative logit (times τ): s(s + m); InfoNCE's is s."""
    return s * (s + m)


def is_hard_negative(s: np.ndarray | float, m: float) -> np.ndarray:
    """The paper's rule (§4.3): a negative of cosine ``s`` is hard (up-weighted) iff s > 1 − m; every
    other one is easy (down-weighted), s < 0 included although s(s+m) > s there."""
    return np.asarray(s) > 1 - m


def logit_vertex(m: float) -> tuple[float, float]:
    """The vertex of s(s+m): s = −m/2, value −m²/4. The gradient (2s+m)/τ changes sign there."""
    return -m / 2, -m * m / 4


def figure1(ms: Sequence[float], path: str | os.PathLike) -> Path:
    """Figure 1: s(s+m) against s, one panel per m; orange where the negative is hard by the paper's
    rule (s > 1 − m, up-weighted), green elsewhere (easy, down-weighted); the vertex s = −m/2 marked."""
    plt = _pyplot()
    s = np.linspace(-1.0, 1.0, 401)
    fig, axes = plt.subplots(1, len(ms), figsize=(3.6 * len(ms), 3.4), sharey=True, squeeze=False)
    for ax, m in zip(axes[0], ms):
        y = rescaled_logit(s, m)
        hard = is_hard_negative(s, m)
        ax.plot(s, s, color="black", lw=1.2, ls="--", label="InfoNCE: s")
        ax.plot(s, y, color="#9467bd", lw=2.0, label=f"Focal: s(s+{m:g})")
        ax.fill_between(s, s, y, where=hard, color=UP_COLOR, alpha=0.35, label="hard: up-weighted")
        ax.fill_between(s, s, y, where=~hard, color=DOWN_COLOR, alpha=0.35, label="easy: down-weighted")
        ax.axvline(1 - m, color="grey", lw=0.8, ls=":")
        ax.annotate(f"1-m = {1 - m:g}", (1 - m, -0.9), fontsize=8, ha="right", rotation=90, color="grey")
        vs, vy = logit_vertex(m)
        ax.plot([vs], [vy], marker="o", color="black", ms=4, ls="none", label="vertex s = −m/2")
        ax.annotate(f"s = {vs:g}", (vs, vy), fontsize=7, xytext=(0, -11), textcoords="offset points",
                    ha="center")  # fmt: skip
        ax.set_title(f"m = {m:g}")
        ax.set_xlabel("cosine similarity s of a negative pair")
        ax.set_xlim(-1, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("negative logit × τ")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Figure 1: rescaled negative logit s(s+m) vs InfoNCE's s", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def training_curves(
    runs: Mapping[tuple[str, int], tuple[Sequence[Mapping[str, float]], Sequence[Mapping[str, float]]]],
    title: str,
    path: str | os.PathLike,
) -> Path:
    """Loss and STS-B dev Spearman against step; ``runs[(loss, seed)] = (loss_curve, dev_curve)``, one
    colour per loss, seeds overlaid (line style per seed)."""
    plt = _pyplot()
    fig, (ax_loss, ax_dev) = plt.subplots(1, 2, figsize=(11, 3.8))
    styles = ["-", "--", ":", "-."]
    seeds = sorted({seed for _, seed in runs})
    for (loss, seed), (loss_curve, dev_curve) in sorted(runs.items()):
        ls = styles[seeds.index(seed) % len(styles)]
        label = f"{loss} seed {seed}"
        if loss_curve:
            ax_loss.plot(
                [r["step"] for r in loss_curve],
                [r["loss"] for r in loss_curve],
                color=loss_color(loss),
                ls=ls,
                lw=1.2,
                alpha=0.85,
                label=label,
            )
        if dev_curve:
            ax_dev.plot(
                [r["step"] for r in dev_curve],
                [r["stsb_dev_spearman"] for r in dev_curve],
                color=loss_color(loss),
                ls=ls,
                marker="o",
                ms=3,
                lw=1.2,
                alpha=0.85,
                label=label,
            )
    ax_loss.set(xlabel="step", ylabel="training loss", title="loss")
    ax_dev.set(xlabel="step", ylabel="STS-B dev Spearman × 100", title="STS-B dev (step 0 = start)")
    for ax in (ax_loss, ax_dev):
        ax.grid(alpha=0.3)
    ax_dev.legend(fontsize=8, ncol=2)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def alignment_uniformity(points: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Scatter of (uniformity, alignment) per evaluated run (``backbone``, ``loss``, ``seed``,
    ``alignment``, ``uniformity``); lower-left is better."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    markers = ["o", "s", "^", "D", "v", "P"]
    backbones = sorted({p["backbone"] for p in points})
    seen: set[tuple[str, str]] = set()
    for p in points:
        key = (p["backbone"], p["loss"])
        ax.scatter(
            p["uniformity"],
            p["alignment"],
            color=loss_color(p["loss"]),
            marker=markers[backbones.index(p["backbone"]) % len(markers)],
            s=46,
            alpha=0.85,
            label=None if key in seen else f"{p['loss']} ({p['backbone']})",
        )
        ax.annotate(str(p["seed"]), (p["uniformity"], p["alignment"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
        seen.add(key)
    ax.set(xlabel="uniformity (lower is better)", ylabel="alignment (lower is better)")
    ax.set_title("Alignment vs uniformity on STS-B dev (one point per seed)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def y_limits(
    values: Sequence[float], band: tuple[float, float] | None, pad: float = 0.15
) -> tuple[float, float]:
    """An axis range holding every value and the whole band, padded by ``pad`` of its height (at
    least 0.5 points), so the band's scale is visible beside the points."""
    lo = min([*values, *(band or ())])
    hi = max([*values, *(band or ())])
    margin = max(pad * (hi - lo), 0.5)
    return lo - margin, hi + margin


def ablation_curves(
    series: Mapping[str, Sequence[tuple[float, float]]],
    defaults: Mapping[str, float],
    title: str,
    path: str | os.PathLike,
    *,
    loss: str,
    band: tuple[float, float] | None = None,
    default_label: str = "default",
) -> Path:
    """STS-B test Spearman against the swept value, one panel per swept parameter
    (``series[name] = [(value, spearman), ...]``), in the colour of ``loss`` (the loss the ablation
    trains); the default point is marked and ``band`` (the main sweep's min–max over seeds) shaded,
    the y-axis holding both."""
    plt = _pyplot()
    names = [n for n in series if series[n]]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4.6 * max(1, len(names)), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        pts = sorted(series[name])
        ax.plot([v for v, _ in pts], [y for _, y in pts], marker="o", color=loss_color(loss))
        if band is not None:
            ax.axhspan(*band, color="grey", alpha=0.2, lw=0, label="seed band (main sweep)")
        if name in defaults:
            ax.axvline(
                defaults[name], color="grey", ls=":", lw=1, label=f"{default_label}: {defaults[name]:g}"
            )
        ax.set_ylim(*y_limits([y for _, y in pts], band))
        ax.legend(fontsize=8)
        ax.set(xlabel=name, ylabel="STS-B test Spearman × 100")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, path)
