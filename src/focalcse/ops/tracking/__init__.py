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
also for queued experiments running in a temporary copy). An ``http(s)`` server is checked up front:
the evaluate and report stages fail in seconds, before any work, when it is unreachable; a train item
trains on and queues its whole run (created by ``focalcse tracking sync``).
``FOCALCSE_TRACKING=off`` disables tracking.

The package, one job per module: ``store`` (where runs go: the URI, its check, the experiment, the
tags), ``process`` (whose process a run is, and whether it is gone), ``inputs`` (the dataset inputs),
``queue`` (the local journal, sending it, ending dead runs), ``models`` (a train run's MLflow model,
in the flavour its folder loads with; ``pyfunc``, the ``python_function`` model, is imported only to
log or load one), ``runs`` (train runs and their background sender) and ``stages`` (what the evaluate and report stages log). Tracking observes: no stage's DVC
deps list it (``focalcse.ops.dvc_yaml``), and ``tests/test_tracking_outputs.py`` shows it changes no output.
"""

from __future__ import annotations

from focalcse.errors import TrackingUnavailableError  # re-exported: importers find it here
from focalcse.ops.tracking.inputs import (
    DATASET_CONTEXT_TAG,
    dvc_md5,
    input_datasets,
)
from focalcse.ops.tracking.models import (
    PYTHON_FUNCTION,
    SENTENCE_TRANSFORMERS,
    log_model,
    model_flavour,
    sentence_transformers_folder,
)
from focalcse.ops.tracking.process import (
    IDENTITY_KEYS,
    identity_tags,
    process_gone,
    process_identity,
)
from focalcse.ops.tracking.queue import (
    CLOSE_TIMEOUT_S,
    RUN_FILE,
    queue_dir,
    read_queue,
    reap,
    split_queue,
    sync,
    sync_records,
)
from focalcse.ops.tracking.runs import (
    TrainRun,
    _kill_stale,
    train_run,
)
from focalcse.ops.tracking.stages import (
    eval_metrics,
    find_train_run,
    log_evaluation,
    log_summary_run,
)
from focalcse.ops.tracking.store import (
    CHECK_TIMEOUT_S,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    FLUSH_SECONDS,
    HTTP_MAX_RETRIES,
    HTTP_TIMEOUT_S,
    check_tracking_uri,
    client_and_experiment,
    enabled,
    experiment_name,
    flatten,
    folder_fingerprint,
    params_hash,
    redact,
    repo_root,
    source_tags,
    tracking_uri,
)

__all__ = [
    "TrackingUnavailableError",
    "CHECK_TIMEOUT_S",
    "FLUSH_SECONDS",
    "EXPERIMENT_KIND_TAG",
    "EXPERIMENT_KIND",
    "HTTP_TIMEOUT_S",
    "HTTP_MAX_RETRIES",
    "enabled",
    "repo_root",
    "tracking_uri",
    "redact",
    "check_tracking_uri",
    "experiment_name",
    "params_hash",
    "folder_fingerprint",
    "flatten",
    "client_and_experiment",
    "source_tags",
    "IDENTITY_KEYS",
    "process_identity",
    "identity_tags",
    "process_gone",
    "DATASET_CONTEXT_TAG",
    "dvc_md5",
    "input_datasets",
    "CLOSE_TIMEOUT_S",
    "RUN_FILE",
    "queue_dir",
    "read_queue",
    "split_queue",
    "sync_records",
    "reap",
    "sync",
    "TrainRun",
    "sentence_transformers_folder",
    "model_flavour",
    "log_model",
    "SENTENCE_TRANSFORMERS",
    "PYTHON_FUNCTION",
    "_kill_stale",
    "train_run",
    "eval_metrics",
    "find_train_run",
    "log_evaluation",
    "log_summary_run",
]
