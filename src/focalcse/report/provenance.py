"""What produced the report's numbers: code version, params, data, hardware and wall times."""

from __future__ import annotations

from typing import Any

from focalcse.config import Params
from focalcse.provenance import RUN_STARTED_ENV
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
    trains = [data.trains, *data.framework_trains.values()]  # the reference's runs, then the others'
    evals = [data.evals, *data.framework_evals.values()]
    out = {
        "train": [
            r["wall_seconds"] for runs in trains for r in runs.values() if r.get("wall_seconds") is not None
        ],
        "evaluate": [
            r["meta"]["wall_time_s"]
            for runs in evals
            for r in runs.values()
            if r.get("meta", {}).get("wall_time_s") is not None
        ],
        "ablate_tau / ablate_m": [it["wall_seconds"] for it in _ablation_items(data) if "wall_seconds" in it],
        "hard_negatives": list(data.hard_negatives.get("item_wall_seconds", []))
        if data.hard_negatives
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
        *(
            [
                f"Frameworks: {', '.join(framework_label(f) for f in params.sweep.all_frameworks)} (sweep.frameworks)"
            ]
            if params.sweep.others
            else []
        ),
        "Hardware: " + ("; ".join(hardware) if hardware else "not recorded"),
        "Versions: " + (", ".join(f"{k} {v}" for k, v in versions.items()) if versions else "not recorded"),
        f"Wall time: {fmt_seconds(total)} ({total:.1f} s), the sum of the stage wall times recorded in the "
        "metrics files (process start-up and the sample, prepare_sts, significance and report stages not "
        "included): "
        + "; ".join(f"{k} {s:.1f} s ({n} file{'s' if n != 1 else ''})" for k, (s, n) in walls.items()),
    ]


# ---------------------------------------------------------------- the run's provenance record
PROVENANCE_FILE = "provenance.json"  # beside each set's report.md
PROVENANCE_FIELDS = ("commit", "param_set", "cpu_model", "cpu_flags", "command", "wall_seconds", "date")
# set by `make reproduce` around `dvc repro`: the command and its start (epoch seconds)
RUN_COMMAND_ENV = "FOCALCSE_RUN_COMMAND"
FULL_RUN_HOW = "`make reproduce REPRO_ARGS=-f` reruns every stage and records a full run's time"


def items_run(data: ReportData, started: str | None) -> tuple[int, int]:
    """(items whose meta says they ran in the ``make reproduce`` invocation that started at
    ``started``, items the report reads): equal when that invocation was a full run."""
    metas = _metas(data)
    ran = sum(1 for m in metas if started and m.get("run_started") == started)
    return ran, len(metas)


