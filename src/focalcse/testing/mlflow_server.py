"""A local ``mlflow server`` for the tests and ``scripts/probe.py faults``: bound to 127.0.0.1, one
worker, job execution off, started in its own process group so that it is stopped by that group's id,
never by a name pattern."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class ServerError(RuntimeError):
    """The server exited or did not answer ``/health`` in time (the message has its log's tail)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(
    mlflow: str, port: int, backend_store_uri: str, artifacts_destination: str | None = None
) -> list[str]:
    cmd = [mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", backend_store_uri]
    if artifacts_destination:
        cmd += ["--artifacts-destination", artifacts_destination]
    return cmd


def kill_group(proc: subprocess.Popen | None) -> None:
    """SIGKILL ``proc``'s process group (it was started in its own session) and reap it."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM to the process group ``proc`` leads (it was started with a new session), SIGKILL to
    whatever of the group is left after ``grace`` seconds."""
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)  # anyone of the group still there?
        except ProcessLookupError:
            break
        time.sleep(0.3)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def log_tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no server log)"


class MlflowServer:
    """``mlflow server`` over ``backend_store_uri`` (default: ``folder/mlflow.db``), its output in
    ``folder/server-<n>.log`` (one per start)."""

    def __init__(
        self,
        folder: Path,
        port: int,
        backend_store_uri: str | None = None,
        artifacts_destination: str | None = None,
        mlflow: str | None = None,
    ) -> None:
        self.folder, self.port = Path(folder), port
        self.uri = f"http://127.0.0.1:{port}"
        self.command = server_command(
            mlflow or str(Path(sys.executable).parent / "mlflow"),
            port,
            backend_store_uri or f"sqlite:///{self.folder / 'mlflow.db'}",
            artifacts_destination,
        )
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def log_file(self) -> Path:
        return self.folder / f"server-{self.starts}.log"

    def start(self, timeout: float = 90.0) -> float:
        """Start and wait for ``/health``; returns the seconds it took. Raises :class:`ServerError`."""
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        self.starts += 1
        t0 = time.monotonic()
        with open(self.log_file, "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"mlflow server exited with {self.proc.returncode} before {self.uri}/health "
                    f"answered:\n{log_tail(self.log_file)}"
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
            time.sleep(0.3)
        self.kill()
        raise ServerError(
            f"mlflow server: {self.uri}/health did not answer within {timeout:.0f} s:\n{log_tail(self.log_file)}"
        )

    def kill(self) -> None:
        """SIGKILL (a server that dies: the fault the tests inject)."""
        kill_group(self.proc)
        self.proc = None

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit status."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        stop_group(proc, grace)
        return proc.returncode
