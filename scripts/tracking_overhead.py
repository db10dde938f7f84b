"""What tracking costs one CPU-default train item: off, local sqlite, a live server, a server that dies.

Usage (the measurement: the CPU default's item all-MiniLM-L6-v2 / infonce / seed 1, 128 steps,
3 repeats of each setting, the settings' order rotated every repeat)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/tracking_overhead.py \\
        --repeats 3 --out-json tracking_overhead.json

A quick check of the script itself (8 steps, one repeat)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/tracking_overhead.py --steps 8 --repeats 1

Settings:

- ``off``: ``FOCALCSE_TRACKING=off``;
- ``sqlite``: ``MLFLOW_TRACKING_URI=sqlite:///<work>/sqlite.db`` (artifacts on local disk), the default
  of a plain ``dvc repro``;
- ``live``: a real ``mlflow server`` (127.0.0.1, one worker, job execution off, its own sqlite store
  and proxied artifacts) on the same cores, started before the item and stopped after it;
- ``dead``: the same server, SIGKILLed ``--kill-after`` seconds into the item (default 30): training
  goes on, the rest is queued for ``focalcse tracking sync``.

An item's time is the wall time of ``python stages/train.py ...`` from start to exit: its metrics and
model are in the store when it exits (``finish`` logs them before the stage ends), except under
``dead``, where they are queued. Server start-up is not counted. Each run starts from no model and no
checkpoint. The stage's own lines say where the tracking time goes: ``MLflow run ready in ...``
(opening the run) and ``MLflow finish: ...`` (metrics flush, artifact upload, the logged
sentence-transformers model, tags).

Prints a Markdown table (median of each setting and its ratio to ``off``); ``--out-json`` gets every
run. The work folder is a copy of the working tree (as ``scripts/fault_measure.py`` makes it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import psutil  # noqa: E402
from fault_measure import (  # noqa: E402 - the same project copy, item runner and server
    BATCH,
    REPO,
    Item,
    Server,
    cpu_model,
    fail,
    free_port,
    repo_commit,
    run_checked,
    stage_env,
)
from focalcse.testing.project import copy_repo  # noqa: E402

SETTINGS = ("off", "sqlite", "live", "dead")
_READY = re.compile(r"MLflow run ready in ([\d.]+) s")
_FINISH = re.compile(r"MLflow finish: (.*)")
_SENDER = re.compile(r"MLflow sender: ([\d.]+) s CPU over (\d+) sends")


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live children so far (0 when gone)."""
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def make_project(dest: Path, steps: int | None, mirror: str) -> dict[str, Any]:
    """Copy the working tree to ``dest``; params.yaml = the repo's, one item swept (and ``steps``
    batches sampled when given), so the item is the CPU default's."""
    copy_repo(dest)
    (dest / "dvc.lock").unlink(missing_ok=True)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"] = {**params["data"], "mirror": mirror}
    if steps:
        params["data"]["num_sentences"] = BATCH * steps
        params["train"] = {**params["train"], "eval_steps": max(1, steps // 2)}
    params["sweep"] = {
        **params["sweep"],
        "backbones": ["all-MiniLM-L6-v2"],
        "losses": ["infonce"],
        "seeds": [1],
    }
    params["sweep"]["frameworks"] = []
    params["ablation"] = {
        **params["ablation"],
        "loss": "infonce",
        "backbone": "",
        "seed": 1,
        "temperatures": [],
        "ms": [],
    }
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def parse_lines(stdout: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if m := _READY.search(stdout):
        out["run_ready_seconds"] = float(m.group(1))
    if m := _FINISH.search(stdout):
        for name, value in re.findall(r"(\w+) ([\d.]+) s", m.group(1)):
            out[f"finish_{name}_seconds"] = float(value)
    if m := _SENDER.search(stdout):
        out["sender_cpu_seconds"] = float(m.group(1))
        out["sender_sends"] = int(m.group(2))
    return out


def one(setting: str, item: Item, base_env: dict[str, str], work: Path, kill_after: float) -> dict[str, Any]:
    env = dict(base_env)
    server = None
    killer = None
    if setting == "off":
        env["FOCALCSE_TRACKING"] = "off"
    elif setting == "sqlite":
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'sqlite.db'}"
    else:
        server = Server(work / f"server-{setting}", free_port())
        server.start()
        env["MLFLOW_TRACKING_URI"] = server.uri
    item.env = env
    item.clean()
    shutil.rmtree(item.queue, ignore_errors=True)
    server_cpu = None
    try:
        cpu0 = children_cpu()
        server_cpu0 = tree_cpu(server.proc.pid) if server is not None else 0.0
        proc, out, err, t0 = item.start(setting)
        if setting == "dead":
            killer = threading.Timer(kill_after, server.kill)
            killer.start()
        wall = item.wait(proc, t0)
        stage_cpu = children_cpu() - cpu0  # the stage is reaped; the server is not yet
        if setting == "live":
            server_cpu = tree_cpu(server.proc.pid) - server_cpu0
        res = item.result(proc, out, err, wall)
    finally:
        if killer is not None:
            killer.cancel()
        if server is not None:
            server.kill()
    if res["returncode"] != 0:
        fail(f"{setting}: the train stage exited {res['returncode']}:\n{res['stderr'][-3000:]}")
    queued = "queued" in res["stderr"] and "focalcse tracking sync" in res["stderr"]
    return {
        "setting": setting,
        "wall_seconds": res["wall_seconds"],
        "train_seconds": res["train_seconds"],
        "stage_wall_seconds": res["stage_wall_seconds"],
        "model_digest": res["model_digest"],
        "queued": queued,
        "stage_cpu_seconds": round(stage_cpu, 1),
        **({"server_cpu_seconds": round(server_cpu, 1)} if server_cpu is not None else {}),
        **parse_lines(res["stdout"]),
    }


def summary(runs: list[dict[str, Any]], settings: list[str]) -> dict[str, Any]:
    """Each setting's runs, median and ratio of medians to ``off``."""
    med = {s: statistics.median(r["wall_seconds"] for r in runs if r["setting"] == s) for s in settings}
    return {
        s: {
            "median_seconds": round(med[s], 1),
            "ratio_to_off": round(med[s] / med["off"], 3),
            "runs": [r["wall_seconds"] for r in runs if r["setting"] == s],
        }
        for s in settings
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Item `{report['item']}`, {report['steps']} steps; {report['repeats']} repeats per setting, "
        f"order rotated; CPU {report['cpu_model']} ({report['cpu_count']} cores); commit "
        f"`{report['git']['commit'][:10]}`.",
        "",
        "| setting | runs (s) | median (s) | vs off |",
        "|---|---|---:|---:|",
    ]
    for s, v in report["summary"].items():
        runs = ", ".join(f"{x:.1f}" for x in v["runs"])
        lines.append(f"| {s} | {runs} | {v['median_seconds']:.1f} | {v['ratio_to_off']:.3f}x |")
    keys = sorted(
        {
            k
            for r in report["runs"]
            for k in r
            if k.endswith("_seconds") and k.startswith(("run_", "finish_", "sender_", "stage_cpu", "server_"))
        }
    )
    if keys:
        lines += [
            "",
            "Where the tracking time goes (median over the runs of each setting, seconds; `stage_cpu`: the "
            "stage process's CPU, `server_cpu`: the live server's, `sender_cpu`: the stage's MLflow sender "
            "thread's):",
            "",
        ]
        lines.append("| setting | " + " | ".join(k.removesuffix("_seconds") for k in keys) + " |")
        lines.append("|---|" + "---:|" * len(keys))
        for s in report["summary"]:
            rows = [r for r in report["runs"] if r["setting"] == s]
            cells = []
            for k in keys:
                vals = [r[k] for r in rows if k in r]
                cells.append(f"{statistics.median(vals):.1f}" if vals else "-")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--steps", type=int, default=None, help="training steps (default: the CPU default's sample)"
    )
    ap.add_argument("--kill-after", type=float, default=30.0, help="dead: seconds into the item (default 30)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"a subset of {','.join(SETTINGS)}")
    ap.add_argument("--keep", type=Path, default=None, help="work folder, kept (default: a temp folder)")
    ap.add_argument("--out-json", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per item run")
    args = ap.parse_args()
    mirror = os.environ.get("FOCALCSE_DATA_MIRROR", "").strip()
    if not mirror or not Path(mirror).is_dir():
        fail(f"FOCALCSE_DATA_MIRROR={mirror!r}: set it to the data mirror folder (e.g. ../shared/data)")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if unknown := [s for s in settings if s not in SETTINGS]:
        fail(f"--settings: unknown {unknown}; expected some of {list(SETTINGS)}")
    if "off" not in settings:
        fail("--settings must include off (every ratio is to it)")
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="tracking-overhead-"))
    root.mkdir(parents=True, exist_ok=True)
    project = root / "repo"
    runs: list[dict[str, Any]] = []
    try:
        params = make_project(project, args.steps, str(Path(mirror).resolve()))
        env = stage_env(project, str(Path(mirror).resolve()), "", None)
        env.pop("MLFLOW_TRACKING_URI", None)
        for stage in ("check", "sample", "prepare_sts"):
            run_checked(
                [sys.executable, f"stages/{stage}.py"],
                project,
                {**env, "FOCALCSE_TRACKING": "off"},
                args.timeout,
            )
        item = Item(project, env, args.timeout)
        for rep in range(args.repeats):
            order = settings[rep % len(settings) :] + settings[: rep % len(settings)]
            for setting in order:
                t = time.strftime("%H:%M:%S")
                r = one(setting, item, env, root, args.kill_after)
                r["repeat"] = rep + 1
                runs.append(r)
                print(
                    f"{t} repeat {rep + 1} {setting:6s} {r['wall_seconds']:7.1f} s  {json.dumps({k: v for k, v in r.items() if k.startswith(('run_', 'finish_', 'sender_', 'stage_cpu', 'server_'))})}",
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    digests = {r["model_digest"] for r in runs}
    report = {
        "item": "train@all-MiniLM-L6-v2-infonce-1",
        "steps": params["data"]["num_sentences"] // BATCH,
        "repeats": args.repeats,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "git": repo_commit(),
        "runs": runs,
        "same_model_every_run": len(digests) == 1,
    }
    report["summary"] = summary(runs, [s for s in SETTINGS if s in settings])
    print()
    print(markdown(report))
    print(f"\nsame model in every run: {report['same_model_every_run']}")
    if args.out_json:
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["same_model_every_run"] else 1


if __name__ == "__main__":
    sys.exit(main())