def run_record(
    params: Params,
    data: ReportData,
    commit: str,
    env: dict[str, str] | None = None,
    now: float | None = None,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What produced this run's results, at its end (the report stage): commit, parameter set
    (``tracking.experiment``), this machine's CPU model and matmul flags (``/proc/cpuinfo``), the
    command, the wall time since it started and the date it ended (from ``make reproduce``'s
    environment), and the sum of the stage wall times the metrics files record. A field that cannot be
    known is None, its reason under ``unrecorded``.

    The wall time is a full run's only: when some items were up to date and did not run (their meta
    has another ``run_started``), or the run did not go through ``make reproduce``, the ``previous``
    record's full run (the report folder's ``provenance.json`` before this run) is kept and this run is
    recorded under ``rerun`` beside it; without such a record the wall time is unrecorded, saying how
    to get one. Outside ``make reproduce`` the record holds no clock reading, so a plain ``dvc repro``
    of an unchanged run rebuilds a byte-identical report."""
    import os
    import time
    from datetime import datetime, timezone

    from focalcse.provenance import cpu_info

    env = dict(os.environ) if env is None else env
    now = time.time() if now is None else now
    cpu = cpu_info()
    record: dict[str, Any] = {
        "commit": commit,
        "param_set": (params.raw.get("tracking") or {}).get("experiment"),
        "cpu_model": cpu["cpu_model"],
        "cpu_flags": cpu["cpu_flags"],
        "command": env.get(RUN_COMMAND_ENV),
        "wall_seconds": None,
        "date": None,
        "stage_seconds": round(sum(s for s, _ in wall_times(data).values()), 1),
        "unrecorded": {},
    }
    started = env.get(RUN_STARTED_ENV)
    seconds, why_not = None, None
    if started:
        record["date"] = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
        try:
            seconds = round(now - float(started), 1)
        except ValueError:
            why_not = f"{RUN_STARTED_ENV}={started!r} is not epoch seconds"
    else:
        why_not = f"not started through `make reproduce` ({RUN_STARTED_ENV} unset)"
        record["unrecorded"]["date"] = why_not
    ran, items = items_run(data, started)
    if seconds is not None and ran == items:
        record["wall_seconds"] = seconds
    else:
        if why_not is None:
            why_not = f"a rerun: {ran} of {items} items ran, the rest were up to date; {FULL_RUN_HOW}"
        rerun = {k: record[k] for k in ("commit", "cpu_model", "command", "date") if record[k] is not None}
        rerun |= {"items_run": ran, "items": items} if started else {}
        rerun |= {"seconds": seconds} if seconds is not None else {}
        if previous and previous.get("wall_seconds") is not None:
            kept = {k: previous.get(k) for k in PROVENANCE_FIELDS}
            record |= kept | {"stage_seconds": record["stage_seconds"], "rerun": rerun}
            if previous.get("unrecorded"):
                record["unrecorded"] = {
                    k: v for k, v in previous["unrecorded"].items() if kept.get(k) is None
                }
            return record
        record["unrecorded"]["wall_seconds"] = why_not
        if started:
            record["rerun"] = rerun
    if record["command"] is None:
        record["unrecorded"]["command"] = f"not started through `make reproduce` ({RUN_COMMAND_ENV} unset)"
    if record["param_set"] is None:
        record["unrecorded"]["param_set"] = "params have no tracking.experiment"
    return record


def provenance_lines(record: dict[str, Any]) -> list[str]:
    """A provenance record as report lines, one per field; an unrecorded field with its reason."""
    why = record.get("unrecorded") or {}
    sources = record.get("sources") or {}

    def show(key: str, text: str | None) -> str:
        if text is None:
            return f"not recorded ({why.get(key, 'no reason given')})"
        return text + (f" (from {sources[key]})" if key in sources else "")

    def code(v: Any) -> str | None:
        return None if v is None else f"`{v}`"

    wall = record.get("wall_seconds")
    flags = record.get("cpu_flags")
    return [
        "Commit: " + show("commit", code(record.get("commit"))),
        "Parameter set: " + show("param_set", code(record.get("param_set"))),
        "CPU: "
        + show(
            "cpu_model",
            None
            if record.get("cpu_model") is None
            else f"{record['cpu_model']}" + (f", matmul flags {', '.join(flags)}" if flags else ""),
        ),
        "Command: " + show("command", code(record.get("command"))),
        "Wall time: " + show("wall_seconds", None if wall is None else f"{fmt_seconds(wall)} ({wall:.0f} s)"),
        "Date: " + show("date", record.get("date")),
        *([f"Later rerun: {rerun_text(record['rerun'])}"] if record.get("rerun") else []),
    ]


def rerun_text(rerun: dict[str, Any]) -> str:
    """A ``rerun`` entry of a provenance record in words: what ran, where, how long."""
    parts = []
    if "items" in rerun:
        parts.append(f"{rerun['items_run']} of {rerun['items']} items ran")
    if rerun.get("commit"):
        parts.append(f"at `{str(rerun['commit'])[:7]}`")
    if rerun.get("cpu_model"):
        parts.append(f"on {rerun['cpu_model']}")
    if rerun.get("seconds") is not None:
        parts.append(f"in {rerun['seconds']:.0f} s")
    if rerun.get("date"):
        parts.append(f"({rerun['date']})")
    return " ".join(parts) or "not recorded"
