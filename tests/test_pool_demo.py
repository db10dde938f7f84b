"""The multi-machine path for real: ``scripts/pool_demo.py`` starts a Prefect server, an MLflow server
and two process workers on a work pool, and the coordinator flow sends the tiny project's train /
evaluate items (seed 1) to them. Checked from the demo's summary (read back from the Prefect and
MLflow APIs) and from DVC in the coordinator's checkout. One loss: its train and evaluate items are
what the pool path moves; a second loss's two items would add minutes and prove nothing more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("prefect")
pytestmark = pytest.mark.slow  # two servers, two workers and ten DVC stages: a few minutes

REPO = Path(__file__).resolve().parents[1]
ITEMS = {"train@simcse-tiny-infonce-1", "evaluate@simcse-tiny-infonce-1"}


def test_pool_items_run_on_the_workers_and_come_back_through_dvc(tmp_path, data_mirror) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "FOCALCSE_DATA_MIRROR": str(data_mirror), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "scripts/pool_demo.py", "--dir", str(out), "--stages", "evaluate", "--seeds", "1"]
    cmd += ["--losses", "infonce"]
    # started as from the background of a script (`cmd &`, no job control): SIGINT ignored, inherited
    # by the servers and the workers, which must still stop on the first SIGINT
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((out / "logs").glob("*.log")))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{logs}"
    summary = json.loads((out / "pool_demo.json").read_text())

    pool_runs = {f["name"]: f for f in summary["flow_runs"] if f["deployment"] == "pool"}
    assert set(pool_runs) == ITEMS
    assert all(f["state"] == "Completed" for f in summary["flow_runs"])
    for run in pool_runs.values():  # each ran in a worker's own checkout of the coordinator's commit
        assert "/worker-" in run["ran_in"] and summary["git_commit"][:12] in run["ran_in"], run

    mlflow = {r["run"]: r for r in summary["mlflow_runs"]}
    for name in ("simcse-tiny-infonce-seed1",):
        run = mlflow[name]  # trained on one worker, evaluated (maybe) on the other: one shared run
        assert run["status"] == "FINISHED" and "model" in run["artifacts"]
        assert run["stsb_dev_best"] is not None and run["sts_avg"] is not None

    coord = out / "coordinator"
    status = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "status", *sorted(ITEMS)],
        cwd=coord,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "up to date" in status, status
    for item in ("infonce",):
        assert json.loads((coord / f"metrics/eval/simcse-tiny-{item}-seed1.json").read_text())["avg"] > 0

    # every process stopped on the first SIGINT, exit 0 (a worker that missed it would need the
    # demo's second SIGINT, on which Prefect's CLI SIGKILLs it: exit -9, 90 s later)
    stopped = [line for line in proc.stdout.splitlines() if "] stopped " in line]
    assert len(stopped) == 4 and all(line.endswith("exit 0)") for line in stopped), stopped
    assert "still running 90 s after SIGINT" not in proc.stdout
