"""The UI make targets on a port other than their default: each served UI calls its API on the port
it was started on. Each server is started through its make target on a free 127.0.0.1 port, in a
throw-away folder (its stores land there), asked for what its UI calls, and stopped by its PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a server start: 10-30 s each

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent  # the environment running the tests


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@contextlib.contextmanager
def _make_target(target: str, cwd: Path, ready: str, env: dict[str, str] | None = None, **variables: str):
    """``make <target>`` from the repo's Makefile with this environment's tools (``-o`` the setup
    stamp: no install), in its own session; yields once ``ready`` answers 200; then the session is
    stopped by its leader's PID (SIGTERM, SIGKILL after 20 s)."""
    tool = VENV / "bin" / ("prefect" if "prefect" in target else "mlflow")
    if not tool.is_file():
        pytest.skip(f"{tool} is not installed")
    args = [f"{k}={v}" for k, v in {"VENV": str(VENV), **variables}.items()]
    cmd = ["make", "-s", "-f", str(REPO / "Makefile"), "-o", str(VENV / ".installed"), target, *args]
    env = {**os.environ, "PREFECT_HOME": str(cwd / "prefect-home"), **(env or {})}
    env.pop("PREFECT_UI_API_URL", None)
    log = cwd / f"{target}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(OSError):
                if _get(ready, timeout=2)[0] == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{target} did not answer {ready}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the session make leads: make and the server it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_prefect_ui_calls_the_api_on_the_chosen_port(tmp_path: Path) -> None:
    port = _free_port()
    # a PREFECT_API_URL on the default port, as a profile or a shell may hold: the UI must not follow it
    default = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    ready = f"http://127.0.0.1:{port}/api/health"
    with _make_target("prefect-server", tmp_path, ready, env=default, PREFECT_PORT=str(port)):
        status, body = _get(f"http://127.0.0.1:{port}/ui-settings")
    assert status == 200, body
    assert json.loads(body)["api_url"] == f"http://127.0.0.1:{port}/api"


def test_mlflow_ui_calls_the_api_on_the_chosen_port(tmp_path: Path) -> None:
    port = _free_port()
    with _make_target("mlflow-ui", tmp_path, f"http://127.0.0.1:{port}/health", MLFLOW_PORT=str(port)) as log:
        status, page = _get(f"http://127.0.0.1:{port}/")
        # the page's scripts call the API relative to where it was served: the same port answers
        api, body = _get(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search?max_results=1")
        printed = log.read_text()
    assert status == 200 and '<div id="root"' in page
    assert "127.0.0.1:5000" not in page and "localhost:5000" not in page
    assert api == 200 and "experiments" in json.loads(body), body
    assert f"MLflow UI: http://127.0.0.1:{port}/" in printed
    assert (tmp_path / "mlflow.db").is_file()  # the store is where the target was run, not the repo
