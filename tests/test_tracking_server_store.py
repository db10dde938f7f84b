"""Tracking works whichever way the store was last used: after ``make mlflow-ui``'s server gave an
experiment an ``mlflow-artifacts:`` location, a run on the sqlite file still logs its artifacts (the
locations are re-pointed at the folder that server keeps them in, so it still serves the old ones);
an experiment created through a server on this machine gets that folder from the start; and
``focalcse tracking sync`` says why a run it cannot send is left queued."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from focalcse.ops.tracking.store import SERVER_ARTIFACTS, experiment_id
from focalcse.testing.mlflow_server import MlflowServer, free_port

pytestmark = pytest.mark.slow


def test_a_store_the_ui_server_used_still_takes_direct_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    from mlflow import MlflowClient

    root = tmp_path / "repo"
    (root / ".dvc").mkdir(parents=True)  # the repository root the tracking code finds
    monkeypatch.chdir(root)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    sqlite = f"sqlite:///{root / 'mlflow.db'}"
    # as `make mlflow-ui` starts it: the checkout's store, artifacts under ./mlartifacts
    server = MlflowServer(
        root, free_port(), backend_store_uri="sqlite:///mlflow.db", artifacts_destination="./mlartifacts"
    )
    server.start()
    try:
        http = MlflowClient(tracking_uri=server.uri)
        # an experiment the server made with its own default, e.g. from the UI or an older client
        old_exp = http.create_experiment("cpu-default")
        assert http.get_experiment(old_exp).artifact_location.startswith(SERVER_ARTIFACTS)
        old_run = http.create_run(old_exp).info.run_id
        (tmp_path / "old.txt").write_text("through the server\n")
        http.log_artifact(old_run, str(tmp_path / "old.txt"))
        # one this project creates through a server on this machine: the shared folder from the start
        pinned = experiment_id(http, server.uri, "frameworks")
        assert http.get_experiment(pinned).artifact_location == (root / "mlartifacts").as_uri()
    finally:
        server.stop()

    direct = MlflowClient(tracking_uri=sqlite)
    exp = experiment_id(direct, sqlite, "cpu-default")  # what a stage does first
    assert exp == old_exp
    said = capsys.readouterr().err
    assert "had the server location mlflow-artifacts:" in said and "make mlflow-ui" in said
    assert direct.get_experiment(exp).artifact_location.startswith((root / "mlartifacts").as_uri())
    run = direct.create_run(exp).info.run_id
    (tmp_path / "new.txt").write_text("direct to the sqlite file\n")
    direct.log_artifact(run, str(tmp_path / "new.txt"))  # raised before: an mlflow-artifacts URI needs http
    assert (root / "mlartifacts" / exp / run / "artifacts" / "new.txt").is_file()
    assert (root / "mlartifacts" / exp / old_run / "artifacts" / "old.txt").is_file()

    server.start()  # the UI again: it serves the run logged through it and the direct one
    try:
        http = MlflowClient(tracking_uri=server.uri)
        assert [f.path for f in http.list_artifacts(old_run)] == ["old.txt"]
        assert [f.path for f in http.list_artifacts(run)] == ["new.txt"]
        got = http.download_artifacts(run, "new.txt", str(tmp_path))
        assert Path(got).read_text() == "direct to the sqlite file\n"
    finally:
        server.stop()


def test_sync_says_why_a_run_stays_queued(tmp_path: Path) -> None:
    """A queued run for a store that is down: `focalcse tracking sync` exits 75 and names the run,
    the store and the reason, and what to do."""
    q = tmp_path / "q"
    q.mkdir()
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    header = {"t": "run", "run_id": "0123abcd", "uri": uri, "host": "h", "pid": "1"}
    metric = {"t": "m", "k": "loss", "v": 0.5, "ts": 0, "s": 1}
    (q / "0123abcd.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(metric) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "focalcse.cli", "tracking", "sync", "--queue", str(q)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MLFLOW_TRACKING_URI": uri},
    )
    assert done.returncode == 75, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "1 still queued" in lines[0]
    assert (
        lines[1].startswith("  0123abcd: the store http://127.0.0.1:") and "could not be used (" in lines[1]
    )
    assert "start the store" in lines[2] and (q / "0123abcd.jsonl").is_file()
