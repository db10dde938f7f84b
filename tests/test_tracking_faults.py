"""MLflow faults: a hanging or dead tracking server never stalls training (metrics go to a local queue,
sent by ``focalcse tracking sync``), and one train item keeps one MLflow run across a ``kill -9`` and
its resume. Tiny config in a throw-away copy of the repo; a real ``mlflow server`` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from focalcse.ops import tracking
from focalcse.testing.mlflow_server import MlflowServer, free_port
from focalcse.testing.project import TINY_PARAMS, make_tiny_project, project_env, run, save_tiny_backbone


class _HangingClient:
    """An MlflowClient whose every call blocks (a server that accepts and never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls += 1
            self.release.wait()
            raise ConnectionError("hung up")

        return call


def test_hanging_client_never_blocks_and_sync_delivers(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the store `sync` looks at for dead runs
    store = MlflowClient(uri)
    exp = store.create_experiment("faults", artifact_location=(tmp_path / "art").as_uri())
    run_id = store.create_run(exp).info.run_id
    fake = _HangingClient()
    queue = tmp_path / "queue"
    trk = tracking.TrainRun(fake, run_id, uri=uri, queue=queue, close_timeout=0.5)
    try:
        took, n = [], 300
        for step in range(1, n + 1):
            metrics = {"loss": 1.0 / step, "lr": 1e-5, "grad_norm": 0.5}
            if step % 50 == 0:
                metrics["stsb_dev_spearman"] = float(step)  # kicks the sender
            t0 = time.perf_counter()
            trk.log_metrics(metrics, step)
            took.append(time.perf_counter() - t0)
        # the client hangs forever, so a call that waited on it would never return: any bound tells;
        # 1 s, not 50 ms, for the slowest, since one preemption on a loaded 2-core runner can take that
        assert max(took) < 1.0 and sorted(took)[n // 2] < 0.05
        lines = tracking.read_queue(queue / f"{run_id}.jsonl")
        assert sum(r["t"] == "m" for r in lines) == 3 * n + n // 50  # every metric, at once
        deadline = time.monotonic() + 30  # the sender thread runs when the scheduler lets it (2 busy cores)
        while fake.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake.calls >= 1  # the sender is stuck in log_batch
        t0 = time.perf_counter()
        line = trk.end("FINISHED")
        assert time.perf_counter() - t0 < 5
        assert line and line.startswith("MLflow unreachable: ") and run_id in line
        assert f"{3 * n + n // 50} metrics" in line and "focalcse tracking sync" in line
    finally:
        fake.release.set()
    counts = tracking.sync(folder=queue)
    assert counts == {"runs": 1, "metrics": 3 * n + n // 50, "left": 0, "killed": 0, "reasons": {}}
    assert not list(queue.glob("*.jsonl"))
    r = store.get_run(run_id)
    assert r.info.status == "FINISHED"
    assert [m.step for m in store.get_metric_history(run_id, "loss")] == list(range(1, n + 1))
    assert len(store.get_metric_history(run_id, "stsb_dev_spearman")) == n // 50
    assert tracking.sync(folder=queue) == {"runs": 0, "metrics": 0, "left": 0, "killed": 0, "reasons": {}}  # nothing twice


# ---------------------------------------------------------------- slow: the real stage
@pytest.fixture(scope="module")
def project(tmp_path_factory, data_mirror) -> Path:
    model = save_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny")
    dest = make_tiny_project(
        tmp_path_factory.mktemp("faults") / "repo",
        data_mirror,
        model,
        sweep={"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1, 2]},
        train={**TINY_PARAMS["train"], "epochs": 6, "checkpoint_steps": 2},  # (a section is replaced)
    )
    run(["dvc", "repro", "sample", "prepare_sts", "pretrain_generator@simcse-tiny"], dest, project_env(dest))
    return dest


def _queue_files(project: Path) -> list[Path]:
    return sorted((project / ".focalcse" / "tracking-queue").glob("*.jsonl"))


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"stage ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def _logged(project: Path, step: int) -> bool:
    """The stage has journaled the ``loss`` of ``step``."""
    for f in _queue_files(project):
        for r in tracking.read_queue(f):
            if r.get("k") == "loss" and r["s"] >= step:
                return True
    return False


def _start_train(
    project: Path, env: dict[str, str], seed: int, stdout: int = subprocess.PIPE
) -> subprocess.Popen:
    """The train stage of item (tiny, infonce, seed) as its own process."""
    return subprocess.Popen(
        [sys.executable, "stages/train.py", "simcse", "tiny", "infonce", str(seed)],
        cwd=project,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_server_killed_mid_item_then_sync(project: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    server = MlflowServer(tmp_path, free_port())
    server.start()
    try:
        env = project_env(project, MLFLOW_TRACKING_URI=server.uri)
        proc = _start_train(project, env, 1)
        _wait_for(lambda: _logged(project, 1), proc)  # training has begun
        server.kill()
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        notices = [line for line in err.splitlines() if line.startswith("MLflow unreachable: ")]
        assert len(notices) == 1 and "run `focalcse tracking sync`" in notices[0], err[-3000:]
        assert (project / "models/simcse/tiny/infonce/seed1/model.safetensors").is_file()
        (queued,) = _queue_files(project)
        run_id = queued.stem
        assert run_id in notices[0]

        server.start()
        sync = run([sys.executable, "-m", "focalcse.cli", "tracking", "sync"], project, env)
        summary = sync.stdout.strip().splitlines()[-1]  # (MLflow prints links as it logs the model)
        assert summary.startswith("tracking sync: 1 run(s) sent") and "0 still queued" in summary
        assert not _queue_files(project)
        client = MlflowClient(server.uri)
        runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
        assert [r.info.run_id for r in runs] == [run_id]
        r = runs[0]
        assert r.info.status == "FINISHED" and "model_sha256" in r.data.tags
        train = json.loads((project / "metrics/train/simcse-tiny-infonce-seed1.json").read_text())
        for key in ("loss", "lr", "grad_norm"):
            steps = [m.step for m in client.get_metric_history(run_id, key)]
            assert sorted(steps) == list(range(1, train["steps"] + 1)), key
        assert r.data.metrics["best_step"] == train["best_step"]
        assert {a.path for a in client.list_artifacts(run_id)} >= {"model", "metrics"}
    finally:
        server.kill()


@pytest.mark.slow
def test_a_train_item_started_with_the_server_down_finishes_then_sync(project: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    dead = f"http://127.0.0.1:{free_port()}"
    stage = "train@simcse-tiny-focal_infonce-1"
    done = run(
        ["dvc", "repro", "--single-item", stage], project, project_env(project, MLFLOW_TRACKING_URI=dead)
    )
    notices = [line for line in done.stderr.splitlines() if dead in line]
    assert len(notices) == 1 and "training goes on" in notices[0], done.stderr[-3000:]
    assert (project / "models/simcse/tiny/focal_infonce/seed1/model.safetensors").is_file()
    train = json.loads((project / "metrics/train/simcse-tiny-focal_infonce-seed1.json").read_text())
    status = run(["dvc", "status", stage], project, project_env(project)).stdout
    assert "changed" not in status, status  # DVC committed the outputs
    (queued,) = _queue_files(project)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sync = run(
        [sys.executable, "-m", "focalcse.cli", "tracking", "sync"],
        project,
        project_env(project, MLFLOW_TRACKING_URI=uri),
    )
    summary = sync.stdout.strip().splitlines()[-1]
    assert summary.startswith("tracking sync: 1 run(s) sent") and "0 still queued" in summary, sync.stdout
    assert not _queue_files(project)
    client = MlflowClient(uri)
    (r,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert r.info.status == "FINISHED" and r.info.run_name == "simcse-tiny-focal_infonce-seed1"
    assert r.data.tags["dvc_stage"] == stage and "model_sha256" in r.data.tags
    for key in ("loss", "lr", "grad_norm"):
        steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
        assert steps == list(range(1, train["steps"] + 1)), key  # each step once
    assert r.data.metrics["best_step"] == train["best_step"]
    assert {a.path for a in client.list_artifacts(r.info.run_id)} >= {"model", "metrics"}
    assert r.outputs.model_outputs  # the MLflow (sentence-transformers) model


@pytest.mark.slow
def test_kill_9_and_resume_keep_one_run_with_a_logged_model(project: Path) -> None:
    import mlflow
    import numpy as np
    from mlflow import MlflowClient
    from sentence_transformers import SentenceTransformer

    env = project_env(project)  # sqlite store in the copy
    work = project / "models/simcse/tiny/infonce/.seed2.work"
    proc = _start_train(project, env, 2, stdout=subprocess.DEVNULL)

    def past_checkpoint() -> bool:
        manifest = work / "last" / "manifest.json"
        try:
            step = json.loads(manifest.read_text())["step"]
        except (OSError, ValueError):
            return False
        return step >= 2 and _logged(project, step + 1)  # past a checkpoint, before the next

    _wait_for(past_checkpoint, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    run_id = json.loads((work / tracking.RUN_FILE).read_text())["run_id"]
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    assert client.get_run(run_id).info.status == "RUNNING"

    done = run([sys.executable, "stages/train.py", "simcse", "tiny", "infonce", "2"], project, env)
    assert f"MLflow run {run_id} resumed" in done.stdout
    assert "MLflow unreachable" not in done.stderr
    exp = client.get_experiment_by_name("tiny")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs(
        [exp.experiment_id], filter_string="tags.dvc_stage = 'train@simcse-tiny-infonce-2'"
    )
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].info.status == "FINISHED"
    train = json.loads((project / "metrics/train/simcse-tiny-infonce-seed2.json").read_text())
    steps = [m.step for m in client.get_metric_history(run_id, "loss")]
    assert steps == list(range(1, train["steps"] + 1))  # every step once
    assert not work.exists() and not _queue_files(project)

    # the trained model is an MLflow model of the run (Logged models) and encodes like the folder
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    (model_out,) = runs[0].outputs.model_outputs
    loaded = mlflow.sentence_transformers.load_model(f"models:/{model_out.model_id}")
    sentences = ["a man is playing a guitar", "two dogs run in the park"]
    folder = SentenceTransformer(str(project / "models/simcse/tiny/infonce/seed2"), device="cpu")
    assert np.allclose(loaded.encode(sentences), folder.encode(sentences), atol=1e-6)


def test_run_of_a_dead_process_that_nothing_resumes_ends_killed(tmp_path: Path) -> None:
    import fcntl

    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = MlflowClient(uri)
    exp = store.create_experiment("stale", artifact_location=(tmp_path / "art").as_uri())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stage = {"dvc_stage": "train@simcse-tiny-infonce-1", "focalcse_stage": "train"}
    host = socket.gethostname()
    gone_tags = {**stage, "focalcse.pid": str(dead.pid), "focalcse.host": host}
    gone = store.create_run(exp, tags=gone_tags)
    alive = store.create_run(exp, tags={**stage, **tracking.identity_tags()})
    queued = store.create_run(exp, tags=gone_tags)  # killed with metrics still queued
    locked = store.create_run(exp, tags=gone_tags)  # its queue file is locked: a stage runs it
    q = tmp_path / "q"
    q.mkdir()
    header = {"t": "run", "run_id": queued.info.run_id, "uri": uri, "pid": str(dead.pid), "host": host}
    metrics = [{"t": "m", "k": "loss", "v": 1.0 / s, "ts": 0, "s": s} for s in (1, 2, 3)]
    (q / f"{queued.info.run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [header, *metrics]))
    held = open(q / f"{locked.info.run_id}.jsonl", "a")  # noqa: SIM115
    fcntl.flock(held, fcntl.LOCK_EX)
    held.write(json.dumps({**header, "run_id": locked.info.run_id}) + "\n")
    held.flush()
    try:
        tracking._kill_stale(store, exp, "train@simcse-tiny-infonce-1", None, q, uri)
    finally:
        held.close()
    assert store.get_run(gone.info.run_id).info.status == "KILLED"
    assert store.get_run(alive.info.run_id).info.status == "RUNNING"
    # the queue is sent first, then the run ends KILLED
    assert store.get_run(queued.info.run_id).info.status == "KILLED"
    assert [m.step for m in store.get_metric_history(queued.info.run_id, "loss")] == [1, 2, 3]
    assert not (q / f"{queued.info.run_id}.jsonl").exists()
    assert store.get_run(locked.info.run_id).info.status == "RUNNING"


def _train_item(tmp_path: Path, monkeypatch, uri: str) -> tuple[Any, tuple[str, str, int], Path]:
    """``(params, item, work folder)``: the default params' first item, its runs going to ``uri``,
    its queue folder under ``tmp_path``."""
    from focalcse.config import load_params

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))  # the queue folder
    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    return params, ("all-MiniLM-L6-v2", "infonce", 1), tmp_path / ".seed1.work"


def _interrupted_attempt(params: Any, item: tuple[str, str, int], work: Path, keys=("loss",)) -> None:
    """An attempt of ``item`` that logs steps 1..3 of ``keys``, then is interrupted (Ctrl-C)."""
    with pytest.raises(KeyboardInterrupt), tracking.train_run(params, *item, work_dir=work) as trk:
        for step in (1, 2, 3):
            trk.log_metrics({k: float(step) for k in keys}, step)
        raise KeyboardInterrupt


def test_raise_ends_failed_resume_continues_it_ctrl_c_ends_killed(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params, item, work = _train_item(tmp_path, monkeypatch, uri)
    with pytest.raises(RuntimeError), tracking.train_run(params, *item, work_dir=work) as trk:
        for step in (1, 2, 3):
            trk.log_metrics({"loss": float(step)}, step)
        raise RuntimeError("boom")
    client = MlflowClient(uri)
    run_id = json.loads((work / tracking.RUN_FILE).read_text())["run_id"]
    assert client.get_run(run_id).info.status == "FAILED"
    (work / "last").mkdir()  # a checkpoint (at step 2): the rerun resumes
    with pytest.raises(KeyboardInterrupt), tracking.train_run(params, *item, work_dir=work) as trk:
        assert trk.run_id == run_id
        for step in (3, 4):  # step 3 is in the run already: not logged twice
            trk.log_metrics({"loss": float(step)}, step)
        raise KeyboardInterrupt
    r = client.get_run(run_id)
    assert r.info.status == "KILLED" and "error" in r.data.tags
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2, 3, 4]
    assert len(client.search_runs([r.info.experiment_id])) == 1
    assert not list(tracking.queue_dir(tmp_path).glob("*.jsonl"))


def test_a_store_down_at_the_start_queues_the_whole_run_and_sync_creates_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from mlflow import MlflowClient

    dead = f"http://127.0.0.1:{free_port()}"
    params, item, work = _train_item(tmp_path, monkeypatch, dead)
    start = time.perf_counter()
    _interrupted_attempt(params, item, work, keys=("loss", "lr"))
    assert time.perf_counter() - start < 10
    notices = [line for line in capsys.readouterr().err.splitlines() if dead in line]
    assert len(notices) == 1 and "unreachable" in notices[0] and "training goes on" in notices[0]
    (queued,) = tracking.queue_dir(tmp_path).glob("*.jsonl")
    local_id = json.loads((work / tracking.RUN_FILE).read_text())["run_id"]
    assert queued.stem == local_id
    (work / "last").mkdir()  # a checkpoint at step 2: the rerun, still offline, continues the file
    with tracking.train_run(params, *item, work_dir=work) as trk:
        assert trk.run_id == local_id
        for step in (2, 3, 4):  # 2 and 3 are queued already
            trk.log_metrics({"loss": float(step), "lr": 1e-5}, step)
    assert list(tracking.queue_dir(tmp_path).glob("*.jsonl")) == [queued]
    losses = [r["s"] for r in tracking.read_queue(queued) if r.get("k") == "loss"]
    assert losses == [1, 2, 3, 4]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # a store that works: the run is created there
    assert tracking.sync(tmp_path) == {"runs": 1, "metrics": 8, "left": 0, "killed": 0, "reasons": {}}
    assert not list(tracking.queue_dir(tmp_path).glob("*.jsonl"))
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(params.tracking.experiment)
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.status == "FINISHED" and r.info.run_name == "simcse-all-MiniLM-L6-v2-infonce-seed1"
    assert r.info.end_time >= r.info.start_time
    assert r.data.tags["dvc_stage"] == "train@simcse-all-MiniLM-L6-v2-infonce-1"
    assert r.data.params["train.loss"] == "infonce"
    for key in ("loss", "lr"):
        assert [m.step for m in client.get_metric_history(r.info.run_id, key)] == [1, 2, 3, 4]
    assert tracking.sync(tmp_path) == {"runs": 0, "metrics": 0, "left": 0, "killed": 0, "reasons": {}}  # nothing twice


def test_an_offline_attempt_resumed_online_continues_one_run(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    params, item, work = _train_item(tmp_path, monkeypatch, f"http://127.0.0.1:{free_port()}")
    _interrupted_attempt(params, item, work)
    (work / "last").mkdir()
    # the store is back when the item resumes: its queued run is created, then continued
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with tracking.train_run(params, *item, work_dir=work) as trk:
        run_id = trk.run_id
        for step in (3, 4):
            trk.log_metrics({"loss": float(step)}, step)
    client = MlflowClient(uri)
    (r,) = client.search_runs([client.get_experiment_by_name(params.tracking.experiment).experiment_id])
    assert r.info.run_id == run_id and r.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2, 3, 4]
    assert not list(tracking.queue_dir(tmp_path).glob("*.jsonl"))
