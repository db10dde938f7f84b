"""One trainer per item, whatever killed the last one: a real ``dvc repro`` killed with SIGKILL takes
its trainer with it (the stage stops when its parent dies), and a second trainer on an item that is
already training is refused with one line naming the process that holds the item's lock."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from focalcse.testing.project import NO_TRACKING, make_tiny_project, project_env

pytestmark = pytest.mark.slow
ITEM = ("simcse", "tiny", "infonce", "1")
STAGE = "train@" + "-".join(ITEM)


def _trainers(root: psutil.Process) -> list[psutil.Process]:
    return [p for p in root.children(recursive=True) if "stages/train.py" in " ".join(p.cmdline())]


def _wait_for(what: str, check, timeout: float = 240.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_dvc_stops_its_trainer_and_a_second_trainer_is_refused(
    tmp_path: Path, data_mirror: Path, tiny_backbone: Path
) -> None:
    repo = make_tiny_project(
        tmp_path / "repo",
        data_mirror,
        tiny_backbone,
        sweep={"backbones": ["tiny"], "losses": ["infonce"], "seeds": [1]},
        ablation={"temperatures": [], "ms": []},
        train={"epochs": 200, "eval_steps": 500},  # long enough to be killed mid-run
    )
    env = project_env(repo, **NO_TRACKING)
    dvc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dvc"), "repro", STAGE],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        parent = psutil.Process(dvc.pid)
        trainer = _wait_for("the train stage", lambda: _trainers(parent))[0]
        lock = repo / ".focalcse" / "locks" / f"{STAGE}.lock"
        _wait_for("the item's lock", lambda: lock.is_file() and lock.read_text().strip() == str(trainer.pid))

        # a second trainer on the same item, as a rerun would start it: refused, naming the holder
        second = subprocess.run(
            [sys.executable, "stages/train.py", *ITEM],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1 and len(lines) == 1, second.stderr
        assert f"{STAGE} is already running in process {trainer.pid}" in lines[0]
        assert trainer.is_running()  # the refusal did not disturb the first

        # kill -9 of the dvc process, as a crashed terminal or the OOM killer would
        os.kill(dvc.pid, signal.SIGKILL)
        dvc.wait(timeout=30)
        gone, alive = psutil.wait_procs([trainer], timeout=30)
        assert not alive, f"trainer {trainer.pid} still running after its dvc was killed"
        # the kernel released the lock with the process: a new trainer may take the item
        import fcntl

        with lock.open("r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(dvc.pid, signal.SIGKILL)
        for p in psutil.process_iter(["cmdline", "cwd"]):
            try:
                if p.info["cwd"] == str(repo) and "stages/" in " ".join(p.info["cmdline"] or []):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
