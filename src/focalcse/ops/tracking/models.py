"""A train run's MLflow model (its "Logged models"), in the flavour its folder can be loaded with.

A folder that ``SentenceTransformer(folder)`` builds as evaluated (SimCSE's, DiffCSE's: their
``modules.json`` names sentence-transformers modules only) is a ``sentence_transformers`` model. A
folder saved by this project that sentence-transformers cannot load (PromptBERT's ``modules.json``
names a refusing module) is a ``python_function`` model (:class:`focalcse.ops.tracking.pyfunc.EncoderModel`)
that loads the folder with the project's own loader. Both get the same run, registered name and
requirements; the choice is read from the folder, never from a framework's name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

SENTENCE_TRANSFORMERS = "sentence_transformers"
PYTHON_FUNCTION = "python_function"
# the logged model's name (its "Logged models" row) per flavour
MODEL_NAMES = {SENTENCE_TRANSFORMERS: "sentence_transformer", PYTHON_FUNCTION: "focalcse_encoder"}


def sentence_transformers_folder(model_dir: str | os.PathLike) -> bool:
    """Whether ``SentenceTransformer(model_dir)`` builds the model as evaluated: every module its
    ``modules.json`` names is a sentence-transformers one (a PromptBERT folder names a refusing module)."""
    f = Path(model_dir) / "modules.json"
    if not f.is_file():
        return False
    return all(str(m.get("type", "")).startswith("sentence_transformers.") for m in json.loads(f.read_text()))


def model_flavour(model_dir: str | os.PathLike) -> str | None:
    """The MLflow flavour ``model_dir`` is logged as: :data:`SENTENCE_TRANSFORMERS` when
    sentence-transformers loads it as evaluated, else :data:`PYTHON_FUNCTION` when this project saved
    it (it has a ``focalcse.json``), else None (not a model folder: its files only)."""
    from focalcse.core.model import RECORD_FILE

    if sentence_transformers_folder(model_dir):
        return SENTENCE_TRANSFORMERS
    if (Path(model_dir) / RECORD_FILE).is_file():
        return PYTHON_FUNCTION
    return None


def _requirements(*packages: str) -> list[str]:
    """``package==version`` of each installed package (no requirement inference: MLflow's re-loads
    the model in a subprocess); torch without its local build tag (``+cpu``)."""
    from importlib.metadata import version

    return [f"{p}=={version(p).split('+')[0]}" for p in packages]


def _package_copy(dest: Path) -> Path:
    """A copy of the installed ``focalcse`` package's code in ``dest`` (no byte-code caches): the
    ``python_function`` model's ``code_paths``, so it loads where focalcse is not installed."""
    import focalcse

    src = Path(focalcse.__file__).parent
    return Path(shutil.copytree(src, dest / src.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")))


def _log_python_function(model_dir: Path, common: dict[str, Any]) -> Any:
    import mlflow.pyfunc
    import numpy as np
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, DataType, Schema, TensorSpec
    from transformers import AutoConfig

    from focalcse.ops.tracking.pyfunc import ARTIFACT, EncoderModel

    hidden = int(AutoConfig.from_pretrained(model_dir).hidden_size)
    signature = ModelSignature(
        inputs=Schema([ColSpec(DataType.string)]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, hidden))]),
    )
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # the signature is given; an input example would load and run the model once more to check it
        warnings.filterwarnings("ignore", message=".*An input example was not provided")
        # Model.log is what mlflow.pyfunc.log_model calls, with run_id: log_model itself logs only
        # into an active run, and starting one on this run would end it (a queued run: re-end it)
        return Model.log(
            artifact_path=None,
            flavor=mlflow.pyfunc,
            python_model=EncoderModel(),
            artifacts={ARTIFACT: str(model_dir)},
            code_paths=[str(_package_copy(Path(tmp)))],
            signature=signature,
            pip_requirements=_requirements("transformers", "torch"),
            **common,
        )


def _log_sentence_transformers(model_dir: Path, common: dict[str, Any]) -> Any:
    import mlflow.sentence_transformers
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    reqs = _requirements("sentence-transformers", "transformers", "torch")
    return mlflow.sentence_transformers.log_model(model, pip_requirements=reqs, **common)


def log_model(uri: str, run_id: str, model_dir: str | os.PathLike, register: str | None = None) -> Any:
    """Log ``model_dir`` as the MLflow model of run ``run_id`` (its "Logged models"), in the flavour
    :func:`model_flavour` gives; registered as ``register`` (env ``FOCALCSE_REGISTER_MODEL``) when
    set. Returns MLflow's ``ModelInfo``."""
    import mlflow

    model_dir = Path(model_dir)
    flavour = model_flavour(model_dir)
    if flavour is None:
        raise ValueError(
            f"{model_dir}: no modules.json of sentence-transformers and no focalcse.json; not a model folder"
        )
    mlflow.set_tracking_uri(uri)
    # The logged model belongs to the active experiment, not the run's (MLflow 3): without this it
    # lands in "Default", with its artifacts under ./mlruns, and the run's experiment shows none.
    mlflow.set_experiment(experiment_id=mlflow.MlflowClient(uri).get_run(run_id).info.experiment_id)
    common = {"name": MODEL_NAMES[flavour], "run_id": run_id, "registered_model_name": register or None}
    if flavour == SENTENCE_TRANSFORMERS:
        return _log_sentence_transformers(model_dir, common)
    return _log_python_function(model_dir, common)
