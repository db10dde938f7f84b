"""Multi-machine mechanics (``focalcse.ops.workpool``, ``pipelines/pool.py``) on a miniature DVC project.

The project's ``train`` items write the directory they ran in into their output, so a restored
output proves where the command really ran: on the "worker" checkout, then restored by the
coordinator from the shared DVC remote's run-cache instead of being run again. The Prefect work pool
itself (a server and process workers) is exercised by ``scripts/pool_demo.py``; here the deployment
call is replaced by running the worker flow in-process, everything else is real (git, DVC, Prefect
test server).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from focalcse.ops import dvc_yaml, workpool
from focalcse.ops.orchestration import DETERMINISTIC, TRANSIENT, StageError, run_dvc_stage

GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t"]
MINI_DVC = {
    "stages": {
        "sample": {
            "cmd": "python make.py sample",
            "deps": ["make.py"],
            "params": ["data.num_sentences"],
            "outs": ["data/s.txt"],
        },
        "train": {
            "matrix": {"seed": "${sweep.seeds}"},
            "cmd": "python make.py train ${item.seed}",
            "deps": ["make.py", "data/s.txt"],
            "outs": ["models/seed${item.seed}.txt"],
            "metrics": [{"metrics/train-${item.seed}.json": {"cache": False}}],
        },
        "summary": {
            "cmd": "python make.py summary",
            "deps": ["make.py", "models"],
            "metrics": [{"metrics/summary.json": {"cache": False}}],
        },
    }
}
MAKE_PY = """
    import json, os, pathlib, sys
    what = sys.argv[1]
    if what == "sample":
        pathlib.Path("data").mkdir(exist_ok=True)
        pathlib.Path("data/s.txt").write_text("sentences\\n")
    elif what == "train":
        seed = sys.argv[2]
        for d in ("models", "metrics"):
            pathlib.Path(d).mkdir(exist_ok=True)
        pathlib.Path(f"models/seed{seed}.txt").write_text(os.getcwd())
        pathlib.Path(f"metrics/train-{seed}.json").write_text(json.dumps({"seed": int(seed)}))
    else:
        ran = sorted(p.read_text() for p in pathlib.Path("models").glob("*.txt"))
        pathlib.Path("metrics/summary.json").write_text(json.dumps({"ran_in": ran}))
