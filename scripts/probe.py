"""Fault probes: the pipeline against dead servers, killed stages, corrupt checkpoints and bad inputs.

Three probes, one command each (docs/reliability.md and docs/results.md show what they measured)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/probe.py faults \\
        --steps 48 --every 16 --out-json fault_measure.json
    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/probe.py inputs --out-json probes.json
    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/probe.py determinism \\
        --runs 5 --out-json docs/determinism.json

``faults`` works in a throw-away copy of the working tree; ``inputs`` works in the current directory,
a checkout whose pipeline has run (``dvc repro`` finished), and restores every change it makes. Each
prints a Markdown summary, writes every figure to ``--out-json`` and exits 1 when a check fails.

**faults**: three fault scenarios on one train item (all-MiniLM-L6-v2, infonce, seed 1; with
``--tiny-backbone DIR`` a saved HF folder trained as backbone ``tiny``, a quick check of the probe).
Options: ``--steps N`` (default 48; ``data.num_sentences`` = 64 x N), ``--every K`` (default 16:
``train.eval_steps`` and ``train.checkpoint_steps``; ``--steps`` must exceed 2K), ``--kill-after S``
(server-down scenario: seconds after the stage starts; default 30% of the baseline's wall time),
``--keep DIR`` (work in DIR, kept afterwards; default a temp folder, removed), ``--threads N``
(OMP/MKL threads of the stages; default: inherited), ``--timeout S`` (per stage run).

The copy holds the files ``git ls-files --cached --others --exclude-standard`` lists, without
data/models/metrics/reports, with ``params.yaml`` = the repo's but ``data.num_sentences``,
``data.mirror``, ``train.eval_steps``/``checkpoint_steps`` and a sweep of the one item
(``ablation.loss`` and ``ablation.seed`` follow it, as the config requires); the stages import the
copy's ``src`` (``PYTHONPATH``). ``check``, ``sample`` and ``prepare_sts`` run first. A real ``mlflow
server`` (127.0.0.1, a free port, sqlite store and artifacts in the work folder) is started, and
always stopped (its process group) at the end.

1. Server down. (a) Baseline ``python stages/train.py simcse all-MiniLM-L6-v2 infonce 1`` with the server
   up: wall time, the model folder's digest (sha256 over sorted relative paths and contents, as
   ``focalcse.ops.tracking.folder_fingerprint``), the ``loss`` steps MLflow holds. (b) Outputs
   removed, the same command again, the server SIGKILLed ``--kill-after`` seconds in (not before the
   stage has journaled its first step); training finishes; the server is restarted on the same store
   and port and ``focalcse tracking sync`` run; MLflow's runs of the item and their ``loss`` / ``lr``
   / ``grad_norm`` steps (must be 1..N, each once), the wall-time ratio (b)/(a), digest equal to (a).
2. Corrupt checkpoint. Outputs removed, the command run with the server up and SIGKILLed (its
   process group) once ``last/`` holds the step-2K checkpoint (``previous/`` step K); half of
   ``last/model.safetensors`` is cut off and the command rerun: the one-line moved-aside message, the
   step it resumed from, the final digest against (a), the MLflow steps of the (resumed) run.
3. Kill before the first checkpoint. Outputs removed, the command run with the server up and
   SIGKILLed once step ``--every``/2 is journaled (no checkpoint yet); the command rerun to the end,
   then ``focalcse tracking sync``: the dead attempt's run must end KILLED (the rerun finds its process
   gone), the rerun be one new FINISHED run with every step once, the model digest equal to (a).

``--out-json`` also gets the CPU model and the repo's commit. Checks: steps missing or doubled,
digests that differ, no fallback message.

**inputs**: each probe changes one thing (a param, the mirror, the network), runs ``dvc repro`` and
restores the change. It records the wall time, the ``error:`` lines, whether a traceback was printed,
which stages ran, and whether ``git status --porcelain``, ``dvc status`` and the md5 of every file
under ``models/``, ``metrics/``, ``data/`` and ``reports/`` are the same after as before. Probes:

- ``batch_size -1``, a typo key (``train.learning_rat``), ``max_steps`` beyond the sample
  (``train.max_steps: 1000``), a malformed STS-B score line and an empty corpus (a mirror copy each,
  in a temp folder), no mirror while offline (``data.mirror`` and the environment's emptied);
- two ``dvc repro`` at once: a ``report.*`` edit makes the first rerun ``check`` and ``report``; the
  second starts 3 s later and must be refused while the first finishes.

Checks: every probe stops in ``check`` with one ``error:`` line and no traceback, the second of two
concurrent runs is refused, and no output changes.

**determinism**: in the current directory (a checkout or set folder whose ``sample`` and
``prepare_sts`` have run), ``dvc repro --force -s ITEM`` ``--runs`` times one after another (default
the first train item of the sweep; ``--item`` names another). Per run: the wall time, the model
folder's md5 as ``dvc.lock`` records it, and the final loss of the item's train metrics; beside them
the md5 the committed ``dvc.lock`` (git HEAD) holds for the item, the commit, the CPU and its matmul
flags. Check: every run gives the same md5 (and, where the item is committed, the committed one).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from focalcse.core.frameworks import default_framework
from focalcse.layout import Layout, run_name, stage_name
from focalcse.ops.tracking import folder_fingerprint  # as the train run's model_sha256
from focalcse.testing.mlflow_server import MlflowServer, ServerError, free_port, kill_group
from focalcse.testing.project import REPO, TINY_PARAMS, bad_mirror, copy_repo

BACKBONE, LOSS, SEED = "all-MiniLM-L6-v2", "infonce", 1
TINY = "tiny"  # the backbone's name with --tiny-backbone
BATCH = 64
STEP_KEYS = ("loss", "lr", "grad_norm")


# ---------------------------------------------------------------- small helpers
def fail(msg: str) -> None:
    sys.exit(f"probe: {msg}")


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return "unknown"


def repo_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    try:
        dirty = [line[3:] for line in git("status", "--porcelain").splitlines() if line.strip()]
        return {"commit": git("rev-parse", "HEAD").strip(), "dirty_files": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty_files": []}


# ---------------------------------------------------------------- the project copy
def make_project(
    dest: Path, steps: int, every: int, mirror: str, tiny_backbone: Path | None
) -> dict[str, Any]:
    """Copy the working tree to ``dest`` and write its params.yaml; returns the params written.
    With ``tiny_backbone`` (an HF folder) the item trains it as backbone ``tiny``, at the tests'
    precision and sequence length."""
    copy_repo(dest)
    (dest / "dvc.lock").unlink(missing_ok=True)  # never used: the stages run directly, not via DVC
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"] = {**params["data"], "num_sentences": BATCH * steps, "mirror": mirror}
    params["train"] = {**params["train"], "eval_steps": every, "checkpoint_steps": every}
    backbone = BACKBONE
    if tiny_backbone is not None:
        backbone = TINY
        tiny_train = {k: TINY_PARAMS["train"][k] for k in ("precision", "max_seq_len")}
        params["train"].update(tiny_train)
        params["backbone_overrides"] = {TINY: {"source": str(tiny_backbone)}}
    params["sweep"] = {"backbones": [backbone], "losses": [LOSS], "seeds": [SEED]}
    # the ablation's loss and seed must be in the sweep (validated on load); it never runs here
    params["ablation"] = {**params["ablation"], "loss": LOSS, "backbone": "", "seed": SEED}
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def stage_env(project: Path, mirror: str, uri: str, threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("DVC_ROOT", "DVC_STAGE", "DVC_EXP_NAME", "FOCALCSE_PARAMS", "FOCALCSE_TRACKING"):
        env.pop(key, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(project / "src")  # the copy's code, ahead of the editable install
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "DVC_NO_ANALYTICS": "1",
            "FOCALCSE_DATA_MIRROR": mirror,
            "MLFLOW_TRACKING_URI": uri,
            "PYTHONUNBUFFERED": "1",
        }
    )
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_checked(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


# ---------------------------------------------------------------- the MLflow server
class Server(MlflowServer):
    """The shared local server (:mod:`focalcse.testing.mlflow_server`) over a store in ``folder`` with its
    artifacts beside it; a server that does not come up ends the measurement with one line."""

    def __init__(self, folder: Path, port: int) -> None:
        super().__init__(folder, port, artifacts_destination=(folder / "artifacts").as_uri())

    def start(self, timeout: float = 120) -> float:
        try:
            return super().start(timeout)
        except ServerError as err:
            fail(str(err))
            return 0.0  # unreachable


# ---------------------------------------------------------------- one train run
class Item:
    """The train item's files in the copy, and runs of its stage."""

    def __init__(self, project: Path, env: dict[str, str], timeout: float, backbone: str) -> None:
        self.project, self.env, self.timeout = project, env, timeout
        framework = default_framework()
        self.name = run_name(backbone, LOSS, SEED, framework)
        self.stage = stage_name("train", backbone, LOSS, SEED, framework)
        self.cmd = ["stages/train.py", framework, backbone, LOSS, str(SEED)]
        item = Layout.at(project).train_item(backbone, LOSS, SEED, framework)
        self.model_dir = item.model_dir
        self.work = self.model_dir.parent / f".{self.model_dir.name}.work"
        self.metrics_file = item.metrics_file
        self.queue = project / ".focalcse" / "tracking-queue"
        self.logs = project.parent / "logs"
        self.logs.mkdir(exist_ok=True)
        self.n = 0
        self.proc: subprocess.Popen | None = None

    def clean(self) -> None:
        """Remove the model folder, its metrics / curve files (and companions) and the work folder."""
        shutil.rmtree(self.model_dir, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)
        for folder in (self.project / "metrics" / "train", *(self.project / "metrics" / "curves").glob("*")):
            for f in folder.glob(f"{self.name}*.json") if folder.is_dir() else ():
                f.unlink()
        for old in self.model_dir.parent.glob(f".{self.model_dir.name}.*"):  # .seed1.old etc.
            shutil.rmtree(old, ignore_errors=True)

    def start(self, label: str) -> tuple[subprocess.Popen, Path, Path, float]:
        self.n += 1
        out = self.logs / f"{self.n}-{label}.out"
        err = self.logs / f"{self.n}-{label}.err"
        with open(out, "w") as fo, open(err, "w") as fe:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(
                [sys.executable, *self.cmd],
                cwd=self.project,
                env=self.env,
                stdout=fo,
                stderr=fe,
                start_new_session=True,  # its own group: a SIGKILL reaches every child
            )
        return self.proc, out, err, t0

    def wait(self, proc: subprocess.Popen, t0: float) -> float:
        try:
            proc.wait(timeout=max(1.0, self.timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            fail(f"{' '.join(self.cmd)} ran past {self.timeout:.0f} s")
        return time.perf_counter() - t0

    def run(self, label: str) -> dict[str, Any]:
        """Run the stage to the end; wall seconds, output, the metrics the stage wrote."""
        proc, out, err, t0 = self.start(label)
        wall = self.wait(proc, t0)
        res = self.result(proc, out, err, wall)
        if proc.returncode != 0:
            fail(f"{label}: the train stage exited {proc.returncode}:\n{res['stderr'][-3000:]}")
        return res

    def result(self, proc: subprocess.Popen, out: Path, err: Path, wall: float) -> dict[str, Any]:
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        metrics = json.loads(self.metrics_file.read_text()) if self.metrics_file.is_file() else {}
        return {
            "returncode": proc.returncode,
            "wall_seconds": round(wall, 2),
            "train_seconds": metrics.get("train_seconds"),
            "stage_wall_seconds": metrics.get("wall_seconds"),
            "steps": metrics.get("steps"),
            "best_step": metrics.get("best_step"),
            "stsb_dev_best": metrics.get("stsb_dev_best"),
            "model_digest": folder_fingerprint(self.model_dir) if self.model_dir.is_dir() else None,
            "run_id": run_id_of(stdout),
            "stdout": stdout,
            "stderr": stderr,
        }

    def journaled_step(self, pid: int) -> int:
        """The highest step whose ``loss`` stage process ``pid`` has written to its local queue
        (the queue file whose header names ``pid``)."""
        best = 0
        for path in self.queue.glob("*.jsonl") if self.queue.is_dir() else ():
            lines: list[str] = []
            with contextlib.suppress(OSError):
                lines = path.read_text(errors="replace").splitlines()
            records = []
            for line in lines:
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
            if (
                not records or records[0].get("t") != "run" or str(records[0].get("pid")) != str(pid)
            ):  # the header writes it as a string
                continue
            for r in records[1:]:
                if r.get("t") == "m" and r.get("k") == "loss":
                    best = max(best, int(r["s"]))
        return best

    def sync(self) -> subprocess.CompletedProcess:
        """``focalcse tracking sync`` in the copy: the queued metrics of every stage sent."""
        cmd = [sys.executable, "-m", "focalcse.cli", "tracking", "sync"]
        return subprocess.run(
            cmd, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=600
        )

    def checkpoint_step(self, name: str) -> int | None:
        """The step of ``work/<name>`` per its manifest (written last, so the checkpoint is whole)."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return int(json.loads((self.work / name / "manifest.json").read_text())["step"])
        return None


def run_id_of(stdout: str) -> str | None:
    m = re.search(r"^MLflow run (\w+) (?:in experiment|resumed)", stdout, re.M)
    return m.group(1) if m else None


def mlflow_lines(*texts: str) -> list[str]:
    """Lines naming MLflow (tqdm's carriage-return redraws split into their own pieces)."""
    out = []
    for text in texts:
        for line in re.split(r"[\r\n]+", text):
            if "mlflow" in line.lower() and line.strip():
                out.append(line.strip())
    return out


# ---------------------------------------------------------------- MLflow queries
def item_runs(uri: str, experiment: str, stage: str) -> list[dict[str, Any]]:
    """Every run of the item (tag ``dvc_stage``), oldest first, with its per-step metric steps."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.dvc_stage = '{stage}'",
        order_by=["attributes.start_time ASC"],
    )
    out = []
    for r in runs:
        steps = {
            k: sorted(int(m.step) for m in client.get_metric_history(r.info.run_id, k)) for k in STEP_KEYS
        }
        out.append(
            {
                "run_id": r.info.run_id,
                "status": r.info.status,
                "steps": steps,
                "model_sha256": r.data.tags.get("model_sha256"),
                "artifacts": sorted(a.path for a in client.list_artifacts(r.info.run_id)),
            }
        )
    return out


def steps_ok(run: dict[str, Any] | None, n: int) -> bool:
    return run is not None and all(run["steps"][k] == list(range(1, n + 1)) for k in STEP_KEYS)


def step_summary(steps: list[int], n: int) -> str:
    """``1..48 once`` or what is wrong (missing / doubled steps)."""
    want = set(range(1, n + 1))
    missing = sorted(want - set(steps))
    doubled = sorted({s for s in steps if steps.count(s) > 1})
    extra = sorted(set(steps) - want)
    if not (missing or doubled or extra):
        return f"1..{n} once"
    parts = [f"{len(steps)} points"]
    if missing:
        parts.append(f"missing {missing[:10]}{'...' if len(missing) > 10 else ''}")
    if doubled:
        parts.append(f"doubled {doubled[:10]}")
    if extra:
        parts.append(f"unexpected {extra[:10]}")
    return ", ".join(parts)


def by_id(runs: list[dict[str, Any]], run_id: str | None) -> dict[str, Any] | None:
    return next((r for r in runs if r["run_id"] == run_id), None)


# ---------------------------------------------------------------- the scenarios
def server_down(
    item: Item, server: Server, experiment: str, steps: int, kill_after: float | None
) -> dict[str, Any]:
    print("## server down: (a) baseline", flush=True)
    item.clean()
    base = item.run("baseline")
    runs = item_runs(server.uri, experiment, item.stage)
    base_run = by_id(runs, base["run_id"])
    base["mlflow_loss_steps"] = len(base_run["steps"]["loss"]) if base_run else None
    base["mlflow_status"] = base_run["status"] if base_run else None
    print(f"   wall {base['wall_seconds']} s, MLflow loss steps {base['mlflow_loss_steps']}", flush=True)

    print("## server down: (b) server SIGKILLed mid-training", flush=True)
    item.clean()
    planned = kill_after if kill_after is not None else 0.3 * base["wall_seconds"]
    proc, out, err, t0 = item.start("server-down")
    while time.perf_counter() - t0 < planned and proc.poll() is None:
        time.sleep(0.05)
    waited_for_step = False
    while item.journaled_step(proc.pid) < 1 and proc.poll() is None:  # not before the run exists and trains
        waited_for_step = True
        time.sleep(0.05)
    if proc.poll() is not None:
        fail(f"the stage ended ({proc.returncode}) before the server was killed; lower --kill-after")
    killed_at = time.perf_counter() - t0
    killed_step = item.journaled_step(proc.pid)
    server.kill()
    print(f"   server killed at {killed_at:.1f} s (step {killed_step} journaled)", flush=True)
    wall = item.wait(proc, t0)
    down = item.result(proc, out, err, wall)
    if proc.returncode != 0:
        fail(f"the stage failed with the server down ({proc.returncode}):\n{down['stderr'][-3000:]}")
    queued = sorted(p.name for p in item.queue.glob("*.jsonl"))

    restart_s = server.start()
    before = by_id(item_runs(server.uri, experiment, item.stage), down["run_id"])  # what arrived live
    sync = item.sync()
    sync_lines = [ln for ln in sync.stdout.splitlines() if ln.startswith("tracking sync:")]
    runs = item_runs(server.uri, experiment, item.stage)
    after = by_id(runs, down["run_id"])
    ratio = down["wall_seconds"] / base["wall_seconds"]
    train_ratio = (
        down["train_seconds"] / base["train_seconds"]
        if down["train_seconds"] and base["train_seconds"]
        else None
    )
    return {
        "baseline": _public(base),
        "down": {
            **_public(down),
            "kill_after_planned_s": round(planned, 2),
            "killed_at_s": round(killed_at, 2),
            "killed_at_step": killed_step,
            "waited_for_first_step": waited_for_step,
            "mlflow_lines": mlflow_lines(down["stdout"], down["stderr"]),
            "queue_files_after_stage": queued,
            "server_restart_s": round(restart_s, 2),
            "live_steps_before_sync": {k: len(before["steps"][k]) for k in STEP_KEYS} if before else None,
            "sync_returncode": sync.returncode,
            "sync_summary": sync_lines[-1] if sync_lines else (sync.stdout + sync.stderr)[-500:],
            "queue_files_after_sync": sorted(p.name for p in item.queue.glob("*.jsonl")),
            "run_after_sync": after,
            "steps_after_sync": {k: step_summary(after["steps"][k], steps) for k in STEP_KEYS}
            if after
            else None,
        },
        "runs_of_item": [{k: r[k] for k in ("run_id", "status")} for r in runs],
        "runs_of_item_b": sum(r["run_id"] == down["run_id"] for r in runs),
        "wall_ratio": round(ratio, 3),
        # "finishes within 10% of its normal wall time": no more than 10% slower (it is usually faster:
        # the model upload at the end waits for the sync)
        "within_10pct": ratio <= 1.10,
        "train_seconds_ratio": round(train_ratio, 3) if train_ratio else None,
        "steps_ok": steps_ok(after, steps),
        "run_finished": bool(after and after["status"] == "FINISHED"),
        "digest_equal": down["model_digest"] == base["model_digest"] and base["model_digest"] is not None,
    }


def corrupt_checkpoint(
    item: Item, server: Server, experiment: str, steps: int, every: int, base_digest: str | None
) -> dict[str, Any]:
    print(f"## corrupt checkpoint: kill at the step-{2 * every} checkpoint, truncate it, rerun", flush=True)
    item.clean()
    for path in item.queue.glob("*.jsonl"):  # nothing of the earlier scenario may reach this run
        path.unlink()
    proc, out, err, t0 = item.start("kill-at-checkpoint")
    target = 2 * every
    while proc.poll() is None:
        if item.checkpoint_step("last") == target and item.checkpoint_step("previous") == every:
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        fail(f"the stage ended ({proc.returncode}) before its step-{target} checkpoint")
    kill_group(proc)
    killed_at = time.perf_counter() - t0
    last, previous = item.checkpoint_step("last"), item.checkpoint_step("previous")
    killed_run = run_id_of(out.read_text(errors="replace"))
    model = item.work / "last" / "model.safetensors"
    size = model.stat().st_size
    os.truncate(model, size // 2)
    print(
        f"   killed at {killed_at:.1f} s: last = step {last}, previous = step {previous}; "
        f"model.safetensors {size} -> {size // 2} bytes",
        flush=True,
    )

    rerun = item.run("after-corruption")
    text = rerun["stdout"] + "\n" + rerun["stderr"]
    pieces = [p.strip() for p in re.split(r"[\r\n]+", text) if p.strip()]
    moved = [p for p in pieces if "moved aside" in p]
    resumed = [p for p in pieces if p.startswith("resuming ")]
    m = re.search(r"from step (\d+)", resumed[0]) if resumed else None
    runs = item_runs(server.uri, experiment, item.stage)
    run = by_id(runs, rerun["run_id"])
    return {
        "killed_at_s": round(killed_at, 2),
        "last_step_at_kill": last,
        "previous_step_at_kill": previous,
        "model_safetensors_bytes": size,
        "truncated_to_bytes": size // 2,
        "rerun": _public(rerun),
        "messages": moved,
        "message_count": len(moved),
        "resume_line": resumed[0] if resumed else None,
        "fell_back_to_step": int(m.group(1)) if m else None,
        "same_mlflow_run": killed_run is not None and killed_run == rerun["run_id"],
        "mlflow_resumed_line": next((ln for ln in mlflow_lines(rerun["stdout"]) if "resumed" in ln), None),
        "run": run,
        "steps": {k: step_summary(run["steps"][k], steps) for k in STEP_KEYS} if run else None,
        "steps_ok": steps_ok(run, steps),
        "runs_of_item": [{k: r[k] for k in ("run_id", "status")} for r in runs],
        "digest_equal": rerun["model_digest"] == base_digest and base_digest is not None,
        "work_folder_left": item.work.exists(),
    }


def kill_before_checkpoint(
    item: Item, server: Server, experiment: str, steps: int, every: int, base_digest: str | None
) -> dict[str, Any]:
    """kill -9 before the first checkpoint (step ``every``), rerun the item, ``focalcse tracking sync``:
    the dead attempt's run ends KILLED (its queued steps sent), the rerun is one FINISHED run."""
    print(f"## kill -9 before the first checkpoint (step {every})", flush=True)
    item.clean()
    for path in item.queue.glob("*.jsonl"):
        path.unlink()
    proc, out, err, t0 = item.start("kill-before-checkpoint")
    target = max(1, every // 2)
    while proc.poll() is None and item.journaled_step(proc.pid) < target:
        time.sleep(0.02)
    if proc.poll() is not None:
        fail(f"the stage ended ({proc.returncode}) before step {target}")
    killed_step = item.journaled_step(proc.pid)
    kill_group(proc)
    killed_at = time.perf_counter() - t0
    dead_run = run_id_of(out.read_text(errors="replace"))
    checkpoint_at_kill = item.checkpoint_step("last")
    print(
        f"   killed at {killed_at:.1f} s, step {killed_step} journaled, checkpoint {checkpoint_at_kill}",
        flush=True,
    )
    rerun = item.run("after-early-kill")
    sync = item.sync()
    runs = item_runs(server.uri, experiment, item.stage)
    dead, new = by_id(runs, dead_run), by_id(runs, rerun["run_id"])
    mine = [r for r in runs if r["run_id"] in (dead_run, rerun["run_id"])]
    return {
        "killed_at_s": round(killed_at, 2),
        "killed_at_step": killed_step,
        "checkpoint_at_kill": checkpoint_at_kill,
        "dead_run": dead_run,
        "dead_run_status": dead["status"] if dead else None,
        "dead_run_loss_steps": len(dead["steps"]["loss"]) if dead else None,
        "rerun": _public(rerun),
        "new_run_differs": rerun["run_id"] is not None and rerun["run_id"] != dead_run,
        "new_run_status": new["status"] if new else None,
        "new_run_steps": {k: step_summary(new["steps"][k], steps) for k in STEP_KEYS} if new else None,
        "new_run_steps_ok": steps_ok(new, steps),
        "statuses": sorted(r["status"] for r in mine),
        "sync_summary": next(
            (ln for ln in sync.stdout.splitlines() if ln.startswith("tracking sync:")), sync.stderr[-300:]
        ),
        "digest_equal": rerun["model_digest"] == base_digest and base_digest is not None,
    }


def _public(res: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in res.items() if k not in ("stdout", "stderr")}


# ---------------------------------------------------------------- the report
def markdown(r: dict[str, Any]) -> str:
    sd, cc, kb = r["server_down"], r["corrupt_checkpoint"], r["kill_before_checkpoint"]
    a, b = sd["baseline"], sd["down"]
    yes = {True: "yes", False: "**no**"}
    lines = [
        f"# Fault measurements: {r['item']}, {r['steps']} steps of {BATCH}, eval/checkpoint every {r['every']}",
        "",
        f"CPU: {r['cpu_model']}; repo commit {r['git']['commit']}"
        + (
            f" ({len(r['git']['dirty_files'])} changed files in the working tree)"
            if r["git"]["dirty_files"]
            else ""
        ),
        f"threads: {r['threads'] or 'inherited'}; precision {r['precision']}; MLflow server {r['server_uri']}",
        "",
        "## Server down mid-item",
        "",
        "| | wall s | in-stage s | train s | loss steps in MLflow | model digest |",
        "|---|---:|---:|---:|---:|---|",
        f"| (a) baseline | {a['wall_seconds']} | {_f(a['stage_wall_seconds'])} | {_f(a['train_seconds'])} | "
        f"{a['mlflow_loss_steps']} | `{(a['model_digest'] or '-')[:16]}` |",
        f"| (b) server killed at {b['killed_at_s']} s (step {b['killed_at_step']}) | {b['wall_seconds']} | "
        f"{_f(b['stage_wall_seconds'])} | {_f(b['train_seconds'])} | "
        f"{len(b['run_after_sync']['steps']['loss']) if b['run_after_sync'] else '-'} after sync | "
        f"`{(b['model_digest'] or '-')[:16]}` |",
        "",
        f"- wall ratio (b)/(a): {sd['wall_ratio']} (at most 10% slower: {yes[sd['within_10pct']]}); "
        f"train-seconds ratio: {sd['train_seconds_ratio']}",
        "- stage lines naming MLflow: " + "; ".join(f"`{ln}`" for ln in b["mlflow_lines"]),
        f"- live before sync: {b['live_steps_before_sync']}; sync: `{b['sync_summary']}` (exit {b['sync_returncode']})",
        f"- after sync: {b['steps_after_sync']}; every step once: {yes[sd['steps_ok']]}; "
        f"run status {b['run_after_sync']['status'] if b['run_after_sync'] else '-'}",
        f"- runs of the item in MLflow: {len(sd['runs_of_item'])} "
        f"({', '.join(x['status'] for x in sd['runs_of_item'])}; the baseline's and (b)'s); (b) has {sd['runs_of_item_b']} run",
        f"- model digest equal to (a): {yes[sd['digest_equal']]}",
        "",
        "## Corrupt newest checkpoint",
        "",
        f"- killed at {cc['killed_at_s']} s with last = step {cc['last_step_at_kill']}, previous = step "
        f"{cc['previous_step_at_kill']}; last/model.safetensors cut from {cc['model_safetensors_bytes']} to "
        f"{cc['truncated_to_bytes']} bytes",
        f"- message ({cc['message_count']}): " + "; ".join(f"`{m}`" for m in cc["messages"]),
        f"- resumed: `{cc['resume_line']}` -> fell back to step {cc['fell_back_to_step']}",
        f"- rerun wall {cc['rerun']['wall_seconds']} s; same MLflow run: {yes[cc['same_mlflow_run']]}; "
        f"steps {cc['steps']}; every step once: {yes[cc['steps_ok']]}",
        f"- final model digest equal to (a): {yes[cc['digest_equal']]}",
        "",
        "## kill -9 before the first checkpoint",
        "",
        f"- killed at {kb['killed_at_s']} s at step {kb['killed_at_step']} (checkpoint at kill: "
        f"{kb['checkpoint_at_kill']}); the dead attempt's run `{kb['dead_run']}`: {kb['dead_run_status']}, "
        f"{kb['dead_run_loss_steps']} loss steps",
        f"- rerun wall {kb['rerun']['wall_seconds']} s, a new run: {yes[kb['new_run_differs']]}, "
        f"{kb['new_run_status']}, steps {kb['new_run_steps']}; `{kb['sync_summary']}`",
        f"- the item's runs: {', '.join(kb['statuses'])}; final model digest equal to (a): {yes[kb['digest_equal']]}",
        "",
        f"Checks: {'all passed' if r['ok'] else 'FAILED: ' + ', '.join(r['failed'])}",
    ]
    return "\n".join(lines)


def _f(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) else "-"


def checks_of(sd: dict[str, Any], cc: dict[str, Any], kb: dict[str, Any], every: int) -> dict[str, bool]:
    """What must hold (the wall-time ratio is reported, not checked: it depends on the machine)."""
    down, after = sd["down"], sd["down"]["run_after_sync"] or {}
    return {
        "server_down.steps_ok": sd["steps_ok"],
        "server_down.run_finished": sd["run_finished"],
        "server_down.one_run": sd["runs_of_item_b"] == 1,
        "server_down.one_unreachable_notice": sum("MLflow unreachable" in ln for ln in down["mlflow_lines"])
        == 1,
        "server_down.sync_ok": down["sync_returncode"] == 0 and not down["queue_files_after_sync"],
        "server_down.model_tag": after.get("model_sha256") == down["model_digest"],
        "server_down.model_logged": "model" in after.get("artifacts", []),
        "server_down.digest_equal": sd["digest_equal"],
        "corrupt.checkpoints_at_kill": (cc["last_step_at_kill"], cc["previous_step_at_kill"])
        == (2 * every, every),
        "corrupt.message": cc["message_count"] == 1,
        "corrupt.fell_back_to_every": cc["fell_back_to_step"] == every,
        "corrupt.same_run": cc["same_mlflow_run"],
        "corrupt.steps_ok": cc["steps_ok"],
        "corrupt.digest_equal": cc["digest_equal"],
        "early_kill.before_checkpoint": kb["checkpoint_at_kill"] is None,
        "early_kill.dead_run_killed": kb["dead_run_status"] == "KILLED",
        "early_kill.one_finished_one_killed": kb["statuses"] == ["FINISHED", "KILLED"],
        "early_kill.new_run_steps_ok": kb["new_run_steps_ok"],
        "early_kill.digest_equal": kb["digest_equal"],
    }


def faults(args: argparse.Namespace) -> int:
    """The three fault scenarios on one train item (the module docstring); 0 when every check holds."""
    mirror = os.environ.get("FOCALCSE_DATA_MIRROR", "").strip()
    if not mirror:
        fail("FOCALCSE_DATA_MIRROR is not set (the data mirror folder, e.g. ../shared/data)")
    if not Path(mirror).is_dir():
        fail(f"FOCALCSE_DATA_MIRROR={mirror}: no such folder")
    mirror = str(Path(mirror).resolve())
    if args.every < 1 or args.steps <= 2 * args.every:
        fail(
            f"--steps ({args.steps}) must exceed 2 x --every ({args.every}): the corrupt scenario kills at step 2K"
        )

    if args.keep is not None:
        root = args.keep.resolve()
        if root.exists() and any(root.iterdir()):
            fail(f"--keep {root}: the folder is not empty")
        root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="probe-faults-"))
    project = root / "repo"
    server = Server(root / "mlflow", free_port())
    item: Item | None = None
    try:
        params = make_project(project, args.steps, args.every, mirror, args.tiny_backbone)
        experiment = params["tracking"]["experiment"]
        env = stage_env(project, mirror, server.uri, args.threads)
        print(f"project copy in {project}", flush=True)
        for stage in ("check", "sample", "prepare_sts"):
            print(
                f"   {run_checked([sys.executable, f'stages/{stage}.py'], project, env, args.timeout).strip()[-200:]}"
            )
        startup = server.start()
        print(f"mlflow server at {server.uri} (up in {startup:.1f} s)", flush=True)
        item = Item(project, env, args.timeout, params["sweep"]["backbones"][0])
        sd = server_down(item, server, experiment, args.steps, args.kill_after)
        cc = corrupt_checkpoint(
            item, server, experiment, args.steps, args.every, sd["baseline"]["model_digest"]
        )
        kb = kill_before_checkpoint(
            item, server, experiment, args.steps, args.every, sd["baseline"]["model_digest"]
        )
    finally:
        if item is not None:
            kill_group(item.proc)
        server.kill()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    checks = checks_of(sd, cc, kb, args.every)
    report = {
        "item": item.name,
        "steps": args.steps,
        "every": args.every,
        "num_sentences": BATCH * args.steps,
        "threads": args.threads,
        "precision": params["train"].get("precision"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "git": repo_commit(),
        "server_uri": server.uri,
        "work_folder": str(root) if args.keep is not None else None,
        "server_down": sd,
        "corrupt_checkpoint": cc,
        "kill_before_checkpoint": kb,
        "checks": checks,
        "failed": [k for k, v in checks.items() if not v],
    }
    report["ok"] = not report["failed"]
    print()
    print(markdown(report))
    if args.out_json is not None:
        args.out_json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nfigures written to {args.out_json}")
    return 0 if report["ok"] else 1


# ---------------------------------------------------------------- inputs: bad inputs against dvc repro
WATCHED = ("models", "metrics", "data", "reports")


def snapshot(root: Path, env: dict[str, str]) -> dict[str, Any]:
    """git status, dvc status and the md5 of every watched file."""
    files = {}
    for top in WATCHED:
        for path in sorted((root / top).rglob("*")) if (root / top).is_dir() else ():
            if path.is_file():
                files[path.relative_to(root).as_posix()] = hashlib.md5(path.read_bytes()).hexdigest()
    git = subprocess.run(["git", "status", "--porcelain"], cwd=root, env=env, capture_output=True, text=True)
    dvc = subprocess.run(["dvc", "status"], cwd=root, env=env, capture_output=True, text=True)
    return {"git": git.stdout, "dvc": dvc.stdout, "files": files}


def edit_params(root: Path, edit: Callable[[dict], None]) -> None:
    path = root / "params.yaml"
    params = yaml.safe_load(path.read_text())
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def repro(root: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
    return proc, time.perf_counter() - t0


def summarize(name: str, proc: subprocess.CompletedProcess, wall: float, same: bool) -> dict[str, Any]:
    out = proc.stdout + proc.stderr
    return {
        "probe": name,
        "returncode": proc.returncode,
        "wall_seconds": round(wall, 1),
        # the stage's own one-line errors, and DVC's wrapper lines (``ERROR: failed to reproduce ...``)
        "errors": [line for line in out.splitlines() if line.startswith("error:")],
        "dvc_errors": [line for line in out.splitlines() if line.startswith("ERROR:")],
        "traceback": "Traceback" in out,
        "stages_run": re.findall(r"Running stage '([^']+)'", out),
        "unchanged": same,
    }


def inputs(args: argparse.Namespace) -> int:
    """The bad-input probes in the current directory (the module docstring); 0 when every check holds."""
    root = Path.cwd()
    mirror = Path(os.environ.get("FOCALCSE_DATA_MIRROR", "")).resolve()
    if not (mirror / "senteval").is_dir():
        fail(f"FOCALCSE_DATA_MIRROR={mirror}: expected the data mirror folder")
    if not (root / "dvc.yaml").is_file():
        fail(f"{root}: no dvc.yaml; run the inputs probe in a checkout whose pipeline has run")
    # this interpreter's tools (dvc, the stages' python) first
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    original = (root / "params.yaml").read_text()
    tmp = Path(tempfile.mkdtemp(prefix="probes-"))
    offline = {k: v for k, v in env.items() if k != "FOCALCSE_DATA_MIRROR"}
    offline.update(  # an empty download cache, and a proxy that refuses at once if a network is there
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HTTPS_PROXY="http://127.0.0.1:9",
        FOCALCSE_CACHE=str(tmp / "cache"),
    )

    def train(**keys: Any) -> Callable[[], None]:
        return lambda: edit_params(root, lambda d: d["train"].update(keys))

    probes: list[tuple[str, Callable[[], None], dict[str, str]]] = [
        ("batch_size -1", train(batch_size=-1), env),
        ("typo key", train(learning_rat=1e-5), env),
        ("max_steps 1000", train(max_steps=1000), env),
        (
            "malformed STS line",
            lambda: None,
            {**env, "FOCALCSE_DATA_MIRROR": str(bad_mirror(tmp, mirror, "sts-score"))},
        ),
        (
            "empty corpus",
            lambda: None,
            {**env, "FOCALCSE_DATA_MIRROR": str(bad_mirror(tmp, mirror, "corpus"))},
        ),
        ("offline, no mirror", lambda: edit_params(root, lambda d: d["data"].update(mirror="")), offline),
    ]
    results = []
    ok = True
    try:
        before = snapshot(root, env)
        for name, change, penv in probes:
            change()
            proc, wall = repro(root, penv)
            (root / "params.yaml").write_text(original)
            after = snapshot(root, env)
            r = summarize(name, proc, wall, after == before)
            results.append(r)
            ok &= r["unchanged"] and r["returncode"] != 0 and len(r["errors"]) == 1 and not r["traceback"]
            ok &= r["stages_run"] == ["check"]
            print(json.dumps(r), flush=True)
        # two at once: the first reruns check + report (a report param), the second must be refused
        edit_params(root, lambda d: d["report"].update(figure1_ms=[*d["report"]["figure1_ms"], 0.7]))
        t0 = time.perf_counter()
        first = subprocess.Popen(
            ["dvc", "repro"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        time.sleep(3)
        second, wall2 = repro(root, env)
        out1, _ = first.communicate()
        wall1 = time.perf_counter() - t0
        (root / "params.yaml").write_text(original)
        restore, _ = repro(root, env)  # back to the committed report
        after = snapshot(root, env)
        r = summarize("two dvc repro at once (the second)", second, wall2, after == before)
        r["first_returncode"] = first.returncode
        r["first_wall_seconds"] = round(wall1, 1)
        r["first_stages_run"] = re.findall(r"Running stage '([^']+)'", out1)
        r["restore_returncode"] = restore.returncode
        results.append(r)
        ok &= second.returncode != 0 and first.returncode == 0 and r["unchanged"]
        print(json.dumps(r), flush=True)
    finally:
        (root / "params.yaml").write_text(original)
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| probe | exit | wall (s) | error line | traceback | stages run | outputs unchanged |")
    print("|---|---:|---:|---|---|---|---|")
    for r in results:
        err = ([*r["errors"], *r["dvc_errors"], "-"][0]).replace("|", "\\|")[:160]
        print(
            f"| {r['probe']} | {r['returncode']} | {r['wall_seconds']} | {err} | {r['traceback']} | "
            f"{', '.join(r['stages_run']) or '-'} | {r['unchanged']} |"
        )
    if args.out_json:
        args.out_json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


# ---------------------------------------------------------------- determinism
def _lock_outs(lock_text: str, item: str) -> list[dict[str, Any]]:
    stage = (yaml.safe_load(lock_text) or {}).get("stages", {}).get(item)
    return list(stage.get("outs") or []) if stage else []


def _model_md5(outs: list[dict[str, Any]]) -> str | None:
    return next((o["md5"] for o in outs if o["path"].startswith("models/")), None)


def _committed_lock(root: Path) -> str | None:
    """The git HEAD version of ``root``'s dvc.lock (None outside git or when not committed)."""
    proc = subprocess.run(["git", "show", "HEAD:./dvc.lock"], cwd=root, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def first_train_item(root: Path) -> str:
    """The sweep's first train item of ``root``'s params.yaml (its first framework, backbone, loss, seed)."""
    sweep = yaml.safe_load((root / "params.yaml").read_text())["sweep"]
    framework = (sweep.get("frameworks") or [default_framework()])[0]
    return stage_name("train", sweep["backbones"][0], sweep["losses"][0], sweep["seeds"][0], framework)


def determinism(args: argparse.Namespace) -> int:
    """Train one item ``--runs`` times from scratch; 0 when every run gives the same model folder."""
    from focalcse.provenance import cpu_info, git_commit

    root = Path.cwd()
    if not (root / "dvc.yaml").is_file() or not (root / "dvc.lock").is_file():
        fail(f"{root}: no dvc.yaml / dvc.lock; run the determinism probe where the pipeline has run")
    if args.runs < 2:
        fail(f"--runs {args.runs}: expected at least 2 (one run cannot disagree with itself)")
    item = args.item or first_train_item(root)
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    committed = _committed_lock(root)
    committed_md5 = _model_md5(_lock_outs(committed, item)) if committed else None
    cmd = ["dvc", "repro", "--force", "-s", item]
    runs = []
    for n in range(1, args.runs + 1):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            fail(
                f"run {n}: `{' '.join(cmd)}` exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}"
            )
        outs = _lock_outs((root / "dvc.lock").read_text(), item)
        metrics = next(
            o["path"] for o in outs if o["path"].startswith("metrics/train/") and ".meta." not in o["path"]
        )
        train = json.loads((root / metrics).read_text())
        final_loss = train["final_loss"]
        # the item's own timing: its steps only (no dev evaluation), as the train metrics record it
        timing = {
            k: train[k]
            for k in ("train_seconds", "sentences_per_second", "step_seconds_median")
            if k in train
        }
        runs.append(
            {
                "run": n,
                "wall_s": round(wall),
                "model_md5": _model_md5(outs),
                "final_loss": final_loss,
                **timing,
            }
        )
        print(
            f"run {n}/{args.runs}: {runs[-1]['model_md5']}  final loss {final_loss!r}  {wall:.0f} s",
            flush=True,
        )
    cpu = cpu_info()
    commit = git_commit(root)
    md5s = {r["model_md5"] for r in runs}
    same = len(md5s) == 1
    matches = committed_md5 is None or md5s == {committed_md5}
    record = {
        "item": item,
        "command": " ".join(cmd),
        "commit": commit[:7] + ("-dirty" if commit.endswith("-dirty") else ""),
        "cpu": cpu["cpu_model"],
        "cpu_model": cpu["cpu_model"],
        "matmul_flags": cpu["cpu_flags"],
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "setup": args.setup,
        "model_md5": "DVC's .dir md5 of the item's model folder from dvc.lock after each run",
        "committed_md5": committed_md5,
        "runs": runs,
        "ok": same and matches,
    }
    print(
        f"{item}: {args.runs} runs, {len(md5s)} distinct model md5(s)"
        + (f"; committed {committed_md5}: {'the same' if matches else 'DIFFERENT'}" if committed_md5 else "")
    )
    if args.out_json:
        args.out_json.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if record["ok"] else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="probe", required=True)
    f = sub.add_parser("faults", help="three fault scenarios on one train item, in a copy of the tree")
    f.add_argument("--steps", type=int, default=48, help="training steps (64 sentences each); default 48")
    f.add_argument("--every", type=int, default=16, help="eval_steps = checkpoint_steps; default 16")
    f.add_argument(
        "--kill-after", type=float, default=None, help="seconds; default 30%% of the baseline wall"
    )
    f.add_argument(
        "--keep", type=Path, default=None, help="work folder, kept (default: a temp folder, removed)"
    )
    f.add_argument(
        "--threads", type=int, default=None, help="OMP/MKL threads of the stages (default inherited)"
    )
    f.add_argument("--timeout", type=float, default=3600, help="seconds per stage run (default 3600)")
    f.add_argument(
        "--tiny-backbone",
        type=Path,
        default=None,
        help="train this HF folder as backbone 'tiny' (a quick check)",
    )
    i = sub.add_parser("inputs", help="bad inputs against dvc repro of the checkout in the current directory")
    d = sub.add_parser("determinism", help="one train item trained --runs times from scratch, md5 by md5")
    d.add_argument("--runs", type=int, default=5, help="how many times (default 5)")
    d.add_argument("--item", default=None, help="the train item (default: the sweep's first)")
    d.add_argument("--setup", default="", help="how the checkout was prepared (recorded with the runs)")
    for p in (f, i, d):
        p.add_argument("--out-json", type=Path, default=None, help="write every figure here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return {"faults": faults, "inputs": inputs, "determinism": determinism}[args.probe](args)


if __name__ == "__main__":
    sys.exit(main())
