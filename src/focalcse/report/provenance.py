"""What produced the report's numbers: code version, params, data, hardware and wall times."""

from __future__ import annotations

from typing import Any

from focalcse.config import Params
from focalcse.report.data import ReportData
from focalcse.report.labels import framework_label
from focalcse.report.render import (
    fmt_seconds,
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
