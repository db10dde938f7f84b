"""Train runs: one MLflow run per train matrix item, its per-step metrics sent in the background."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.errors import TrackingUnavailableError
from focalcse.layout import Layout, run_name, stage_name
from focalcse.ops.tracking.inputs import input_datasets
from focalcse.ops.tracking.models import SENTENCE_TRANSFORMERS, model_flavour
from focalcse.ops.tracking.process import (
    _identity_of,
    _kill_if_gone,
    identity_tags,
    process_gone,
    process_identity,
)
from focalcse.ops.tracking.queue import (
    CLOSE_TIMEOUT_S,
    RUN_FILE,
    _apply,
    _existing_steps,
    _Journal,
    _metric,
    _sync_file,
    queue_dir,
    read_queue,
    split_queue,
    sync_records,
)
from focalcse.ops.tracking.store import (
    _BATCH,
    FLUSH_SECONDS,
    _base_tags,
    check_tracking_uri,
    client_and_experiment,
    enabled,
    experiment_name,
    flatten,
    folder_fingerprint,
    redact,
    tracking_uri,
)


# ---------------------------------------------------------------- train runs
class TrainRun:
    """An open MLflow run for one train matrix item; ``log_metrics`` is the training callback.

    Metrics never wait on the network: each call appends them to the run's queue file (local, one
    JSON line each) and hands them to a background thread that sends batches every few seconds (at
    once after a dev evaluation) with short HTTP timeouts. Whatever MLflow has not confirmed when the
    stage ends stays in the queue file, sent by the next ``finish`` of the item or
    ``focalcse tracking sync``.
    """

    def __init__(
        self,
        client: Any,
        run_id: str,
        uri: str = "",
        queue: str | os.PathLike | None = None,
        skip: set[tuple[str, int]] | None = None,
        close_timeout: float = CLOSE_TIMEOUT_S,
        create: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self.close_timeout = close_timeout
        folder = Path(queue) if queue is not None else queue_dir()
        # the process writing the run (host, pid, start time): judged dead only from its own host
        self._header = {"t": "run", "run_id": run_id, "uri": redact(uri), **process_identity()}
        if create is not None:  # no store reached yet: `sync` creates the run from this
            self._header["create"] = create
        self.journal = _Journal(folder / f"{run_id}.jsonl", self._header)
        # a resumed offline run: the steps its earlier attempts journaled
        prior = {(r["k"], int(r["s"])) for r in self.journal.prior if r["t"] == "m"}
        self._skip = (skip or set()) | prior
        self._pending: list[dict[str, Any]] = []  # handed to the sender, not confirmed
        self._cond = threading.Condition()
        self._kick = False
        self._closing = False
        self.failures = 0
        self.attempts = 0  # the sender's sends, done or failed
        self.sender_cpu = 0.0  # the sender thread's CPU seconds so far
        self.down = False  # the sender's last attempt failed
        self._queued: list[dict[str, Any]] = []  # non-metric records not sent
        self._thread = threading.Thread(target=self._drain, name="mlflow-sender", daemon=True)
        if client is None:  # offline: everything stays in the queue file
            self.down = True
        else:
            self._thread.start()

    # -- metrics
    def _records(self, metrics: dict[str, Any], step: int) -> list[dict[str, Any]]:
        now = int(time.time() * 1000)
        out = []
        for k, v in metrics.items():
            if v is None or (k, int(step)) in self._skip:  # already in the resumed run
                continue
            out.append({"t": "m", "k": k, "v": float(v), "ts": now, "s": int(step)})
        return out

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Training's ``log_metrics(metrics, step)`` callback: journaled locally, sent in the
        background (never blocks on MLflow)."""
        records = self._records(metrics, step)
        if not records:
            return
        self.journal.append(records)
        with self._cond:
            self._pending.extend(records)
            if "stsb_dev_spearman" in metrics:
                self._kick = True
                self._cond.notify()

    def _drain(self) -> None:
        try:
            self._drain_loop()
        finally:
            self.sender_cpu = time.thread_time()

    def _drain_loop(self) -> None:
        while True:
            self.sender_cpu = time.thread_time()
            with self._cond:
                self._cond.wait_for(lambda: self._kick or self._closing, timeout=FLUSH_SECONDS)
                self._kick = False
                batch = self._pending[:_BATCH]
                closing = self._closing
            if batch:
                try:
                    self.client.log_batch(self.run_id, metrics=[_metric(r) for r in batch])
                except Exception:  # noqa: BLE001 - kept; retried next round, else queued
                    self.failures += 1
                    self.down = True
                    self.attempts += 1
                    if closing:
                        return
                    continue
                self.down = False
                self.attempts += 1
                with self._cond:
                    del self._pending[: len(batch)]
                    more = bool(self._pending)
                if more and closing:
                    continue
                if more and len(batch) == _BATCH:
                    with self._cond:
                        self._kick = True
                    continue
            if closing and not self._pending:
                return

    def flush(self, timeout: float | None = None) -> bool:
        """Wait (up to ``timeout``) until the sender has delivered everything; True if it has."""
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        start = self.attempts
        with self._cond:
            self._kick = True
            self._cond.notify()
        while time.monotonic() < deadline:
            with self._cond:
                if not self._pending:
                    return True
            if (self.down and self.attempts > start) or not self._thread.is_alive():
                return False  # a send after the kick failed: the server is (still) down
            time.sleep(0.05)
        return False

    def queue_records(self, records: list[dict[str, Any]]) -> None:
        """Journal ``records`` and keep them for the store (an offline run's params)."""
        self.journal.append(records)
        self._queued.extend(records)

    # -- inputs
    def log_inputs(self, datasets: list[dict[str, Any]]) -> None:
        """The run's dataset inputs (entries of :func:`input_datasets`): journaled first (a kill
        loses nothing), then sent once; queued with the rest if MLflow fails."""
        if not datasets:
            return
        record = {"t": "inputs", "datasets": datasets}
        self.journal.append([record])
        self._send(record)

    # -- the end
    def _send(self, record: dict[str, Any]) -> None:
        """Send one record now, or queue it once MLflow has failed."""
        if self.down:
            self._queued.append(record)
            return
        try:
            _apply(self.client, self.uri, self.run_id, record)
        except Exception:  # noqa: BLE001
            self.failures += 1
            self.down = True
            self._queued.append(record)

    def finish(
        self,
        metrics: dict[str, Any],
        model_dir: str | os.PathLike,
        files: Sequence[str | os.PathLike] = (),
    ) -> None:
        """Log the summary metrics, the model folder (artifact ``model``, and as an MLflow model in
        the flavour its folder loads with: :func:`~focalcse.ops.tracking.models.log_model`), ``files``
        (``metrics/``), and tag the run with the model's fingerprint for the evaluate stage. Anything
        MLflow misses is queued."""
        keys = (
            "best_step",
            "stsb_dev_best",
            "stsb_dev_start",
            "steps",
            "final_loss",
            "train_seconds",
            "wall_seconds",
            "sentences_per_second",
            "step_seconds_median",
            "peak_memory_mb",
        )
        clock = time.perf_counter()
        self.timings: dict[str, float] = {}

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            self.timings[name] = self.timings.get(name, 0.0) + now - clock
            clock = now

        self.log_metrics({k: float(metrics[k]) for k in keys if metrics.get(k) is not None}, 0)
        ok = self.flush()
        self.down = self.down or not ok
        lap("metrics")
        model_dir = Path(model_dir).resolve()
        self._send({"t": "art", "path": str(model_dir), "dest": "model"})
        for f in files:
            if Path(f).is_file():
                self._send({"t": "art", "path": str(Path(f).resolve()), "dest": "metrics"})
        lap("artifacts")
        flavour = model_flavour(model_dir)
        if flavour is None:
            print(f"{model_dir}: no modules.json or focalcse.json; logged as files only, no MLflow model")
        elif flavour == SENTENCE_TRANSFORMERS and importlib.util.find_spec("sentence_transformers") is None:
            print("warning: sentence-transformers is not installed: no MLflow model logged", file=sys.stderr)
        else:
            register = os.environ.get("FOCALCSE_REGISTER_MODEL", "").strip() or None
            self._send({"t": "model", "path": str(model_dir), "register": register})
        lap("logged_model")
        self._send({"t": "tag", "k": "model_sha256", "v": folder_fingerprint(model_dir)})
        lap("tags")
        print("MLflow finish: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()), flush=True)

    def end(self, status: str = "FINISHED", error: str | None = None) -> str | None:
        """Close the run with ``status``; returns the one-line notice when MLflow was unreachable
        and the rest is queued (also printed), else None."""
        ok = self.flush()
        self.down = self.down or not ok
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self.client is not None:
            self._thread.join(timeout=0.5)
            print(f"MLflow sender: {self.sender_cpu:.1f} s CPU over {self.attempts} sends", flush=True)
        if error:
            self._send({"t": "tag", "k": "error", "v": error[:5000]})
        self._send({"t": "end", "status": status, "ts": int(time.time() * 1000)})
        with self._cond:
            pending = list(self._pending)
        left = [*self.journal.prior, *pending, *self._queued]
        if not self.down and not self.failures and not self.journal.prior:
            self.journal.close(remove=True)
            return None
        if not self.down and self.client is not None:  # recovered, or an earlier attempt's records
            with contextlib.suppress(Exception):
                left, _ = sync_records(self.client, self.uri, self.run_id, left)
        if not left:
            self.journal.close(remove=True)
            return None
        self.journal.rewrite(self._header, left)
        self.journal.close(remove=False)
        n = sum(r["t"] == "m" for r in left)
        line = (
            f"MLflow unreachable: {n} metrics of run {self.run_id} queued in {self.journal.path}; "
            "run `focalcse tracking sync`"
        )
        print(line, file=sys.stderr)
        return line


class _NoRun:
    run_id = None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        return None

    def finish(self, *args: Any, **kwargs: Any) -> None:
        return None


def _kill_stale(
    client: Any, exp_id: str, stage: str, keep: str | None, queue: Path, uri: str | None = None
) -> None:
    """End the earlier RUNNING train runs of this item whose process is gone (``kill -9``), checkpoint
    or not: a run with a queue file has it sent first (its metrics join it), then ends KILLED (or
    with the end status it queued); a queue file locked by a running stage means its run is alive.
    ``keep``: the run this attempt continues."""
    try:
        runs = client.search_runs(
            [exp_id],
            filter_string=f"tags.dvc_stage = '{stage}' and tags.focalcse_stage = 'train' "
            "and attributes.status = 'RUNNING'",
            max_results=50,
        )
    except Exception:  # noqa: BLE001 - housekeeping only
        return
    for r in runs:
        rid = r.info.run_id
        if rid == keep:
            continue
        with contextlib.suppress(Exception):  # housekeeping only: `focalcse tracking sync` retries
            path = queue / f"{rid}.jsonl"
            header = split_queue(read_queue(path))[0] if path.is_file() else None
            if header is None:  # no queue file (or none readable): the tags name its process
                _kill_if_gone(client, rid, run=r)
            elif process_gone(_identity_of(r.data.tags, header)):
                _sync_file(path, client, uri)  # sent, then KILLED; locked meanwhile: left alone


class _Opening:
    """The train run, opened by a background thread while the stage loads its model and data: the
    first ``log_metrics`` (the first training step) waits for it, so no metric precedes its run and
    the opening costs the item no wall time of its own."""

    def __init__(self, open_run: Any, offline: Any) -> None:
        self._open = open_run
        self._offline = offline  # offline(reason): the run queued whole, when the store is down
        self._run: TrainRun | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, name="mlflow-open", daemon=True)
        self._thread.start()

    def _target(self) -> None:
        try:
            try:
                self._run = self._open()
            except Exception as err:
                reason = _unreachable(err)
                if reason is None:
                    raise
                self._run = self._offline(reason)
        except BaseException as err:  # noqa: BLE001 - raised in the stage's thread by result()
            self._error = err

    def result(self) -> TrainRun:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._run is not None
        return self._run

    @property
    def run_id(self) -> str:
        return self.result().run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.result().log_metrics(metrics, step)

    def finish(self, *args: Any, **kwargs: Any) -> None:
        self.result().finish(*args, **kwargs)


