"""Two Prefect process workers on this machine acting as two machines: the multi-machine path, end to end.

Builds, under ``--dir`` (default: a new temporary folder):

* ``coordinator/``: a copy of this repository with the tests' tiny config (a 2-layer random BERT, a few
  hundred sentences), committed, with ``origin`` = ``origin.git`` (a bare repository: the shared git remote);
* ``dvc-remote/``: the shared DVC remote (a folder here; S3 / SSH / NFS across machines);
* an MLflow tracking server and a Prefect server on 127.0.0.1 (free ports), stores under ``--dir``;
* the work pool ``focalcse-demo`` with the ``dvc-stage-item/pool`` deployment, its code pulled from
  ``origin.git`` by each flow run (as from a git host);
* two process workers, ``worker-a`` and ``worker-b``, each with its own ``FOCALCSE_WORKDIR``
  (checkouts and DVC cache), one flow run at a time each.

Then runs the ``reproduce-pool`` flow from the coordinator and prints what happened, from the
Prefect API (flow runs, which worker's checkout ran each), the MLflow server (runs and metrics) and
DVC (``dvc status`` of the coordinator). Everything it started is stopped by PID at the end, also on
failure. ``--keep`` leaves the folder for inspection.

    HF_HUB_OFFLINE=1 FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/pool_demo.py --dir /tmp/pool-demo

About 5-10 minutes on 2 CPU cores, most of it Prefect and DVC start-up around tiny trainings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from focalcse.testing.mlflow_server import free_port

REPO = Path(__file__).resolve().parents[1]

POOL = "focalcse-demo"
WORKERS = ("worker-a", "worker-b")


def wait_http(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_workers(names: tuple[str, ...], timeout: float, procs: dict[str, subprocess.Popen]) -> None:
    """Return once every worker in ``names`` is ONLINE in the pool (Prefect's API), or fail."""
    from prefect import get_client
    from prefect.client.schemas.objects import WorkerStatus

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in names:
            if procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited {procs[name].returncode} before it came online")
        with contextlib.suppress(Exception), get_client(sync_client=True) as client:
            online = {
                w.name for w in client.read_workers_for_work_pool(POOL) if w.status == WorkerStatus.ONLINE
            }
            if set(names) <= online:
                return
        time.sleep(0.5)
    raise TimeoutError(f"workers {', '.join(names)} not online in pool {POOL} within {timeout:.0f} s")


def sh(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def build_project(base: Path, env: dict[str, str], losses: list[str] | None = None) -> tuple[Path, Path]:
    from focalcse.testing.project import TINY_PARAMS, make_tiny_project, save_tiny_backbone  # imports torch

    mirror = Path(os.environ.get("FOCALCSE_DATA_MIRROR") or REPO.parent / "shared" / "data").resolve()
    if not (mirror / "senteval" / "downstream").is_dir():
        raise SystemExit(f"error: data mirror {mirror} has no senteval/downstream; set FOCALCSE_DATA_MIRROR")
    tiny = save_tiny_backbone(base / "tiny-backbone")
    overrides: dict[str, Any] = {"ablation": {"temperatures": [0.1], "ms": [0.2]}}
    if losses:  # fewer items; the ablated loss must be one of them
        overrides["sweep"] = {**TINY_PARAMS["sweep"], "losses": list(losses)}
        overrides["ablation"]["loss"] = losses[-1]
    coord = make_tiny_project(base / "coordinator", mirror, tiny, **overrides)
    origin = base / "origin.git"
    sh(["git", "clone", "--quiet", "--bare", str(coord), str(origin)], base, env)
    sh(["git", "remote", "add", "origin", str(origin)], coord, env)
    sh(["git", "fetch", "--quiet", "origin"], coord, env)
    return coord, origin


def flow_runs_report(api: str) -> list[dict[str, Any]]:
    """Every flow run with its state, deployment and the worker checkout it logged (from the API)."""
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort

    out = []
    with get_client(sync_client=True) as client:
        deployments = {d.id: d.name for d in client.read_deployments()}
        for fr in client.read_flow_runs(sort=FlowRunSort.START_TIME_ASC):
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[fr.id])))
            where = next(
                (
                    lg.message
                    for lg in logs
                    if " in " in lg.message and " at " in lg.message and "(pid" in lg.message
                ),
                "",
            )
            done = next((lg.message for lg in logs if "pushed to the DVC remote" in lg.message), "")
            out.append(
                {
                    "name": fr.name,
                    "state": fr.state.name if fr.state else None,
                    "deployment": deployments.get(fr.deployment_id),
                    "parent_task_run": str(fr.parent_task_run_id) if fr.parent_task_run_id else None,
                    "start": fr.start_time.isoformat() if fr.start_time else None,
                    "seconds": round(fr.total_run_time.total_seconds(), 1),
                    "ran_in": where,
                    "result": done,
                }
            )
    return out


