"""The local queue: every record a stage sends is journaled first, so a dead server loses nothing;
``sync`` sends what is left and ends runs whose process is gone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

from focalcse.ops.tracking.inputs import _log_inputs
from focalcse.ops.tracking.models import log_model
from focalcse.ops.tracking.process import _kill_if_gone
from focalcse.ops.tracking.store import (
    _BATCH,
    _short_http,
    _sqlite_path,
    check_tracking_uri,
    experiment_id,
    redact,
    repo_root,
    tracking_uri,
)

# ---------------------------------------------------------------- the local queue
CLOSE_TIMEOUT_S = 20.0  # the most finish() waits for the background sender
RUN_FILE = "mlflow_run.json"  # in the train item's work folder: the run to continue on resume


def queue_dir(root: str | os.PathLike | None = None) -> Path:
    """``<repo root>/.focalcse/tracking-queue``: what MLflow has not confirmed, one JSON-lines file per
    run (gitignored and dvcignored; never a DVC output)."""
    return repo_root(root) / ".focalcse" / "tracking-queue"


def _write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_queue(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a queue file (a torn last line, from a kill, is skipped)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def split_queue(records: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """``(header, body)`` of a queue file's records: the ``run`` records merged in order (a resumed
    run's later attempt appends its own), and the rest; ``(None, [])`` unless it starts with one."""
    if not records or records[0].get("t") != "run":
        return None, []
    header: dict[str, Any] = {}
    body = []
    for r in records:
        if r.get("t") == "run":
            header.update(r)
        else:
            body.append(r)
    return header, body


class _Journal:
    """Append-only JSON lines ``<queue>/<run_id>.jsonl``, locked (flock) while its stage runs."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._f = open(path, "a")  # noqa: SIM115 - held for the run
        fcntl.flock(self._f, fcntl.LOCK_EX)
        # an earlier attempt's records (a resumed run); its header is superseded by this attempt's,
        # appended (not rewritten, so a kill now loses nothing): the last "run" record names the process
        self.prior = split_queue(read_queue(path))[1] if self._f.tell() else []
        self.append([header])

    def append(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self._f.write("".join(json.dumps(r) + "\n" for r in records))
            self._f.flush()

    def rewrite(self, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
        _write_lines(self.path, [header, *records])

    def close(self, remove: bool) -> None:
        if remove:
            self.path.unlink(missing_ok=True)
        self._f.close()  # releases the lock


def _metric(r: dict[str, Any]) -> Any:
    from mlflow.entities import Metric

    return Metric(r["k"], float(r["v"]), int(r["ts"]), int(r["s"]))


def _apply(client: Any, uri: str, run_id: str, r: dict[str, Any]) -> None:
    """Send one non-metric record."""
    t = r["t"]
    if t == "tag":
        client.set_tag(run_id, r["k"], r["v"])
    elif t == "art":
        if Path(r["path"]).is_dir():
            client.log_artifacts(run_id, r["path"], artifact_path=r.get("dest"))
        elif Path(r["path"]).is_file():
            client.log_artifact(run_id, r["path"], artifact_path=r.get("dest"))
    elif t == "model":
        if Path(r["path"]).is_dir():
            log_model(uri, run_id, r["path"], r.get("register"))
    elif t == "inputs":
        _log_inputs(client, run_id, r["datasets"])
    elif t == "end":
        client.set_terminated(run_id, status=r["status"], end_time=r.get("ts"))


def _queue_uri(header: dict[str, Any]) -> str:
    """Where a queued run goes: its recorded URI, or ``MLFLOW_TRACKING_URI`` when the recorded one
    was redacted (credentials are never written to the queue)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    stored = header.get("uri") or ""
    if env and redact(env) == stored:
        return env
    return stored if stored and "***" not in stored else tracking_uri()


def _existing_steps(client: Any, run_id: str, keys: set[str]) -> set[tuple[str, int]]:
    have: set[tuple[str, int]] = set()
    for key in keys:
        have.update((key, int(m.step)) for m in client.get_metric_history(run_id, key))
    return have


KIND_NAMES = {
    "m": "metric",
    "p": "param",
    "tag": "tag",
    "art": "artifact",
    "inputs": "dataset input",
    "model": "model",
    "end": "end status",
}