@contextmanager
def train_run(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    work_dir: str | os.PathLike | None = None,
    framework: str | None = None,
    layout: Layout | None = None,
) -> Iterator[TrainRun | _NoRun | _Opening]:
    """Open the MLflow run of one train matrix item; it ends FINISHED, FAILED with the error as a tag
    if the body raises, KILLED on KeyboardInterrupt.

    The run is opened (params, tags, earlier runs, dataset inputs) by a background thread while the
    body loads its model and data, and the first ``log_metrics`` waits for it. Training never waits
    on the store: one that is unreachable when the item starts is treated like one that dies
    mid-run. One line says so, the whole run (its creation included) goes to the local queue, the
    item trains and finishes, and ``focalcse tracking sync`` creates the run and sends the rest.

    ``work_dir``: the item's checkpoint folder (``.seed<k>.work`` beside the model). The run id is
    kept there, so a resumed item continues the same run; an earlier run of the item left RUNNING by
    a process of this machine that is gone and that nothing resumes gets its queued records, then
    ends KILLED. ``framework``: default the sweep's reference (its first). ``layout`` (default: the working directory's, where DVC runs the stage: the checkout or a set's
    folder) names the data logged as the run's dataset
    inputs (:func:`input_datasets`).

    Example::

        with train_run(params, backbone, loss, seed, work_dir) as run:
            metrics = run_train(..., log_metrics=run.log_metrics)
            run.finish(metrics, model_dir, files=[metrics_file, curve_file, dev_file])
    """
    if not enabled():
        yield _NoRun()
        return
    # ConfigError before touching the store; the same dict `focalcse config` prints
    framework = framework or params.sweep.reference
    effective = params.effective_config(backbone, loss, seed, framework)
    uri = tracking_uri()
    item = _Item(params, backbone, loss, seed, work_dir, framework, layout, effective, uri)
    opening = _Opening(lambda: _open_train_run(item), lambda reason: _offline_train_run(item, reason))
    try:
        yield opening
    except BaseException as err:
        status = "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED"
        try:
            tracker = opening.result()
        except Exception as open_err:  # noqa: BLE001 - the body's error is the one to raise
            print(f"warning: the MLflow run did not open: {open_err}", file=sys.stderr)
            raise err from None
        tracker.end(status, error=f"{type(err).__name__}: {err}")
        raise
    opening.result().end("FINISHED")


