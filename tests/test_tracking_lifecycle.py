"""No MLflow run is left RUNNING by a dead process, and a run names its inputs and its code.

A run records the process that writes it (host, pid, start time); only a process of this machine that
is gone makes its run KILLED, after its queued records are sent. A train run logs its training sample
and the STS data as MLflow dataset inputs (digest: DVC's md5; profile: every file's sha256) and the
commit as ``mlflow.source.git.commit``. The slow tests run the real train stage of a tiny config in a
throw-away copy of the repo, with a sqlite store.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_tracking_faults import _logged, _queue_files, _start_train, _wait_for

from focalcse.ops import tracking
from focalcse.testing.project import TINY_PARAMS, make_tiny_project, project_env, run, save_tiny_backbone


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------- fast: judging a process
def test_process_gone_only_for_this_machines_dead_processes() -> None:
    me = tracking.process_identity()
    assert me["host"] == socket.gethostname() and me["pid"] == str(os.getpid())
    assert not tracking.process_gone(me)
    dead = _dead_pid()
    assert tracking.process_gone({"host": me["host"], "pid": str(dead)})  # no start time recorded
    assert tracking.process_gone({**me, "pid": str(dead)})
    # another host name, or the same name on another machine: never judged from here
    assert not tracking.process_gone({**me, "host": "another-host", "pid": str(dead)})
    assert not tracking.process_gone({"host": "another-host", "pid": str(dead)})
    if "machine_id" in me:
        assert not tracking.process_gone({**me, "pid": str(dead), "machine_id": "0" * 32})
    if "pid_start" in me:  # Linux: a PID now held by a process started at another time was reused
        boot = me["pid_start"].rpartition(":")[0]
        assert tracking.process_gone({**me, "pid_start": f"{boot}:1"})
        # started before a reboot: gone if the machine id says it is this machine, else unknown
        rebooted = {**me, "pid_start": "another-boot:1"}
        assert tracking.process_gone(rebooted) == ("machine_id" in me)
        assert not tracking.process_gone({k: v for k, v in rebooted.items() if k != "machine_id"})
    assert not tracking.process_gone({"host": me["host"]})  # no pid: cannot tell


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
def test_a_killed_process_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = tracking.process_identity(child.pid)
        assert not tracking.process_gone(alive)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert tracking.process_gone(alive)  # a zombie: its parent has not waited for it yet
        assert tracking.process_gone({"host": alive["host"], "pid": alive["pid"]})
    finally:
        child.kill()
        child.wait()


def test_a_run_of_another_host_is_never_marked_killed(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    store = MlflowClient(uri)
    exp = store.create_experiment("hosts", artifact_location=(tmp_path / "art").as_uri())
    dead = _dead_pid()  # a PID that runs nothing here
    stage = {"dvc_stage": "train@simcse-tiny-infonce-1", "focalcse_stage": "train"}
    elsewhere = {**tracking.identity_tags(), "focalcse.host": "worker-2", "focalcse.pid": str(dead)}
    elsewhere.pop("focalcse.machine_id", None)
    plain = store.create_run(exp, tags={**stage, **elsewhere})
    queued = store.create_run(exp, tags={**stage, **elsewhere})
    q = tmp_path / "q"
    q.mkdir()
    header = {"t": "run", "run_id": queued.info.run_id, "uri": uri, "host": "worker-2", "pid": str(dead)}
    metric = {"t": "m", "k": "loss", "v": 0.5, "ts": 0, "s": 1}
    (q / f"{queued.info.run_id}.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(metric) + "\n")

    tracking._kill_stale(store, exp, stage["dvc_stage"], None, q, uri)  # the item's next attempt
    counts = tracking.sync(folder=q)  # `focalcse tracking sync`
    assert tracking.reap(uri) == 0
    assert counts == {"runs": 1, "metrics": 1, "left": 0, "killed": 0, "reasons": {}}  # sent, not judged
    for r in (plain, queued):
        assert store.get_run(r.info.run_id).info.status == "RUNNING"
    assert [m.step for m in store.get_metric_history(queued.info.run_id, "loss")] == [1]


def test_sync_sends_a_dead_runs_queue_then_ends_it_killed(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    store = MlflowClient(uri)
    exp = store.create_experiment("sync", artifact_location=(tmp_path / "art").as_uri())
    dead = _dead_pid()
    gone = tracking.identity_tags()
    gone["focalcse.pid"] = str(dead)
    gone.pop("focalcse.pid_start", None)
    queued = store.create_run(exp, tags={"focalcse_stage": "train", **gone})
    bare = store.create_run(exp, tags={"focalcse_stage": "evaluate", **gone})  # no queue file
    ended = store.create_run(exp, tags={"focalcse_stage": "train", **gone})  # queued its own end
    q = tmp_path / "q"
    q.mkdir()
    for r, tail in ((queued, []), (ended, [{"t": "end", "status": "FINISHED"}])):
        header = {
            "t": "run",
            "run_id": r.info.run_id,
            "uri": uri,
            "host": socket.gethostname(),
            "pid": str(dead),
        }
        metrics = [{"t": "m", "k": "loss", "v": 1.0, "ts": 0, "s": s} for s in (1, 2)]
        (q / f"{r.info.run_id}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in [header, *metrics, *tail])
        )
    counts = tracking.sync(folder=q)
    assert counts == {"runs": 2, "metrics": 4, "left": 0, "killed": 2, "reasons": {}}
    assert store.get_run(queued.info.run_id).info.status == "KILLED"
    assert [m.step for m in store.get_metric_history(queued.info.run_id, "loss")] == [1, 2]
    assert store.get_run(bare.info.run_id).info.status == "KILLED"
    assert store.get_run(ended.info.run_id).info.status == "FINISHED"
    assert not list(q.glob("*.jsonl"))


def test_dvc_md5_is_dvcs_hash(tmp_path: Path) -> None:
    folder = tmp_path / "sts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.tsv").write_bytes(b"x\ty\n")
    (folder / "sub" / "b.json").write_bytes(b"{}\n")
    assert tracking.dvc_md5(folder / "a.tsv") == hashlib.md5(b"x\ty\n").hexdigest()
    listing = [
        {"md5": hashlib.md5(b"x\ty\n").hexdigest(), "relpath": "a.tsv"},
        {"md5": hashlib.md5(b"{}\n").hexdigest(), "relpath": "sub/b.json"},
    ]
    want = hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir"
    assert tracking.dvc_md5(folder) == want


# ---------------------------------------------------------------- slow: the real stage
@pytest.fixture(scope="module")
def project(tmp_path_factory, data_mirror) -> Path:
    model = save_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny")
    dest = make_tiny_project(
        tmp_path_factory.mktemp("lifecycle") / "repo",
        data_mirror,
        model,
        sweep={"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1, 2]},
        # 120 steps and no checkpoint before the end (a section is replaced, not merged)
        train={**TINY_PARAMS["train"], "epochs": 20, "eval_steps": 30, "checkpoint_steps": 1000},
    )
    run(["dvc", "repro", "sample", "prepare_sts"], dest, project_env(dest))
    return dest


def _stage_runs(client, stage: str) -> list:
    exp = client.get_experiment_by_name("tiny")
    return client.search_runs([exp.experiment_id], filter_string=f"tags.dvc_stage = '{stage}'")


@pytest.mark.slow
def test_killed_before_its_first_checkpoint_then_rerun(project: Path) -> None:
    from mlflow import MlflowClient

    env = project_env(project)  # sqlite store in the copy
    work = project / "models/simcse/tiny/infonce/.seed1.work"
    proc = _start_train(project, env, 1, stdout=subprocess.DEVNULL)
    _wait_for(lambda: _logged(project, 3), proc)  # a few steps logged
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (work / "last").exists() and not (work / "previous").exists()  # no checkpoint yet
    dead_id = json.loads((work / tracking.RUN_FILE).read_text())["run_id"]
    (queued,) = _queue_files(project)
    assert queued.stem == dead_id
    # one metric surely not yet sent (the sender sends every few seconds), as the stage journals it
    with open(queued, "a") as f:
        f.write(json.dumps({"t": "m", "k": "queued_only", "v": 1.0, "ts": 0, "s": 7}) + "\n")
    journaled = {(r["k"], r["s"]) for r in tracking.read_queue(queued) if r["t"] == "m"}
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    assert client.get_run(dead_id).info.status == "RUNNING"
    assert not client.get_metric_history(dead_id, "queued_only")

    done = run([sys.executable, "stages/train.py", "simcse", "tiny", "infonce", "1"], project, env)
    assert f"MLflow run {dead_id} marked KILLED" in done.stdout
    runs = {r.info.run_id: r for r in _stage_runs(client, "train@simcse-tiny-infonce-1")}
    assert len(runs) == 2 and dead_id in runs
    (new_id,) = set(runs) - {dead_id}
    assert runs[new_id].info.status == "FINISHED" and runs[dead_id].info.status == "KILLED"
    # the dead run's queued metrics were sent before it was ended
    have = {
        (key, m.step) for key in {k for k, _ in journaled} for m in client.get_metric_history(dead_id, key)
    }
    assert journaled and journaled <= have
    assert not _queue_files(project)
    train = json.loads((project / "metrics/train/simcse-tiny-infonce-seed1.json").read_text())
    steps = [m.step for m in client.get_metric_history(new_id, "loss")]
    assert steps == list(range(1, train["steps"] + 1))


@pytest.mark.slow
def test_a_train_run_names_its_datasets_and_commit(project: Path) -> None:
    from mlflow import MlflowClient

    env = project_env(project)
    run([sys.executable, "stages/train.py", "simcse", "tiny", "infonce", "2"], project, env)
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    (r,) = _stage_runs(client, "train@simcse-tiny-infonce-2")
    assert r.info.status == "FINISHED"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True, check=True
    ).stdout.strip()
    tags = r.data.tags
    assert tags["mlflow.source.git.commit"] == head and tags["git_commit"].startswith(head)
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"] == "stages/train.py"
    assert tags["focalcse.host"] == socket.gethostname() and "focalcse.pid" in tags

    inputs = {i.dataset.name: i for i in r.inputs.dataset_inputs}
    assert set(inputs) == {"data/corpus/train.txt", "data/sts"}
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    dvc_md5 = {o["path"]: o["md5"] for st in ("sample", "prepare_sts") for o in lock["stages"][st]["outs"]}

    corpus = inputs["data/corpus/train.txt"]
    data = (project / "data/corpus/train.txt").read_bytes()
    assert corpus.dataset.digest == hashlib.md5(data).hexdigest() == dvc_md5["data/corpus/train.txt"]
    assert json.loads(corpus.dataset.profile)["sha256"] == hashlib.sha256(data).hexdigest()
    assert {t.key: t.value for t in corpus.tags} == {"mlflow.data.context": "training"}
    assert corpus.dataset.source_type == "local"
    assert json.loads(corpus.dataset.source)["uri"] == str((project / "data/corpus/train.txt").resolve())

    sts = inputs["data/sts"]
    assert sts.dataset.digest == dvc_md5["data/sts"]  # DVC's folder hash
    files = json.loads(sts.dataset.profile)["files"]
    on_disk = sorted(p for p in (project / "data/sts").rglob("*") if p.is_file())
    assert sorted(files) == [p.relative_to(project / "data/sts").as_posix() for p in on_disk]
    for p in on_disk:
        rel = p.relative_to(project / "data/sts").as_posix()
        assert files[rel]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert {t.key: t.value for t in sts.tags} == {"mlflow.data.context": "validation"}
    assert sts.dataset.source_type == "local"  # the tiny project's STS data came from a mirror
