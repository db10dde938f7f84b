"""The Prefect flows under ``prefect_test_harness``: the real DVC graph on the tiny config, retries
for transient failures only, the ablation flow and the deployments. Every check of what ran goes
through Prefect's API (``read_flow_run`` / ``read_task_runs``), DVC (``dvc status``) or MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from focalcse.testing.project import make_tiny_project, project_env, run, save_tiny_backbone

pytest.importorskip("prefect")
pytestmark = pytest.mark.slow  # a Prefect test server and DVC subprocesses: tens of seconds

from prefect import get_client  # noqa: E402
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId  # noqa: E402
from prefect.testing.utilities import prefect_test_harness  # noqa: E402

from pipelines.flows import ablation, reproduce  # noqa: E402


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def _runs(state, expected: int, timeout: float = 60.0):
    """The flow run and its task runs from the API, once ``expected`` task runs are final (task
    states reach the server through events, a moment after the flow returns)."""
    flow_run_id = state.state_details.flow_run_id
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            tasks = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            final = [t for t in tasks if t.state is not None and t.state.is_final()]
            if (len(final) >= expected and flow_run.state.is_final()) or time.monotonic() > deadline:
                return flow_run, {t.name: t for t in tasks}
            time.sleep(0.5)


def _env(monkeypatch, env: dict[str, str]) -> None:
    for key in ("PATH", "MLFLOW_TRACKING_URI", "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv("FOCALCSE_DATA_MIRROR", raising=False)


# ---------------------------------------------------------------- a miniature DVC project
MINI_DVC = {
    "stages": {
        "flaky": {"cmd": "python flaky.py", "deps": ["flaky.py"], "outs": ["out/flaky.txt"]},
        "broken": {"cmd": "python broken.py", "deps": ["broken.py"], "outs": ["out/broken.txt"]},
        "after_broken": {
            "cmd": "python cp_file.py out/broken.txt out/after.txt",
            "deps": ["out/broken.txt"],
            "outs": ["out/after.txt"],
        },
        "ablate_tau": {
            "matrix": {"temperature": "${ablation.temperatures}"},
            "cmd": "python cp_file.py out/flaky.txt out/tau-${item.temperature}.txt",
            "deps": ["out/flaky.txt"],
            "params": ["train.temperature"],
            "outs": ["out/tau-${item.temperature}.txt"],
        },
    }
}
SCRIPTS = {
    # exits 75 (EX_TEMPFAIL) on its first attempt, succeeds on the second
    "flaky.py": """
        import pathlib, sys
        n = pathlib.Path("attempts.txt")
        count = int(n.read_text()) + 1 if n.exists() else 1
        n.write_text(str(count))
        if count == 1:
            sys.exit(75)
        pathlib.Path("out").mkdir(exist_ok=True)
        pathlib.Path("out/flaky.txt").write_text("ok")
    """,
    "broken.py": """
        import pathlib
        n = pathlib.Path("broken_attempts.txt")
        n.write_text(str(int(n.read_text()) + 1 if n.exists() else 1))
        raise ValueError("train.lr must be > 0")
    """,
    "cp_file.py": """
        import pathlib, sys
        pathlib.Path(sys.argv[2]).write_text(pathlib.Path(sys.argv[1]).read_text())
    """,
}


def _mini_project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "dvc.yaml").write_text(yaml.safe_dump(MINI_DVC, sort_keys=False))
    (root / "params.yaml").write_text(
        yaml.safe_dump(
            {"train": {"temperature": 0.05, "m": 0.3}, "ablation": {"temperatures": [0.1, 0.2], "ms": [0.5]}}
        )
    )
    for name, text in SCRIPTS.items():
        (root / name).write_text(textwrap.dedent(text))
    (root / ".gitignore").write_text("attempts.txt\nbroken_attempts.txt\n")
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for cmd in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mini"],
    ):
        subprocess.run(cmd, cwd=root, check=True, env=env)
    return root


def test_transient_failures_are_retried_and_deterministic_ones_are_not(harness, tmp_path) -> None:
    repo = _mini_project(tmp_path / "mini")
    state = reproduce(
        repo=str(repo),
        stages=["flaky", "after_broken"],
        concurrency=2,
        retries=2,
        retry_delay_s=0,
        return_state=True,
    )
    assert state.is_failed()
    flow_run, tasks = _runs(state, expected=2)
    assert flow_run.state.is_failed() and "broken" in flow_run.state.message
    assert tasks["flaky"].state.is_completed() and tasks["flaky"].run_count == 2  # exit 75, then success
    assert tasks["broken"].state.is_failed() and tasks["broken"].run_count == 1  # ValueError: no retry
    assert (repo / "broken_attempts.txt").read_text() == "1"
    assert "after_broken" not in tasks  # downstream of a failure: never submitted
    assert (repo / "out/flaky.txt").read_text() == "ok"


def test_ablation_flow_runs_the_sweep_stages_and_queues_experiments(harness, tmp_path) -> None:
    repo = _mini_project(tmp_path / "mini")
    (repo / "attempts.txt").write_text("1")  # flaky succeeds at once
    state = ablation(repo=str(repo), concurrency=2, retry_delay_s=0, return_state=True)
    assert state.is_completed(), state.message
    flow_run, tasks = _runs(state, expected=3)
    assert {"flaky", "ablate_tau@0.1", "ablate_tau@0.2"} == set(tasks)
    assert all(t.state.is_completed() for t in tasks.values())
    assert (repo / "out/tau-0.2.txt").read_text() == "ok"

    state = ablation(
        repo=str(repo), queue_experiments=True, temperatures=[0.07], run_queue=False, return_state=True
    )
    assert state.is_completed(), state.message
    queued = state.result()["queued"]
    assert [q.split("-")[:2] for q in queued] == [["tau", "0.07"], ["m", "0.5"]]
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "queue", "status"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    assert all(q in out for q in queued) and out.count("Queued") == 2


def test_serve_registers_a_scheduled_reproduce_and_an_ablation_deployment(harness) -> None:
    from pipelines.serve import build_deployments

    deployments = build_deployments(cron="15 4 * * *", concurrency=3)
    ids = [d.apply() for d in deployments]
    with get_client(sync_client=True) as client:
        rep = client.read_deployment_by_name("reproduce/reproduce")
        abl = client.read_deployment_by_name("ablation/ablation")
        assert {rep.id, abl.id} == set(ids)
        assert [s.schedule.cron for s in rep.schedules] == ["15 4 * * *"] and not abl.schedules
        assert rep.parameters["concurrency"] == 3 and rep.entrypoint == "pipelines/flows.py:reproduce"


# ---------------------------------------------------------------- the real graph, tiny config
def test_reproduce_runs_each_dvc_stage_as_a_task(harness, tmp_path_factory, data_mirror, monkeypatch) -> None:
    from mlflow import MlflowClient

    model = save_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny")
    repo = make_tiny_project(
        tmp_path_factory.mktemp("flow") / "repo",
        data_mirror,
        model,
        sweep={"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1]},
    )
    env = project_env(repo)
    _env(monkeypatch, env)
    expected = {
        "check",
        "sample",
        "prepare_sts",
        "pretrain_generator@simcse-tiny",  # SimCSE needs no generator: its item writes only generator.json
        "train@simcse-tiny-infonce-1",
        "train@simcse-tiny-focal_infonce-1",
        "evaluate@simcse-tiny-infonce-1",
        "evaluate@simcse-tiny-focal_infonce-1",
        "significance",
    }
    state = reproduce(repo=str(repo), stages=["significance"], concurrency=2, return_state=True)
    assert state.is_completed(), state.message
    assert set(state.result()) == expected and set(state.result().values()) == {"ran"}
    flow_run, tasks = _runs(state, expected=len(expected))
    assert flow_run.state.is_completed() and flow_run.parameters["concurrency"] == 2
    assert set(tasks) == expected
    assert all(t.state.is_completed() and t.run_count == 1 for t in tasks.values())
    status = run(["dvc", "status", *sorted(expected)], repo, env).stdout
    status = status.replace("check:\n\talways changed\n", "")  # check runs on every repro by design
    assert "changed" not in status and "modified" not in status, status

    # DVC stays the source of truth: a second run skips every stage
    again = reproduce(repo=str(repo), stages=["significance"], concurrency=2)
    # check runs on every repro (always_changed: it fingerprints the sources); every other stage skips
    assert again.pop("check", "ran") == "ran" and set(again.values()) == {"skipped"}

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("tiny")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [
        "simcse-tiny-focal_infonce-seed1",
        "simcse-tiny-infonce-seed1",
    ]
    for r in runs:
        ev = json.loads((repo / f"metrics/eval/{r.info.run_name}.json").read_text())
        assert r.data.metrics["sts_avg"] == pytest.approx(ev["avg"]) and r.data.tags["evaluated"] == "true"