@dataclass(frozen=True)
class _Item:
    """One train matrix item, as its MLflow run names it."""

    params: Params
    backbone: str
    loss: str
    seed: int
    work_dir: str | os.PathLike | None
    framework: str
    layout: Layout | None
    effective: dict[str, Any]  # the item's effective config (`focalcse config`)
    uri: str

    @property
    def stage(self) -> str:
        return stage_name("train", self.backbone, self.loss, self.seed, self.framework)

    @property
    def name(self) -> str:
        return run_name(self.backbone, self.loss, self.seed, self.framework)

    @property
    def run_file(self) -> Path | None:
        return Path(self.work_dir) / RUN_FILE if self.work_dir is not None else None

    def values(self) -> dict[str, str]:
        """The run's params: the effective config (``train.*``) and the data settings."""
        p = self.params
        return {
            **flatten(self.effective, "train."),
            "backbone": self.backbone,
            "backbone_source": p.backbone_source(self.backbone),
            "data.num_sentences": str(p.data.num_sentences),
            "data.seed": str(p.data.seed),
            "dev.batch_size": str(p.eval.batch_size),
        }

    def tags(self, me: dict[str, str]) -> dict[str, str]:
        """The run's tags; ``me``: the identity of the process writing it."""
        return {
            **_base_tags(self.params, self.stage),
            "backbone": self.backbone,
            "loss": self.loss,
            "seed": str(self.seed),
            "framework": self.framework,
            "focalcse_stage": "train",
            **me,
        }

    def datasets(self) -> list[dict[str, Any]]:
        return input_datasets(self.layout or Layout())  # cwd: where DVC runs the stage (a set's own folder)