def failure_text(err: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def sync_records(
    client: Any, uri: str, run_id: str, records: list[dict[str, Any]], errors: list[str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Send ``records`` (metrics not already in the run, by key and step; then params, tags,
    artifacts, the model, the end status, in order). Returns ``(records not sent, metrics sent)``;
    stops at the first error, whose reason is appended to ``errors``."""
    from mlflow.entities import Param

    metrics = [r for r in records if r["t"] == "m"]
    rest = [r for r in records if r["t"] != "m"]
    sent = 0
    if metrics:
        have = _existing_steps(client, run_id, {r["k"] for r in metrics})
        todo, seen = [], set()
        for r in metrics:
            if (r["k"], int(r["s"])) not in have and (r["k"], int(r["s"])) not in seen:
                seen.add((r["k"], int(r["s"])))
                todo.append(_metric(r))
        for i in range(0, len(todo), _BATCH):
            client.log_batch(run_id, metrics=todo[i : i + _BATCH])
        sent = len(todo)
    params = [r for r in rest if r["t"] == "p"]
    if params:
        existing = client.get_run(run_id).data.params
        fresh = {r["k"]: r["v"] for r in params if r["k"] not in existing}  # (a resumed run's twice)
        items = [Param(k, v) for k, v in fresh.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    rest = [r for r in rest if r["t"] != "p"]
    for i, r in enumerate(rest):
        try:
            _apply(client, uri, run_id, r)
        except Exception as err:
            if errors is not None:
                errors.append(
                    f"its {KIND_NAMES.get(r['t'], r['t'])} record was refused ({failure_text(err)})"
                )
            return rest[i:], sent
    return [], sent


def _create_run(client: Any, uri: str, create: dict[str, Any]) -> str:
    """Create the run an offline queue file's header describes (its experiment too, if missing)."""
    exp_id = experiment_id(client, uri, create["experiment"])
    run = client.create_run(
        exp_id,
        start_time=create.get("start_time"),
        tags=create.get("tags") or {},
        run_name=create.get("run_name"),
    )
    print(f"MLflow run {run.info.run_id} created for queued run {create.get('run_name')}", flush=True)
    return run.info.run_id


def _sync_file(
    path: Path, client: Any = None, uri: str | None = None, reasons: dict[str, str] | None = None
) -> tuple[str, int, str | None]:
    """Send one queue file (``client``/``uri``: the store, default the one its header names); then,
    if it holds no end status, end its run KILLED when the run's process is gone. Returns
    ``(outcome, metrics sent, run id)``, outcome one of ``locked`` (its stage runs), ``unreadable``,
    ``left`` (kept: MLflow refused or is unreachable), ``sent`` (file removed), ``killed`` (sent, file
    removed, run ended KILLED)."""
    from mlflow import MlflowClient

    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its stage is still running
            return "locked", 0, None
        header, body = split_queue(read_queue(path))
        if header is None:
            return "unreadable", 0, None
        run_id = header["run_id"]
        # a run queued whole exists in no store yet: it goes to the one named now
        uri = uri or (tracking_uri() if header.get("create") else _queue_uri(header))
        try:
            if client is None:
                check_tracking_uri(uri)
                client = MlflowClient(tracking_uri=uri)
            if header.get("create"):  # queued whole, the store down when its stage started
                run_id = _create_run(client, uri, header["create"])
                # recorded at once: a sync killed from here on continues this run, never a second
                lock.write(json.dumps({"t": "run", "run_id": run_id, "create": None}) + "\n")
                lock.flush()
                os.fsync(lock.fileno())
                header = {**header, "run_id": run_id, "create": None}
            errors: list[str] = []
            left, sent = sync_records(client, uri, run_id, body, errors)
        except Exception as err:  # noqa: BLE001 - unreachable or refused: keep the file
            if reasons is not None:
                reasons[run_id or path.stem] = (
                    f"the store {redact(uri)} could not be used ({failure_text(err)})"
                )
            return "left", 0, run_id
        if left:
            _write_lines(path, [header, *left])
            if reasons is not None:
                reasons[run_id] = "; ".join(errors) or "some records were not sent"
            return "left", sent, run_id
        killed = False
        if not any(r["t"] == "end" for r in body):  # its process never ended the run
            with contextlib.suppress(Exception):  # housekeeping: `sync` reaps it later otherwise
                killed = _kill_if_gone(client, run_id, header)
        path.unlink(missing_ok=True)
        return ("killed" if killed else "sent"), sent, run_id


def reap(uri: str | None = None, exclude: set[str] | frozenset[str] = frozenset()) -> int:
    """Mark KILLED every RUNNING run of the store whose process (tags ``focalcse.*``) ran on this
    machine and is gone, except the runs in ``exclude`` (those with a queue file still waiting).
    A sqlite store that does not exist is left alone. Returns how many runs it ended."""
    from mlflow import MlflowClient

    uri = uri or tracking_uri()
    if uri.startswith("sqlite:///") and not _sqlite_path(uri).is_file():
        return 0
    check_tracking_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    host = socket.gethostname().replace("'", "")
    killed = 0
    for i in range(0, len(exps), 100):
        runs = client.search_runs(
            exps[i : i + 100],
            filter_string=f"attributes.status = 'RUNNING' and tags.`focalcse.host` = '{host}'",
            max_results=5000,
        )
        for r in runs:
            if r.info.run_id not in exclude and _kill_if_gone(client, r.info.run_id, run=r):
                killed += 1
    return killed


def sync(root: str | os.PathLike | None = None, folder: str | os.PathLike | None = None) -> dict[str, Any]:
    """Send every queued run (``focalcse tracking sync``); removes what was sent. Files locked by a
    running stage are skipped. A run whose process is gone and never ended it is then ended KILLED,
    whether it had a queue file or not (:func:`reap` on the store ``tracking_uri(root)``). Returns
    counts: ``runs`` (sent), ``metrics``, ``left`` (runs still queued), ``killed``, and ``reasons``:
    per run still queued, why it was not sent."""
    _short_http()
    out: dict[str, Any] = {"runs": 0, "metrics": 0, "left": 0, "killed": 0, "reasons": {}}
    base = Path(folder) if folder is not None else queue_dir(root)
    waiting: set[str] = set()  # runs with records still queued (named by id, or created by sync)
    for path in sorted(base.glob("*.jsonl")) if base.is_dir() else ():
        outcome, sent, run_id = _sync_file(path, reasons=out["reasons"])
        if outcome == "locked":
            out["reasons"][path.stem] = "its stage is still running (the queue file is locked)"
        out["metrics"] += sent
        if outcome in ("sent", "killed"):
            out["runs"] += 1
            out["killed"] += outcome == "killed"
        elif outcome != "unreadable":
            out["left"] += 1
            waiting.add(run_id or path.stem)
    waiting |= {p.stem for p in base.glob("*.jsonl")} if base.is_dir() else set()
    with contextlib.suppress(Exception):  # housekeeping: an unreachable store is the queue's business
        out["killed"] += reap(tracking_uri(root), exclude=waiting)
    return out
