"""MLflow tracking for the train / evaluate / report stages (mlflow is imported inside functions).

One experiment per parameter set (``tracking.experiment``). One run per train matrix item
(backbone × loss × seed): parameters, per-step ``loss`` and ``lr``, ``stsb_dev_spearman`` at each
evaluation, best step, wall time and throughput, the model folder as the ``model`` artifact; the
evaluate stage then adds the 7 STS scores to the *same* run, found by the model folder's fingerprint
(tag ``model_sha256``), so one row of the MLflow table is one backbone × loss × seed with its scores.
A train run also names its inputs (the training sample and the STS data as MLflow datasets, by content
digest) and its code (``mlflow.source.git.commit``). Each run records the process that writes it;
a run whose process on this machine is gone is ended KILLED by the item's next attempt or by
``focalcse tracking sync``, never from another machine.

Where: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlflow.db`` with artifacts in
``<repo root>/mlartifacts`` (the repo root is ``DVC_ROOT``, which DVC sets for every stage command,
also for queued experiments running in a temporary copy). An ``http(s)`` server is checked up front
so a stage fails in seconds, before any training, when it is unreachable.
``FOCALCSE_TRACKING=off`` disables tracking.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from focalcse.config import BASE_FRAMEWORK, Params
from focalcse.data.tasks import TASKS
from focalcse.errors import TrackingUnavailableError  # re-exported: importers find it here
from focalcse.layout import COMPANION_KEYS, Layout, companion_file, run_name, safe_name, stage_name

CHECK_TIMEOUT_S = 3.0
FLUSH_SECONDS = 5.0  # buffered per-step metrics reach the store at least this often
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch
# MLflow 3 opens an experiment of this kind on its runs (not the GenAI traces page)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


# ---------------------------------------------------------------- where
def enabled() -> bool:
    return os.environ.get("FOCALCSE_TRACKING", "on").strip().lower() not in ("off", "0", "false", "no")


def repo_root(start: str | os.PathLike | None = None) -> Path:
    """``DVC_ROOT`` if set (DVC sets it for stage commands), else the nearest folder at or above
    ``start`` (default: cwd) holding ``.dvc`` or ``dvc.yaml``, else ``start``."""
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".dvc").is_dir() or (folder / "dvc.yaml").is_file():
            return folder
    return here


def tracking_uri(root: str | os.PathLike | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` or ``sqlite:///<repo root>/mlflow.db``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Layout.at(repo_root(root)).mlflow_db}"


def redact(uri: str) -> str:
    """The URI without a password or token (safe for logs and error messages)."""
    parts = urllib.parse.urlsplit(uri)
    if not (parts.username or parts.password or parts.query):
        return uri
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    if query:
        parts = parts._replace(query="&".join(f"{k}=***" for k, _ in query))
    return urllib.parse.urlunsplit(parts)


def _sqlite_path(uri: str) -> Path:
    """The database file of ``sqlite:///relative.db`` or ``sqlite:////absolute.db``."""
    return Path(uri[len("sqlite:///") :].split("?", 1)[0]).resolve()


def check_tracking_uri(uri: str, timeout: float = CHECK_TIMEOUT_S) -> None:
    """Fail fast on an unreachable server: ``GET <uri>/health`` for http(s); the folder must exist
    for ``sqlite:///``. Raises :class:`TrackingUnavailableError` naming the (redacted) URI."""
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme in ("http", "https"):
        parts = urllib.parse.urlsplit(uri)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{parts.port}" if parts.port else ""
        # /health needs no credentials; urllib cannot take them from the URL anyway
        url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only
                status = resp.status
        except urllib.error.HTTPError as err:
            status = err.code
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise TrackingUnavailableError(
                f"MLflow tracking server {redact(uri)} is unreachable ({reason}); start it "
                "(`make mlflow-ui`) or unset MLFLOW_TRACKING_URI to use the local sqlite store"
            ) from None
        if status != 200:
            raise TrackingUnavailableError(
                f"MLflow tracking server {redact(uri)} answered HTTP {status} on /health "
                "(not an MLflow server, or not ready)"
            )
    elif scheme == "sqlite":
        folder = _sqlite_path(uri).parent
        if not folder.is_dir():
            raise TrackingUnavailableError(f"MLflow store {uri}: folder {folder} does not exist")