def _open_train_run(item: _Item) -> TrainRun:
    """Create (or resume) the item's run, log its params, tags and dataset inputs, end its dead
    predecessors; the :class:`TrainRun` that sends its metrics."""
    from mlflow.entities import Param

    opened = time.perf_counter()
    client, exp_id, uri = client_and_experiment(item.params, item.uri)
    values = item.values()
    me = identity_tags()  # host, pid, its start time: judged dead only from this host
    run_id, skip = None, set()
    prev = _previous_run(item.run_file, uri, values)
    if prev is not None:
        try:
            if prev.get("offline"):  # queued whole while the store was down: created now
                _, _, prev["run_id"] = _sync_file(queue_dir() / f"{prev['run_id']}.jsonl", client, uri)
            if prev["run_id"] is not None:
                old = client.get_run(prev["run_id"])
                if old.info.experiment_id == exp_id and old.info.status != "FINISHED":
                    run_id = old.info.run_id
                    skip = _existing_steps(client, run_id, set(old.data.metrics))
        except Exception:  # noqa: BLE001 - unreadable or unknown: a new run
            run_id = None
    experiment = experiment_name(item.params)
    if run_id is not None:
        for k, v in me.items():  # first: a run back to RUNNING always names a live process
            client.set_tag(run_id, k, v)
        for k in {"focalcse.pid_start", "focalcse.machine_id"} - set(me):  # (none known here)
            with contextlib.suppress(Exception):
                client.delete_tag(run_id, k)
        client.update_run(run_id, status="RUNNING")
        with contextlib.suppress(Exception):  # the interrupted attempt's error, if it raised
            client.delete_tag(run_id, "error")
        print(f"MLflow run {run_id} resumed in experiment {experiment!r} at {redact(uri)}")
    else:
        run = client.create_run(exp_id, tags=item.tags(me), run_name=item.name)
        run_id = run.info.run_id
        print(f"MLflow run {run_id} in experiment {experiment!r} at {redact(uri)}")
        items = [Param(k, v) for k, v in values.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    _kill_stale(client, exp_id, os.environ.get("DVC_STAGE", item.stage), run_id, queue_dir(), uri)
    _write_run_file(item.run_file, run_id, uri, values)
    tracker = TrainRun(client, run_id, uri=uri, skip=skip)
    try:
        tracker.log_inputs(item.datasets())
    except BaseException as err:
        tracker.end("FAILED", error=f"{type(err).__name__}: {err}")
        raise
    print(
        f"MLflow run ready in {time.perf_counter() - opened:.1f} s (params, tags, dataset inputs; "
        "opened beside the model load)",
        flush=True,
    )
    return tracker


def _unreachable(err: Exception) -> str | None:
    """Why the store cannot be reached, when that is what ``err`` (raised opening a run) comes from;
    None for any other error (a bug, a refusal), which the stage reports."""
    if isinstance(err, TrackingUnavailableError):
        return str(err)
    try:
        check_tracking_uri(tracking_uri())
    except TrackingUnavailableError as down:  # it died between the check and the opening
        return str(down)
    return None


def _previous_run(run_file: Path | None, uri: str, values: dict[str, str]) -> dict[str, Any] | None:
    """The run an interrupted attempt of the item left (it has a checkpoint), when it had the same
    params and went to the same store (or, queued whole, to none yet); else None (a new run)."""
    if run_file is None or not run_file.is_file():
        return None
    if not any((run_file.parent / c).is_dir() for c in ("last", "previous")):
        return None
    try:
        prev = json.loads(run_file.read_text())
    except (OSError, ValueError):
        return None
    if prev.get("params") != values or not prev.get("run_id"):
        return None
    if prev.get("uri") != redact(uri) and not prev.get("offline"):
        return None
    return prev


def _write_run_file(
    run_file: Path | None, run_id: str, uri: str, values: dict[str, str], offline: bool = False
) -> None:
    if run_file is None:
        return
    run_file.parent.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_id, "pid": os.getpid(), "uri": redact(uri), "params": values}
    if offline:
        record["offline"] = True
    run_file.write_text(json.dumps(record, indent=2) + "\n")