"""


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }


def _sh(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture
def project(tmp_path: Path) -> SimpleNamespace:
    return make_project(tmp_path)


def make_project(tmp_path: Path) -> SimpleNamespace:
    """A committed mini DVC project (``coord``), its bare ``origin`` and an empty DVC remote folder."""
    coord = tmp_path / "coord"
    coord.mkdir()
    (coord / "dvc.yaml").write_text(yaml.safe_dump(MINI_DVC, sort_keys=False))
    # valid focalcse parameter sets (the flow validates them), used by the mini stages
    (coord / "params.yaml").write_text(
        yaml.safe_dump({"data": {"num_sentences": 3}, "sweep": {"seeds": [1, 2]}})
    )
    (coord / "params").mkdir()
    (coord / "params" / "other.yaml").write_text(
        yaml.safe_dump({"data": {"num_sentences": 5}, "sweep": {"seeds": [1, 2]}})
    )
    (coord / "make.py").write_text(textwrap.dedent(MAKE_PY))
    for cmd in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        ["git", "add", "-A"],
        ["git", *GIT_ID, "commit", "-qm", "mini"],
    ):
        _sh(cmd, coord)
    origin = tmp_path / "origin.git"
    _sh(["git", "clone", "-q", "--bare", str(coord), str(origin)], tmp_path)
    _sh(["git", "remote", "add", "origin", str(origin)], coord)
    remote = tmp_path / "dvc-remote"
    return SimpleNamespace(coord=coord, origin=origin, remote=remote, commit=workpool.head_commit(coord))


# ---------------------------------------------------------------- commits and checkouts
def test_only_pipeline_outputs_may_differ_from_the_commit(project) -> None:
    coord = project.coord
    assert workpool.require_clean(coord) == project.commit
    (coord / "dvc.lock").write_text("schema: '2.0'\n")
    _sh(["git", "add", "dvc.lock"], coord)
    _sh(["git", *GIT_ID, "commit", "-qm", "lock"], coord)
    (coord / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")  # rewritten by a run: allowed
    (coord / "untracked.txt").write_text("x")  # untracked: workers would not need it
    assert workpool.uncommitted_changes(coord) == []
    (coord / "params.yaml").write_text("data: {num_sentences: 4}\n")
    with pytest.raises(workpool.CheckoutError, match=r"uncommitted changes in params\.yaml"):
        workpool.require_clean(coord)
    assert workpool.uncommitted_changes(coord, (*workpool.PIPELINE_OUTPUTS, "params.yaml")) == []


def test_origin_url_names_the_missing_remote(project, tmp_path) -> None:
    assert workpool.origin_url(project.coord) == str(project.origin)
    _sh(["git", "remote", "remove", "origin"], project.coord)
    with pytest.raises(workpool.CheckoutError, match="no `origin` git remote"):
        workpool.origin_url(project.coord)


def test_worker_checkout_is_made_once_per_commit_and_label(project, tmp_path) -> None:
    work = tmp_path / "worker"
    first = workpool.worker_checkout(str(project.origin), project.commit, work)
    assert first == work / f"{project.commit[:12]}-default"
    assert workpool.head_commit(first) == project.commit
    assert (work / "dvc-cache").as_posix() in (first / ".dvc" / "config.local").read_text()
    (first / "marker").write_text("kept")
    assert workpool.worker_checkout(str(project.origin), project.commit, work) == first
    assert (first / "marker").read_text() == "kept"  # reused, not cloned again
    other = workpool.worker_checkout(str(project.origin), project.commit, work, label="other")
    assert other != first and workpool.head_commit(other) == project.commit


def test_worker_checkout_refuses_an_unknown_commit_and_leaves_nothing(project, tmp_path) -> None:
    work = tmp_path / "worker"
    with pytest.raises(workpool.CheckoutError, match="is not in .*push it there"):
        workpool.worker_checkout(str(project.origin), "f" * 40, work)
    assert sorted(p.name for p in work.iterdir()) == [".checkout.lock"]
    with pytest.raises(workpool.CheckoutError, match="expected a full 40-hex"):
        workpool.worker_checkout(str(project.origin), "HEAD", work)
    with pytest.raises(workpool.CheckoutError, match="label 'a/b'"):
        workpool.worker_checkout(str(project.origin), project.commit, work, label="a/b")


def test_workdir_comes_from_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(workpool.WORKDIR_ENV, str(tmp_path / "w"))
    assert workpool.workdir() == (tmp_path / "w").resolve()
    assert workpool.workdir(tmp_path / "x") == (tmp_path / "x").resolve()
    monkeypatch.delenv(workpool.WORKDIR_ENV)
    assert workpool.workdir() == Path("~/.cache/focalcse/pool").expanduser().resolve()


def test_label_for_parameter_sets() -> None:
    assert workpool.label_for(None) == "default" and workpool.label_for("") == "default"
    assert workpool.label_for("paper") == "paper"
    odd = workpool.label_for("my set")
    assert odd.startswith("my_set-") and odd != workpool.label_for("my_set")


# ---------------------------------------------------------------- DVC's run-cache across checkouts
@pytest.mark.slow
def test_an_item_run_on_a_worker_is_restored_not_rerun_by_the_coordinator(project, tmp_path) -> None:
    coord = project.coord
    workpool.set_remote(coord, str(project.remote))
    local = run_dvc_stage(coord, "sample")
    assert local.action == "ran", local.output
    workpool.push_run_cache(coord, "sample")

    worker = workpool.worker_checkout(str(project.origin), project.commit, tmp_path / "worker")
    workpool.set_remote(worker, str(project.remote))
    assert workpool.restore_upstream(worker, "train@1") == {"sample": "restored"}  # from the remote
    assert workpool.restore_upstream(worker, "train@2") == {}  # already up to date: not touched
    remote = run_dvc_stage(worker, "train@1", pull=True)
    assert remote.returncode == 0 and remote.action == "ran", remote.output  # the item runs on the worker
    workpool.push_run_cache(worker, "train@1")

    back = run_dvc_stage(coord, "train@1", pull=True)
    assert back.returncode == 0 and back.action == "restored", back.output
    assert (coord / "models/seed1.txt").read_text() == str(worker)  # the worker's output, not a rerun
    assert json.loads((coord / "metrics/train-1.json").read_text()) == {"seed": 1}  # cache: false too
    lock = yaml.safe_load((coord / "dvc.lock").read_text())
    assert "train@1" in lock["stages"]
    status = _sh([sys.executable, "-m", "dvc", "status", "train@1"], coord)
    assert "up to date" in status


def test_push_without_a_remote_is_a_deterministic_failure(project) -> None:
    assert run_dvc_stage(project.coord, "sample").returncode == 0
    with pytest.raises(StageError) as info:
        workpool.push_run_cache(project.coord, "sample")
    assert info.value.kind == DETERMINISTIC and info.value.stage == "push after sample"


def test_remote_failures_are_classified() -> None:
    pytest.importorskip("prefect")
    from prefect.states import Crashed, Failed

    from pipelines.pool import _remote_failure

    def run(state):
        return SimpleNamespace(name="brave-fox", id="123", state=state)

    assert _remote_failure("train@1", run(Crashed(message="worker lost"))).kind == TRANSIENT
    msg = "Flow run encountered an exception: StageError: stage 'train@1' failed (transient, exit 75):"
    assert _remote_failure("train@1", run(Failed(message=msg))).kind == TRANSIENT
    det = _remote_failure(
        "train@1", run(Failed(message="StageError: stage 'x' failed (deterministic, exit 1)"))
    )
    assert det.kind == DETERMINISTIC and "brave-fox" in det.tail


# ---------------------------------------------------------------- the coordinator flow
@pytest.mark.slow
def test_reproduce_pool_sends_train_items_to_the_pool_and_restores_them(
    project, tmp_path, monkeypatch
) -> None:
    pytest.importorskip("prefect")
    import prefect.deployments
    from prefect.states import Completed
    from prefect.testing.utilities import prefect_test_harness

    from pipelines import pool

    calls: list[dict] = []

    def fake_run_deployment(name, parameters, timeout, as_subflow):
        """What a worker does with the flow run: the worker flow, in its own checkout."""
        calls.append({"name": name, **parameters})
        result = pool.stage_item.fn(**parameters)
        return SimpleNamespace(name=f"run-{parameters['stage']}", id="0", state=Completed(data=result))

    def mini_set_dvc_yaml(project, set_name=""):
        """The mini graph as a set folder's dvc.yaml (sets/<name>/): the checkout's script two levels up."""
        text = yaml.safe_dump(MINI_DVC, sort_keys=False)
        return text.replace("python make.py", "python ../../make.py").replace("- make.py", "- ../../make.py")

    monkeypatch.setattr(prefect.deployments, "run_deployment", fake_run_deployment)
    monkeypatch.setattr(dvc_yaml, "render", mini_set_dvc_yaml)
    monkeypatch.setenv(workpool.WORKDIR_ENV, str(tmp_path / "worker"))
    monkeypatch.setenv("PATH", _env()["PATH"])
    with prefect_test_harness(server_startup_timeout=120):
        assert pool.deploy(pool="cpu-pool") == pool.DEFAULT_DEPLOYMENT  # source: this checkout
        from prefect import get_client

        with get_client(sync_client=True) as client:
            dep = client.read_deployment_by_name(pool.DEFAULT_DEPLOYMENT)
            assert client.read_work_pool("cpu-pool").type == "process"
        assert dep.work_pool_name == "cpu-pool" and dep.entrypoint == "pipelines/pool.py:stage_item"
        (step,) = dep.pull_steps  # workers run the flow from the source folder
        assert step["prefect.deployments.steps.set_working_directory"]["directory"] == str(pool.REPO)
        status = pool.reproduce_pool(
            repo=str(project.coord),
            dvc_remote=str(project.remote),
            param_set="other",
            concurrency=2,
            retry_delay_s=0,
        )
    assert status == {"sample": "ran", "train@1": "restored", "train@2": "restored", "summary": "ran"}
    assert sorted(c["stage"] for c in calls) == ["train@1", "train@2"]
    assert {c["commit"] for c in calls} == {project.commit} and {c["param_set"] for c in calls} == {"other"}
    assert all(c["git_url"] == str(project.origin) and c["name"] == pool.DEFAULT_DEPLOYMENT for c in calls)
    checkout = tmp_path / "worker" / f"{project.commit[:12]}-other"
    # the set ran in its own folder, here and on the worker: the default's paths were never written
    here, there = project.coord / "sets" / "other", checkout / "sets" / "other"
    summary = json.loads((here / "metrics/summary.json").read_text())
    assert summary == {"ran_in": [str(there), str(there)]}  # both items ran on the worker
    assert yaml.safe_load((there / "params.yaml").read_text())["data"]["num_sentences"] == 5  # the same set
    assert not (project.coord / "metrics").exists() and not (project.coord / "models").exists()
    assert "up to date" in _sh([sys.executable, "-m", "dvc", "status", "dvc.yaml"], here)


def test_reproduce_pool_refuses_uncommitted_changes(project) -> None:
    pytest.importorskip("prefect")
    from pipelines import pool

    (project.coord / "make.py").write_text("print('changed')\n")
    with pytest.raises(workpool.CheckoutError, match=r"uncommitted changes in make\.py"):
        pool.reproduce_pool.fn(repo=str(project.coord))


# ---------------------------------------------------------------- the worker stops on the first SIGINT
def _ignoring_sigint() -> None:  # what a shell without job control gives a background command
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _default_sigint() -> None:  # what an interactive shell gives; set, not inherited: a pytest-xdist
    import signal  # worker, or a suite started in the background, may itself have SIGINT ignored

    signal.signal(signal.SIGINT, signal.SIG_DFL)


INTERRUPTIBLE = textwrap.dedent(
    """
    import os, signal, sys, time
    from focalcse.ops.worker import interruptible
    print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, interruptible(), flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)
    """
)


@pytest.mark.parametrize("ignored", [True, False])
def test_a_worker_gets_sigint_back_when_it_inherited_it_ignored(ignored: bool) -> None:
    import signal

    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTIBLE],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_ignoring_sigint if ignored else _default_sigint,
    )
    assert proc.stdout.split() == [str(ignored), str(ignored)], proc.stderr
    # the SIGINT was heard: KeyboardInterrupt, then Python ends by that signal
    assert proc.returncode == -signal.SIGINT and "KeyboardInterrupt" in proc.stderr


@pytest.mark.slow
def test_a_pool_worker_started_with_sigint_ignored_stops_on_the_first(tmp_path: Path) -> None:
    import signal
    import socket
    import time
    import urllib.request

    pytest.importorskip("prefect")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    venv = Path(sys.executable).parent
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    server = subprocess.Popen(
        [str(venv / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{env['PREFECT_API_URL']}/health", timeout=2)  # noqa: S310
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no Prefect server"
                time.sleep(0.5)
        log = tmp_path / "worker.log"
        cmd = [sys.executable, "-m", "focalcse.cli", "worker", "--pool", "p", "--name", "w"]
        with open(log, "w") as out:
            worker = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_ignoring_sigint
            )
        while "started!" not in log.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        worker.send_signal(signal.SIGINT)
        try:
            assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the session the server leads
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