def experiment_name(params: Params) -> str:
    """The MLflow experiment of the parameter set: ``tracking.experiment``."""
    return params.tracking.experiment


def params_hash(params: Params) -> str:
    """First 12 hex digits of the SHA-256 of the whole parameter set (canonical JSON)."""
    blob = json.dumps(params.raw, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def folder_fingerprint(folder: str | os.PathLike) -> str:
    """SHA-256 over every file's relative path and content: links a model folder to its train run."""
    root = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"train": {"lr": 3e-5}}`` -> ``{"train.lr": "3e-05"}`` (lists as JSON)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


# ---------------------------------------------------------------- client and experiment
@contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise first use of a sqlite store: concurrent stages would race to create its tables and
    the experiment."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = _sqlite_path(uri)
    with open(db.parent / f".{db.name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def client_and_experiment(params: Params, uri: str | None = None) -> tuple[Any, str, str]:
    """``(MlflowClient, experiment_id, uri)``; creates the store and the experiment if needed."""
    from mlflow import MlflowClient

    uri = uri or tracking_uri()
    check_tracking_uri(uri)
    _short_http()
    name = experiment_name(params)
    with _store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return client, exp.experiment_id, uri
        location = None
        if uri.startswith("sqlite:///"):  # absolute, so runs from any cwd (or DVC temp copy) agree
            location = Layout.at(_sqlite_path(uri).parent).mlflow_artifacts.as_uri()
        exp_id = client.create_experiment(
            name, artifact_location=location, tags={"param_set": name, EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
        )
        return client, exp_id, uri


def _base_tags(params: Params, stage: str) -> dict[str, str]:
    from focalcse.provenance import git_commit

    commit = git_commit()  # the stage's workspace (a queued experiment's own checkout)
    tags = {
        "param_set": experiment_name(params),
        "params_hash": params_hash(params),
        "git_commit": commit,  # with `-dirty` when tracked code or params had uncommitted edits
        "dvc_stage": os.environ.get("DVC_STAGE", stage),
        **source_tags(commit),
    }
    if os.environ.get("DVC_EXP_NAME"):  # set by `dvc exp run` for each experiment
        tags["dvc_experiment"] = os.environ["DVC_EXP_NAME"]
    return tags


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's own source tags, as it sets them for a local project (what the UI's Source column
    shows): ``mlflow.source.type`` ``LOCAL``, ``mlflow.source.name`` the entry script (relative to
    the repo root when inside it) and ``mlflow.source.git.commit`` the commit (without ``-dirty``;
    left out outside git)."""
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    name = "<console>"
    if main is not None:
        name = str(main)
        with contextlib.suppress(ValueError, OSError):
            name = main.resolve().relative_to(repo_root()).as_posix()
    tags = {"mlflow.source.type": "LOCAL", "mlflow.source.name": name}
    sha = commit.removesuffix("-dirty")
    if sha and sha != "unknown":
        tags["mlflow.source.git.commit"] = sha
    return tags


# ---------------------------------------------------------------- whose process a run is
# A run records the process that writes it (tags ``focalcse.host``, ``focalcse.pid``,
# ``focalcse.pid_start``, ``focalcse.machine_id``; the same keys, unprefixed, in its queue header).
# It is judged dead only from the machine that ran it, and only when that process is gone.
IDENTITY_KEYS = ("host", "pid", "pid_start", "machine_id")


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _boot_id() -> str | None:
    """This boot of the kernel (Linux); a process start time is only comparable within one boot."""
    return _read_text("/proc/sys/kernel/random/boot_id")


def _machine_id() -> str | None:
    """This machine's id (systemd / D-Bus), stable across reboots; None where there is none."""
    return _read_text("/etc/machine-id") or _read_text("/var/lib/dbus/machine-id")


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None
    when no such process runs (a zombie, killed and not yet reaped, counts as gone)."""
    stat = _read_text(f"/proc/{int(pid)}/stat")
    if stat is None:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_identity(pid: int | None = None) -> dict[str, str]:
    """``host``, ``pid`` and, where the OS tells, ``pid_start`` (``<boot id>:<start ticks>``, so a
    reused PID is told apart) and ``machine_id`` of process ``pid`` (default: this one)."""
    pid = os.getpid() if pid is None else int(pid)
    out = {"host": socket.gethostname(), "pid": str(pid)}
    boot, ticks = _boot_id(), _start_ticks(pid)
    if boot and ticks:
        out["pid_start"] = f"{boot}:{ticks}"
    machine = _machine_id()
    if machine:
        out["machine_id"] = machine
    return out


def identity_tags(pid: int | None = None) -> dict[str, str]:
    """:func:`process_identity` as run tags (``focalcse.<key>``)."""
    return {f"focalcse.{k}": v for k, v in process_identity(pid).items()}


def _identity_of(tags: dict[str, str], header: dict[str, Any] | None = None) -> dict[str, Any]:
    """The process a run names: its tags (updated by every attempt that resumes it), else its queue
    header."""
    if "focalcse.pid" in tags:
        return {k: tags[f"focalcse.{k}"] for k in IDENTITY_KEYS if f"focalcse.{k}" in tags}
    return {k: header[k] for k in IDENTITY_KEYS if k in (header or {})}


def process_gone(identity: dict[str, Any]) -> bool:
    """Whether the process ``identity`` names (see :func:`process_identity`) is certainly gone.

    Only a process of this machine can be judged: another host name (or, same name, another machine
    id) is never gone from here. On this machine it is gone when its PID no longer runs or now runs
    a process started at another time (PID reuse), or when it started before a reboot."""
    if not identity.get("host") or identity["host"] != socket.gethostname():
        return False
    mine, theirs = _machine_id(), identity.get("machine_id")
    if mine and theirs and mine != theirs:
        return False  # a machine of the same name
    try:
        pid = int(identity["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    ticks = None
    if identity.get("pid_start"):  # (none recorded: another OS, or a run from before they were)
        boot, _, ticks = str(identity["pid_start"]).rpartition(":")
        if boot != _boot_id():  # started before a reboot of this machine, or on another machine
            return bool(mine and theirs == mine)
    now = _start_ticks(pid)  # None: not running, a zombie, or hidden (another user's, hidepid)
    if now is not None:
        return ticks is not None and now != ticks  # another start time: the PID was reused
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it runs, as another user
        return False
    return _boot_id() is not None  # Linux: signalable but not running, a zombie; elsewhere: alive


def _kill_if_gone(client: Any, run_id: str, header: dict[str, Any] | None = None, run: Any = None) -> bool:
    """End ``run_id`` KILLED if it is still RUNNING and the process it names is gone."""
    run = run if run is not None else client.get_run(run_id)
    if run.info.status != "RUNNING":
        return False
    identity = _identity_of(run.data.tags, header)
    if not process_gone(identity):
        return False
    client.set_terminated(run_id, status="KILLED")
    print(
        f"MLflow run {run_id} marked KILLED: its process {identity.get('pid')} on "
        f"{identity.get('host')} is gone"
    )
    return True


# ---------------------------------------------------------------- the local queue
HTTP_TIMEOUT_S = "10"  # per request, for the stages' MLflow clients (MLflow's default: 120 s)
HTTP_MAX_RETRIES = "1"  # MLflow's default: 7 with exponential backoff (minutes on a dead server)
CLOSE_TIMEOUT_S = 20.0  # the most finish() waits for the background sender
RUN_FILE = "mlflow_run.json"  # in the train item's work folder: the run to continue on resume


def _short_http() -> None:
    """Short timeouts and few retries for MLflow's HTTP client (unless the user set them)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_MAX_RETRIES)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")


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


def _log_model(uri: str, run_id: str, model_dir: str | os.PathLike, register: str | None = None) -> None:
    """The model folder as an MLflow ``sentence_transformers`` model of the run (Logged models);
    registered as ``register`` (env ``FOCALCSE_REGISTER_MODEL``) when set."""
    import mlflow
    import mlflow.sentence_transformers
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    mlflow.set_tracking_uri(uri)
    # The logged model belongs to the active experiment, not the run's (MLflow 3): without this it
    # lands in "Default", with its artifacts under ./mlruns, and the run's experiment shows none.
    mlflow.set_experiment(experiment_id=mlflow.MlflowClient(uri).get_run(run_id).info.experiment_id)
    model = SentenceTransformer(str(model_dir), device="cpu")
    reqs = [
        f"sentence-transformers=={sentence_transformers.__version__}",
        f"transformers=={transformers.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
    ]
    mlflow.sentence_transformers.log_model(
        model,
        name="sentence_transformer",
        run_id=run_id,
        pip_requirements=reqs,  # no requirement inference (it re-loads the model in a subprocess)
        registered_model_name=register or None,
    )


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
            _log_model(uri, run_id, r["path"], r.get("register"))
    elif t == "inputs":
        _log_inputs(client, run_id, r["datasets"])
    elif t == "end":
        client.set_terminated(run_id, status=r["status"])


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


def sync_records(
    client: Any, uri: str, run_id: str, records: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """Send ``records`` (metrics not already in the run, by key and step; then params, tags,
    artifacts, the model, the end status, in order). Returns ``(records not sent, metrics sent)``;
    stops at the first error."""
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
        items = [Param(r["k"], r["v"]) for r in params if r["k"] not in existing]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    rest = [r for r in rest if r["t"] != "p"]
    for i, r in enumerate(rest):
        try:
            _apply(client, uri, run_id, r)
        except Exception:
            return rest[i:], sent
    return [], sent


def _sync_file(path: Path, client: Any = None, uri: str | None = None) -> tuple[str, int, str | None]:
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
        uri = uri or _queue_uri(header)
        try:
            if client is None:
                check_tracking_uri(uri)
                client = MlflowClient(tracking_uri=uri)
            left, sent = sync_records(client, uri, run_id, body)
        except Exception:  # noqa: BLE001 - unreachable or refused: keep the file
            return "left", 0, run_id
        if left:
            _write_lines(path, [header, *left])
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


def sync(root: str | os.PathLike | None = None, folder: str | os.PathLike | None = None) -> dict[str, int]:
    """Send every queued run (``focalcse tracking sync``); removes what was sent. Files locked by a
    running stage are skipped. A run whose process is gone and never ended it is then ended KILLED,
    whether it had a queue file or not (:func:`reap` on the store ``tracking_uri(root)``). Returns
    counts: ``runs`` (sent), ``metrics``, ``left`` (runs still queued), ``killed``."""
    _short_http()
    out = {"runs": 0, "metrics": 0, "left": 0, "killed": 0}
    base = Path(folder) if folder is not None else queue_dir(root)
    for path in sorted(base.glob("*.jsonl")) if base.is_dir() else ():
        outcome, sent, _ = _sync_file(path)
        out["metrics"] += sent
        if outcome in ("sent", "killed"):
            out["runs"] += 1
            out["killed"] += outcome == "killed"
        elif outcome != "unreadable":
            out["left"] += 1
    waiting = {p.stem for p in base.glob("*.jsonl")} if base.is_dir() else set()
    with contextlib.suppress(Exception):  # housekeeping: an unreachable store is the queue's business
        out["killed"] += reap(tracking_uri(root), exclude=waiting)
    return out


# ---------------------------------------------------------------- what a run read
DATASET_CONTEXT_TAG = "mlflow.data.context"  # MLflow's input tag for a dataset's role


def _file_digests(path: Path) -> tuple[str, str, int, int]:
    """``(md5, sha256, bytes, lines)`` of a file's bytes, in one read."""
    md5, sha, size, lines = hashlib.md5(usedforsecurity=False), hashlib.sha256(), 0, 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            md5.update(chunk)
            sha.update(chunk)
            size += len(chunk)
            lines += chunk.count(b"\n")
    return md5.hexdigest(), sha.hexdigest(), size, lines


def dvc_md5(path: str | os.PathLike) -> str:
    """DVC's content hash of a file or folder, as ``dvc.lock`` records it: the md5 of a file's bytes;
    for a folder, the md5 of its listing (``[{"md5", "relpath"}]`` sorted by path, JSON with sorted
    keys) followed by ``.dir``."""
    path = Path(path)
    if path.is_file():
        return _file_digests(path)[0]
    return _dir_md5({f.relative_to(path).as_posix(): _file_digests(f)[0] for f in _files(path)})


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _dir_md5(md5s: dict[str, str]) -> str:
    """DVC's hash of a folder from its files' md5s (keyed by relative POSIX path)."""
    listing = [{"md5": md5s[rel], "relpath": rel} for rel in sorted(md5s)]
    blob = json.dumps(listing, sort_keys=True).encode("utf-8")
    return hashlib.md5(blob, usedforsecurity=False).hexdigest() + ".dir"


def _dataset(name: str, digest: str, source: Any, profile: dict[str, Any], context: str) -> dict[str, Any]:
    """One dataset input as a queue record's entry: an ``mlflow.data`` ``MetaDataset``'s fields, a
    JSON profile and the MLflow context tag."""
    from mlflow.data.meta_dataset import MetaDataset

    fields = MetaDataset(source, name=name, digest=digest).to_dict()
    return {**fields, "profile": json.dumps(profile, sort_keys=True), "context": context}


def _local_source(path: Path) -> Any:
    from mlflow.data.dataset_source_registry import get_dataset_source_from_json

    return get_dataset_source_from_json(json.dumps({"uri": str(path.resolve())}), source_type="local")


def input_datasets(layout: Layout) -> list[dict[str, Any]]:
    """The train item's inputs as MLflow datasets: the training sample (``layout.corpus_file``,
    context ``training``) and the prepared STS data (``layout.sts_dir``, context ``validation``: the
    STS-B dev split picks the best step). Each is named by its path in the checkout; its digest is
    DVC's md5 (MLflow caps digests at 36 characters, too short for a sha256), its profile holds the
    sha256 of every file. The corpus's source is the sample file; the STS data's is the URL it was
    downloaded from (its ``manifest.json``), or the folder when it came from a mirror. What is not
    there (no data yet) is left out."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource

    def rel(path: Path) -> str:
        try:
            return path.resolve().relative_to(Path(layout.root).resolve()).as_posix()
        except ValueError:
            return path.as_posix()

    out = []
    corpus = Path(layout.corpus_file)
    if corpus.is_file():
        md5, sha, size, lines = _file_digests(corpus)
        profile = {
            "sha256": sha,
            "md5": md5,
            "bytes": size,
            "sentences": lines,
            "made_by": "DVC stage sample",
        }
        out.append(_dataset(rel(corpus), md5, _local_source(corpus), profile, "training"))
    sts = Path(layout.sts_dir)
    if sts.is_dir():
        files = {}
        for f in _files(sts):
            md5, sha, size, _ = _file_digests(f)
            files[f.relative_to(sts).as_posix()] = {"sha256": sha, "md5": md5, "bytes": size}
        digest = _dir_md5({k: v["md5"] for k, v in files.items()})
        origin = ""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            origin = str(json.loads((sts / "manifest.json").read_text()).get("source") or "")
        if origin.startswith(("http://", "https://")):
            source = HTTPDatasetSource(origin)
        else:
            source = _local_source(sts)
        profile = {"files": files, "origin": origin or None, "made_by": "DVC stage prepare_sts"}
        out.append(_dataset(rel(sts), digest, source, profile, "validation"))
    return out


def _log_inputs(client: Any, run_id: str, datasets: list[dict[str, Any]]) -> None:
    """Log queued dataset entries as the run's inputs (MLflow keeps one per name and digest, so
    sending them again adds nothing)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = [
        DatasetInput(
            Dataset(
                name=d["name"],
                digest=d["digest"],
                source_type=d["source_type"],
                source=d["source"],
                schema=d.get("schema"),
                profile=d.get("profile"),
            ),
            tags=[InputTag(DATASET_CONTEXT_TAG, d["context"])] if d.get("context") else [],
        )
        for d in datasets
    ]
    if inputs:
        client.log_inputs(run_id, datasets=inputs)


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
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self.close_timeout = close_timeout
        folder = Path(queue) if queue is not None else queue_dir()
        # the process writing the run (host, pid, start time): judged dead only from its own host
        self._header = {"t": "run", "run_id": run_id, "uri": redact(uri), **process_identity()}
        self.journal = _Journal(folder / f"{run_id}.jsonl", self._header)
        self._skip = skip or set()
        self._pending: list[dict[str, Any]] = []  # handed to the sender, not confirmed
        self._cond = threading.Condition()
        self._kick = False
        self._closing = False
        self.failures = 0
        self.attempts = 0  # the sender's sends, done or failed
        self.down = False  # the sender's last attempt failed
        self._queued: list[dict[str, Any]] = []  # non-metric records not sent
        self._thread = threading.Thread(target=self._drain, name="mlflow-sender", daemon=True)
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
        while True:
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
        """Log the summary metrics, the model folder (artifact ``model``, and as an MLflow
        sentence-transformers model), ``files`` (``metrics/``), and tag the run with the model's
        fingerprint for the evaluate stage. Anything MLflow misses is queued."""
        keys = (
            "best_step",
            "stsb_dev_best",
            "stsb_dev_start",
            "steps",
            "final_loss",
            "train_seconds",
            "wall_seconds",
            "sentences_per_second",
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
        try:
            import sentence_transformers  # noqa: F401 - the MLflow flavour needs it
        except ImportError:
            print("warning: sentence-transformers is not installed: no MLflow model logged", file=sys.stderr)
        else:
            if sentence_transformers_folder(model_dir):
                register = os.environ.get("FOCALCSE_REGISTER_MODEL", "").strip() or None
                self._send({"t": "model", "path": str(model_dir), "register": register})
            else:  # e.g. PromptBERT: its folder refuses ST
                print(f"{model_dir.name}: not a sentence-transformers model; logged as files only")
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
        if error:
            self._send({"t": "tag", "k": "error", "v": error[:5000]})
        self._send({"t": "end", "status": status})
        with self._cond:
            pending = list(self._pending)
        left = [*self.journal.prior, *pending, *self._queued]
        if not self.down and not self.failures and not self.journal.prior:
            self.journal.close(remove=True)
            return None
        if not self.down:  # recovered, or an earlier attempt's records: resend what MLflow lacks
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


def sentence_transformers_folder(model_dir: str | os.PathLike) -> bool:
    """Whether ``SentenceTransformer(model_dir)`` builds the model as evaluated: every module its
    ``modules.json`` names is a sentence-transformers one (a PromptBERT folder names a refusing module)."""
    f = Path(model_dir) / "modules.json"
    if not f.is_file():
        return False
    return all(str(m.get("type", "")).startswith("sentence_transformers.") for m in json.loads(f.read_text()))


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


@contextmanager
def train_run(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    work_dir: str | os.PathLike | None = None,
    framework: str = BASE_FRAMEWORK,
    layout: Layout | None = None,
) -> Iterator[TrainRun | _NoRun]:
    """Open the MLflow run of one train matrix item (connectivity checked first); it ends FINISHED,
    FAILED with the error as a tag if the body raises, KILLED on KeyboardInterrupt.

    ``work_dir``: the item's checkpoint folder (``.seed<k>.work`` beside the model). The run id is
    kept there, so a resumed item continues the same run; an earlier run of the item left RUNNING by
    a process of this machine that is gone and that nothing resumes gets its queued records, then
    ends KILLED. ``layout`` (default: the repo root's) names the data logged as the run's dataset
    inputs (:func:`input_datasets`).

    Example::

        with train_run(params, backbone, loss, seed, work_dir) as run:
            metrics = run_train(..., log_metrics=run.log_metrics)
            run.finish(metrics, model_dir, files=[metrics_file, curve_file, dev_file])
    """
    if not enabled():
        yield _NoRun()
        return
    from mlflow.entities import Param

    # ConfigError before touching the store; the same dict `focalcse config` prints
    effective = params.effective_config(backbone, loss, seed, framework)
    opened = time.perf_counter()
    client, exp_id, uri = client_and_experiment(params)
    stage = stage_name("train", backbone, loss, seed, framework)
    values = {
        **flatten(effective, "train."),
        "backbone": backbone,
        "backbone_source": params.backbone_source(backbone),
        "data.num_sentences": str(params.data.num_sentences),
        "data.seed": str(params.data.seed),
        "dev.batch_size": str(params.eval.batch_size),
    }
    me = identity_tags()  # host, pid, its start time: judged dead only from this host
    work = Path(work_dir) if work_dir is not None else None
    run_file = work / RUN_FILE if work is not None else None
    run_id, skip = None, set()
    if run_file is not None and run_file.is_file() and any((work / c).is_dir() for c in ("last", "previous")):
        try:
            prev = json.loads(run_file.read_text())
            if prev.get("uri") == redact(uri) and prev.get("params") == values:
                old = client.get_run(prev["run_id"])
                if old.info.experiment_id == exp_id and old.info.status != "FINISHED":
                    run_id = old.info.run_id
                    skip = _existing_steps(client, run_id, set(old.data.metrics))
        except Exception:  # noqa: BLE001 - unreadable or unknown: a new run
            run_id = None
    if run_id is not None:
        for k, v in me.items():  # first: a run back to RUNNING always names a live process
            client.set_tag(run_id, k, v)
        for k in {"focalcse.pid_start", "focalcse.machine_id"} - set(me):  # (none known here)
            with contextlib.suppress(Exception):
                client.delete_tag(run_id, k)
        client.update_run(run_id, status="RUNNING")
        with contextlib.suppress(Exception):  # the interrupted attempt's error, if it raised
            client.delete_tag(run_id, "error")
        print(f"MLflow run {run_id} resumed in experiment {experiment_name(params)!r} at {redact(uri)}")
    else:
        tags = {
            **_base_tags(params, stage),
            "backbone": backbone,
            "loss": loss,
            "seed": str(seed),
            "framework": framework,
            "focalcse_stage": "train",
            **me,
        }
        run = client.create_run(exp_id, tags=tags, run_name=run_name(backbone, loss, seed, framework))
        run_id = run.info.run_id
        print(f"MLflow run {run_id} in experiment {experiment_name(params)!r} at {redact(uri)}")
        items = [Param(k, v) for k, v in values.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    _kill_stale(client, exp_id, os.environ.get("DVC_STAGE", stage), run_id, queue_dir(), uri)
    if run_file is not None:
        work.mkdir(parents=True, exist_ok=True)
        record = {"run_id": run_id, "pid": os.getpid(), "uri": redact(uri), "params": values}
        run_file.write_text(json.dumps(record, indent=2) + "\n")
    tracker = TrainRun(client, run_id, uri=uri, skip=skip)
    try:
        tracker.log_inputs(input_datasets(layout or Layout.at(repo_root())))
        print(
            f"MLflow run ready in {time.perf_counter() - opened:.1f} s (params, tags, dataset inputs)",
            flush=True,
        )
        yield tracker
    except BaseException as err:
        status = "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED"
        tracker.end(status, error=f"{type(err).__name__}: {err}")
        raise
    tracker.end("FINISHED")


# ---------------------------------------------------------------- evaluation
def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The scalar metrics of an evaluation result: the tasks, ``sts_avg``, ``wmean_avg``,
    ``alignment``, ``uniformity``."""
    out = {k: float(result[k]) for k in TASKS if k in result}
    if "avg" in result:
        out["sts_avg"] = float(result["avg"])
    if isinstance(result.get("wmean"), dict) and "avg" in result["wmean"]:
        out["wmean_avg"] = float(result["wmean"]["avg"])
    for k in ("alignment", "uniformity"):
        if result.get(k) is not None:
            out[k] = float(result[k])
    return out


def find_train_run(client: Any, exp_id: str, model_dir: str | os.PathLike) -> str | None:
    """The latest finished train run whose model folder has the same fingerprint, or None."""
    fp = folder_fingerprint(model_dir)
    runs = client.search_runs(
        [exp_id],
        filter_string=f"tags.model_sha256 = '{fp}' and tags.focalcse_stage = 'train'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def log_evaluation(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    model_dir: str | os.PathLike,
    result: dict[str, Any],
    result_file: str | os.PathLike | None = None,
    framework: str = BASE_FRAMEWORK,
) -> str | None:
    """Attach an evaluation to the train run that produced ``model_dir`` (by fingerprint); without
    one (model restored from DVC's cache or a remote), a new run with the same tags. Returns the run id."""
    if not enabled():
        return None
    from mlflow.entities import Metric, Param, RunTag

    client, exp_id, uri = client_and_experiment(params)
    run_id = find_train_run(client, exp_id, model_dir)
    stage = os.environ.get("DVC_STAGE", stage_name("evaluate", backbone, loss, seed, framework))
    tags = {"dvc_stage_evaluate": stage, "evaluated": "true"}
    if run_id is None:
        base = {
            **_base_tags(params, stage),
            "backbone": backbone,
            "loss": loss,
            "seed": str(seed),
            "framework": framework,
        }
        run = client.create_run(
            exp_id,
            tags={**base, "focalcse_stage": "evaluate", "linked_train_run": "none", **identity_tags()},
            run_name=run_name(backbone, loss, seed, framework),
        )
        run_id = run.info.run_id
        new = True
    else:
        new = False
    existing = client.get_run(run_id).data.params
    wanted = flatten(
        {
            "eval": {
                "tasks": list(params.eval.tasks),
                "batch_size": params.eval.batch_size,
                "precision": params.eval.precision,
            }
        }
    )
    fresh = [Param(k, v) for k, v in wanted.items() if k not in existing]
    changed = {k: v for k, v in wanted.items() if k in existing and existing[k] != v}
    if changed:  # MLflow params are immutable: record a re-evaluation with other settings as tags
        tags.update({f"re{k}": v for k, v in changed.items()})
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in eval_metrics(result).items()],
        params=fresh,
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    if result_file is not None and Path(result_file).is_file():
        companions = [companion_file(result_file, k) for k in COMPANION_KEYS]
        for f in [Path(result_file), *(c for c in companions if c.is_file())]:
            client.log_artifact(run_id, str(f), artifact_path="metrics")
    if new:
        client.set_terminated(run_id, status="FINISHED")
    print(f"MLflow run {run_id}: evaluation logged at {redact(uri)}")
    return run_id


# ---------------------------------------------------------------- summary
def log_summary_run(params: Params, files: list[Path]) -> str | None:
    """A ``summary`` run for the significance / report stage: ``files`` (tables, plots, JSON) as
    artifacts; from a ``significance.json`` also the per-backbone mean of each loss and the paired
    t-test p-value of the average as metrics. Returns the run id (None when tracking is off)."""
    if not enabled():
        return None
    from mlflow.entities import Metric

    client, exp_id, uri = client_and_experiment(params)
    tags = {**_base_tags(params, "report"), "focalcse_stage": "summary", **identity_tags()}
    run = client.create_run(exp_id, tags=tags, run_name="summary")
    run_id = run.info.run_id
    try:
        metrics: list[Any] = []
        now = int(time.time() * 1000)
        for f in map(Path, files):
            if not f.exists():
                raise FileNotFoundError(f"{f}: no such file to log in the summary run")
            if f.is_dir():
                client.log_artifacts(run_id, str(f), artifact_path=f.name)
            else:
                client.log_artifact(run_id, str(f))
            if f.suffix == ".json" and f.is_file():
                metrics += [Metric(k, v, now, 0) for k, v in _significance_metrics(f).items()]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    print(f"MLflow summary run {run_id} at {redact(uri)}")
    return run_id


def _significance_metrics(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError):
        return {}
    out: dict[str, float] = {}
    for backbone, entry in (data.get("backbones") or {}).items() if isinstance(data, dict) else ():
        key = safe_name(backbone)
        for loss, summ in (entry.get("losses") or {}).items():
            for stat in ("mean", "std"):
                value = (summ.get("avg") or {}).get(stat)
                if isinstance(value, (int, float)) and value == value:
                    out[f"{key}.{loss}.avg_{stat}"] = float(value)
        for loss, tests in (entry.get("ttest") or {}).items():
            p = ((tests or {}).get("avg") or {}).get("p_value")
            if isinstance(p, (int, float)) and p == p:
                out[f"{key}.{loss}.ttest_avg_p"] = float(p)
    return out