def _offline_train_run(item: _Item, reason: str) -> TrainRun:
    """The item's run while the store is unreachable: a queue file named by a local id, whose header
    holds what creating the run needs (experiment, name, tags, start time); ``sync`` creates it. An
    interrupted offline attempt of the item is continued in the same file."""
    values = item.values()
    prev = _previous_run(item.run_file, item.uri, values)
    queue = queue_dir()
    if prev is not None and prev.get("offline") and (queue / f"{prev['run_id']}.jsonl").is_file():
        local_id = prev["run_id"]
    else:
        local_id = f"offline-{uuid.uuid4().hex}"
    create = {
        "experiment": experiment_name(item.params),
        "run_name": item.name,
        "tags": item.tags(identity_tags()),
        "start_time": int(time.time() * 1000),
    }
    tracker = TrainRun(None, local_id, uri=item.uri, queue=queue, create=create)
    tracker.queue_records([{"t": "p", "k": k, "v": v} for k, v in values.items()])
    tracker.log_inputs(item.datasets())
    _write_run_file(item.run_file, local_id, item.uri, values, offline=True)
    print(
        f"{reason}; training goes on, its MLflow run is queued in {tracker.journal.path} "
        "(`focalcse tracking sync` creates it)",
        file=sys.stderr,
        flush=True,
    )
    return tracker
