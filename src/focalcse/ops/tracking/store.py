"""Where runs go and how a stage reaches them: the tracking URI, its health check, the experiment
of a parameter set, the tags every run carries."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.errors import TrackingUnavailableError
from focalcse.layout import Layout

CHECK_TIMEOUT_S = 3.0
FLUSH_SECONDS = 5.0  # buffered per-step metrics reach the store at least this often
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch
# MLflow 3 opens an experiment of this kind on its runs (not the GenAI traces page)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
HTTP_TIMEOUT_S = "10"  # per request, for the stages' MLflow clients (MLflow's default: 120 s)
HTTP_MAX_RETRIES = "1"  # MLflow's default: 7 with exponential backoff (minutes on a dead server)


# ---------------------------------------------------------------- where
def enabled() -> bool:
    return os.environ.get("FOCALCSE_TRACKING", "on").strip().lower() not in ("off", "0", "false", "no")


def repo_root(start: str | os.PathLike | None = None) -> Path:
    """``DVC_ROOT`` if set (DVC sets it for stage commands), else the nearest folder at or above
    ``start`` (default: cwd) holding ``.dvc``, else one holding ``dvc.yaml``, else ``start``: a set's
    folder (``sets/<name>/``, with a ``dvc.yaml`` of its own) shares its checkout's store."""
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    here = Path(start or os.getcwd()).resolve()
    for marker in (".dvc", "dvc.yaml"):
        for folder in (here, *here.parents):
            if (folder / marker).exists():
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
def _short_http() -> None:
    """Short timeouts and few retries for MLflow's HTTP client (unless the user set them)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_MAX_RETRIES)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")


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
    with _store_lock(uri):  # (a sqlite store's tables are made on first use)
        client = MlflowClient(tracking_uri=uri)
    return client, experiment_id(client, uri, experiment_name(params)), uri


SERVER_ARTIFACTS = "mlflow-artifacts:"  # what an MLflow server with --artifacts-destination hands out


def artifact_location(uri: str) -> str | None:
    """Where the experiments this project creates keep their artifacts: the ``mlartifacts`` folder
    beside a sqlite store, and the repository's ``mlartifacts`` for a server on this machine (the
    folder ``make mlflow-ui`` serves with ``--artifacts-destination``), so runs logged through either
    can be written by the other. A remote server keeps its own default (None)."""
    if uri.startswith("sqlite:///"):  # absolute, so runs from any cwd (or DVC temp copy) agree
        return Layout.at(_sqlite_path(uri).parent).mlflow_artifacts.as_uri()
    host = urllib.parse.urlsplit(uri).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        return Layout.at(repo_root()).mlflow_artifacts.as_uri()
    return None


def _local(location: str, folder: str) -> str:
    """``mlflow-artifacts:/<path>`` (or ``mlflow-artifacts://host:port/<path>``) as the file URI where
    a server started with ``--artifacts-destination <folder>`` keeps it: ``<folder>/<path>``."""
    rest = location[len(SERVER_ARTIFACTS) :]
    if rest.startswith("//"):
        rest = "/" + rest[2:].split("/", 1)[-1]
    return folder.rstrip("/") + "/" + rest.lstrip("/")


def repin_server_artifacts(uri: str) -> int:
    """Point every experiment, run and logged model of the sqlite store ``uri`` that an MLflow server
    gave an ``mlflow-artifacts:`` location (``make mlflow-ui``: a client of the sqlite file cannot
    write there) at the file it stands for under the store's ``mlartifacts`` folder, which is where
    that server keeps it, so the server still serves the old artifacts and a direct client writes the
    new ones. Returns how many rows moved. MLflow has no API to change an artifact location, so the
    store's tables are updated in one transaction."""
    import sqlite3

    folder = artifact_location(uri)
    db = _sqlite_path(uri)
    if folder is None or not db.is_file():
        return 0
    moved = 0
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        for table, column, key in (
            ("experiments", "artifact_location", "experiment_id"),
            ("runs", "artifact_uri", "run_uuid"),
            ("logged_models", "artifact_location", "model_id"),
        ):
            if table not in tables:
                continue
            rows = con.execute(
                f"select {key}, {column} from {table} where {column} like ?", (SERVER_ARTIFACTS + "%",)
            ).fetchall()
            for ident, location in rows:
                con.execute(
                    f"update {table} set {column} = ? where {key} = ?", (_local(location, folder), ident)
                )
            moved += len(rows)
    return moved


def experiment_id(client: Any, uri: str, name: str) -> str:
    """The id of experiment ``name`` in the store ``uri`` that ``client`` talks to; created (tagged
    with its kind, its artifacts where :func:`artifact_location` says) if missing. On a sqlite store,
    an experiment an MLflow server made (an ``mlflow-artifacts:`` location) is first re-pointed at the
    folder that server keeps its artifacts in (:func:`repin_server_artifacts`)."""
    with _store_lock(uri):
        exp = client.get_experiment_by_name(name)
        if (
            exp is not None
            and uri.startswith("sqlite:///")
            and exp.artifact_location.startswith(SERVER_ARTIFACTS)
        ):
            moved = repin_server_artifacts(uri)
            print(
                f"MLflow: experiment {name!r} had the server location {exp.artifact_location}; {moved} "
                f"artifact locations of {redact(uri)} now point at {artifact_location(uri)}, the folder "
                "`make mlflow-ui` serves",
                file=sys.stderr,
            )
            exp = client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        return client.create_experiment(
            name,
            artifact_location=artifact_location(uri),
            tags={"param_set": name, EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
        )


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
