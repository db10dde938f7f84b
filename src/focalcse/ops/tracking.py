"""MLflow tracking for the train / evaluate / report stages (mlflow is imported inside functions).

One experiment per parameter set (``tracking.experiment``). One run per train matrix item
(backbone × loss × seed): parameters, per-step ``loss`` and ``lr``, ``stsb_dev_spearman`` at each
evaluation, best step, wall time and throughput, the model folder as the ``model`` artifact; the
evaluate stage then adds the 7 STS scores to the *same* run, found by the model folder's fingerprint
(tag ``model_sha256``), so one row of the MLflow table is one backbone × loss × seed with its scores.

Where: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlflow.db`` with artifacts in
``<repo root>/mlartifacts`` (the repo root is ``DVC_ROOT``, which DVC sets for every stage command,
also for queued experiments running in a temporary copy). An ``http(s)`` server is checked up front
so a stage fails in seconds, before any training, when it is unreachable.
``FOCALCSE_TRACKING=off`` disables tracking.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.data.tasks import TASKS
from focalcse.layout import Layout, run_name, safe_name, stage_name

CHECK_TIMEOUT_S = 3.0
FLUSH_SECONDS = 5.0  # buffered per-step metrics reach the store at least this often
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch


class TrackingUnavailableError(ConnectionError):
    """The tracking server cannot be reached (transient: stages exit with EX_TEMPFAIL)."""


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
    name = experiment_name(params)
    with _store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return client, exp.experiment_id, uri
        location = None
        if uri.startswith("sqlite:///"):  # absolute, so runs from any cwd (or DVC temp copy) agree
            location = Layout.at(_sqlite_path(uri).parent).mlflow_artifacts.as_uri()
        exp_id = client.create_experiment(name, artifact_location=location, tags={"param_set": name})
        return client, exp_id, uri


def _base_tags(params: Params, stage: str) -> dict[str, str]:
    from focalcse.provenance import git_commit

    tags = {
        "param_set": experiment_name(params),
        "params_hash": params_hash(params),
        "git_commit": git_commit(),  # the stage's workspace (a queued experiment's own checkout)
        "dvc_stage": os.environ.get("DVC_STAGE", stage),
    }
    if os.environ.get("DVC_EXP_NAME"):  # set by `dvc exp run` for each experiment
        tags["dvc_experiment"] = os.environ["DVC_EXP_NAME"]
    return tags


# ---------------------------------------------------------------- train runs
class TrainRun:
    """An open MLflow run for one train matrix item; ``log_metrics`` is the training callback."""

    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self._buffer: list[Any] = []
        self._last_flush = time.monotonic()
        self._warned = False

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Training's ``log_metrics(metrics, step)`` callback: buffered, flushed every few seconds
        and at each dev evaluation. A store error mid-run is reported once and the values kept for the
        next flush (training is not interrupted)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), now, int(step)) for k, v in metrics.items())
        if "stsb_dev_spearman" in metrics or time.monotonic() - self._last_flush > FLUSH_SECONDS:
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001 - tracking must not kill a training run
                if not self._warned:
                    print(f"warning: MLflow logging failed, will retry: {err}", file=sys.stderr)
                    self._warned = True

    def flush(self) -> None:
        while self._buffer:
            chunk = self._buffer[:_BATCH]
            self.client.log_batch(self.run_id, metrics=chunk)
            del self._buffer[: len(chunk)]
        self._last_flush = time.monotonic()

    def finish(
        self,
        metrics: dict[str, Any],
        model_dir: str | os.PathLike,
        files: Sequence[str | os.PathLike] = (),
    ) -> None:
        """Log the summary metrics, the model folder (artifact ``model``) and ``files`` (``metrics/``),
        and tag the run with the model's fingerprint for the evaluate stage."""
        from mlflow.entities import Metric

        self.flush()
        now = int(time.time() * 1000)
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
        summary = [Metric(k, float(metrics[k]), now, 0) for k in keys if metrics.get(k) is not None]
        self.client.log_batch(self.run_id, metrics=summary)
        self.client.log_artifacts(self.run_id, str(model_dir), artifact_path="model")
        for f in files:
            if Path(f).is_file():
                self.client.log_artifact(self.run_id, str(f), artifact_path="metrics")
        self.client.set_tag(self.run_id, "model_sha256", folder_fingerprint(model_dir))


class _NoRun:
    run_id = None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        return None

    def finish(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextmanager
def train_run(params: Params, backbone: str, loss: str, seed: int) -> Iterator[TrainRun | _NoRun]:
    """Open the MLflow run of one train matrix item (connectivity checked first); it ends FINISHED,
    or FAILED with the error as a tag if the body raises.

    Example::

        with train_run(params, backbone, loss, seed) as run:
            metrics = run_train(..., log_metrics=run.log_metrics)
            run.finish(metrics, model_dir, files=[metrics_file, curve_file, dev_file])
    """
    if not enabled():
        yield _NoRun()
        return
    from mlflow.entities import Param, RunTag

    # ConfigError before touching the store; the same dict `focalcse config` prints
    effective = params.effective_config(backbone, loss, seed)
    client, exp_id, uri = client_and_experiment(params)
    tags = {
        **_base_tags(params, stage_name("train", backbone, loss, seed)),
        "backbone": backbone,
        "loss": loss,
        "seed": str(seed),
        "focalcse_stage": "train",
    }
    run = client.create_run(exp_id, tags=tags, run_name=run_name(backbone, loss, seed))
    run_id = run.info.run_id
    print(f"MLflow run {run_id} in experiment {experiment_name(params)!r} at {redact(uri)}")
    values = {
        **flatten(effective, "train."),
        "backbone": backbone,
        "backbone_source": params.backbone_source(backbone),
        "data.num_sentences": str(params.data.num_sentences),
        "data.seed": str(params.data.seed),
        "dev.batch_size": str(params.eval.batch_size),
    }
    items = [Param(k, v) for k, v in values.items()]
    for i in range(0, len(items), 100):
        client.log_batch(run_id, params=items[i : i + 100])
    tracker = TrainRun(client, run_id)
    try:
        yield tracker
    except BaseException as err:
        try:
            tracker.flush()
            client.log_batch(run_id, tags=[RunTag("error", f"{type(err).__name__}: {err}"[:5000])])
        finally:
            client.set_terminated(
                run_id, status="FAILED" if not isinstance(err, KeyboardInterrupt) else "KILLED"
            )
        raise
    client.set_terminated(run_id, status="FINISHED")


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
) -> str | None:
    """Attach an evaluation to the train run that produced ``model_dir`` (by fingerprint); without
    one (model restored from DVC's cache or a remote), a new run with the same tags. Returns the run id."""
    if not enabled():
        return None
    from mlflow.entities import Metric, Param, RunTag

    client, exp_id, uri = client_and_experiment(params)
    run_id = find_train_run(client, exp_id, model_dir)
    stage = os.environ.get("DVC_STAGE", stage_name("evaluate", backbone, loss, seed))
    tags = {"dvc_stage_evaluate": stage, "evaluated": "true"}
    if run_id is None:
        base = {**_base_tags(params, stage), "backbone": backbone, "loss": loss, "seed": str(seed)}
        run = client.create_run(
            exp_id,
            tags={**base, "focalcse_stage": "evaluate", "linked_train_run": "none"},
            run_name=run_name(backbone, loss, seed),
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
        client.log_artifact(run_id, str(result_file), artifact_path="metrics")
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
    tags = {**_base_tags(params, "report"), "focalcse_stage": "summary"}
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