def mlflow_report(uri: str) -> list[dict[str, Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    rows = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]):
            metrics = run.data.metrics
            arts = [a.path for a in client.list_artifacts(run.info.run_id)]
            rows.append(
                {
                    "experiment": exp.name,
                    "run": run.info.run_name,
                    "status": run.info.status,
                    "stage": run.data.tags.get("dvc_stage"),
                    "commit": (run.data.tags.get("git_commit") or "")[:12],
                    "n_metrics": len(metrics),
                    "stsb_dev_best": metrics.get("stsb_dev_best"),
                    "sts_avg": metrics.get("sts_avg"),
                    "artifacts": arts,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="working folder (default: a new temporary one)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the folder (always kept with --dir)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the coordinator flow")
    parser.add_argument("--seeds", nargs="+", default=None, help="only these seeds' items (default: all)")
    parser.add_argument("--stages", nargs="+", default=None, help="only these stages (default: all)")
    parser.add_argument(
        "--losses", nargs="+", default=None, help="sweep only these losses (default: the tiny config's two)"
    )
    args = parser.parse_args(argv)
    base = (args.dir or Path(tempfile.mkdtemp(prefix="focalcse-pool-"))).resolve()
    if args.dir and base.exists() and any(base.iterdir()):
        raise SystemExit(f"error: --dir {base} is not empty")
    base.mkdir(parents=True, exist_ok=True)
    venv_bin = Path(sys.executable).parent
    prefect_port, mlflow_port = free_port(), free_port()
    api = f"http://127.0.0.1:{prefect_port}/api"
    tracking = f"http://127.0.0.1:{mlflow_port}"
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
            "PREFECT_HOME": str(base / "prefect-home"),
            "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "MLFLOW_TRACKING_URI": tracking,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "DVC_NO_ANALYTICS": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            # the workers ask for queued items every second, not every 10 s: an item waits for a
            # free worker, not for its next poll
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "GIT_AUTHOR_NAME": "demo",
            "GIT_AUTHOR_EMAIL": "demo@localhost",
            "GIT_COMMITTER_NAME": "demo",
            "GIT_COMMITTER_EMAIL": "demo@localhost",
        }
    )
    os.environ.update({k: env[k] for k in ("PREFECT_HOME", "PREFECT_API_URL", "MLFLOW_TRACKING_URI")})
    procs: dict[str, subprocess.Popen] = {}
    logs = base / "logs"
    logs.mkdir(exist_ok=True)

    def start(
        name: str, cmd: list[str], extra: dict[str, str] | None = None, cwd: Path = base
    ) -> subprocess.Popen:
        with open(logs / f"{name}.log", "w") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                cmd, cwd=cwd, env={**env, **(extra or {})}, stdout=out, stderr=subprocess.STDOUT
            )
        procs[name] = proc
        log(f"started {name} (pid {proc.pid}): {' '.join(cmd[:4])} ...")
        return proc

    summary: dict[str, Any] = {"dir": str(base), "prefect_api": api, "mlflow": tracking}
    rc = 1
    try:
        log(f"building the tiny project under {base}")
        coord, origin = build_project(base, env, args.losses)
        mlf = start(
            "mlflow",
            [
                str(venv_bin / "mlflow"),
                "server",
                "--backend-store-uri",
                f"sqlite:///{base / 'mlflow.db'}",
                "--artifacts-destination",
                str(base / "mlartifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(mlflow_port),
                "--workers",
                "1",
            ],
        )
        pref = start(
            "prefect-server",
            [
                str(venv_bin / "prefect"),
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(prefect_port),
            ],
        )
        wait_http(f"{tracking}/health", 120, mlf)
        wait_http(f"{api}/health", 180, pref)
        log("servers up; deploying dvc-stage-item to the work pool")
        sh(
            [sys.executable, "-m", "pipelines.pool", "deploy", "--pool", POOL, "--source", str(origin)],
            REPO,
            env,
        )
        for name in WORKERS:
            wd = base / name
            wd.mkdir()
            start(
                name,
                # a process worker that stops on the first SIGINT, even one started with SIGINT
                # ignored (src/focalcse/ops/worker.py)
                [
                    sys.executable,
                    "-m",
                    "focalcse.cli",
                    "worker",
                    "--pool",
                    POOL,
                    "--name",
                    name,
                    "--limit",
                    "1",
                ],
                {"FOCALCSE_WORKDIR": str(wd)},
                cwd=wd,
            )
        wait_workers(WORKERS, 120, procs)
        log("running the reproduce-pool flow from the coordinator checkout")
        t0 = time.perf_counter()
        coord_proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.pool",
                "run",
                "--repo",
                str(coord),
                "--dvc-remote",
                str(base / "dvc-remote"),
                "--concurrency",
                "4",
                "--retries",
                "1",
                *(["--seeds", *args.seeds] if args.seeds else []),
                *(["--stages", *args.stages] if args.stages else []),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        summary["coordinator_seconds"] = round(time.perf_counter() - t0, 1)
        (logs / "coordinator.log").write_text(coord_proc.stdout + coord_proc.stderr)
        summary["coordinator_rc"] = coord_proc.returncode
        log(f"coordinator flow exited {coord_proc.returncode} after {summary['coordinator_seconds']} s")
        summary["flow_runs"] = flow_runs_report(api)
        summary["mlflow_runs"] = mlflow_report(tracking)
        summary["dvc_status"] = sh([str(venv_bin / "dvc"), "status"], coord, env).strip()
        summary["git_commit"] = sh(["git", "rev-parse", "HEAD"], coord, env).strip()
        summary["remote_files"] = sum(1 for p in (base / "dvc-remote").rglob("*") if p.is_file())
        summary["worker_checkouts"] = {
            name: sorted(p.name for p in (base / name).iterdir() if not p.name.startswith("."))
            for name in WORKERS
        }
        rc = coord_proc.returncode
    finally:
        # workers first (they deregister through the server), then the servers
        for group in ([n for n in procs if n in WORKERS], [n for n in procs if n not in WORKERS]):
            for name in group:
                if procs[name].poll() is None:
                    procs[name].send_signal(signal.SIGINT)  # a process worker stops on SIGINT, not SIGTERM
            for name in group:
                proc = procs[name]
                # The first SIGINT stops each of them; a second (Prefect's CLI then SIGKILLs a worker)
                # and SIGKILL are the fallbacks if one ever goes unheard.
                for sig in (signal.SIGINT, None):
                    try:
                        proc.wait(timeout=90)
                        break
                    except subprocess.TimeoutExpired:
                        if sig is None:
                            proc.kill()
                            proc.wait()
                        else:
                            log(f"{name} still running 90 s after SIGINT; sending it again")
                            proc.send_signal(sig)
                log(f"stopped {name} (pid {proc.pid}, exit {proc.returncode})")
        (base / "pool_demo.json").write_text(json.dumps(summary, indent=2, default=str))
        print(json.dumps(summary, indent=2, default=str))
        if not args.dir and not args.keep and rc == 0:
            shutil.rmtree(base, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
