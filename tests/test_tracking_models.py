"""A train run's MLflow model: the flavour comes from the folder (sentence-transformers for a folder it
loads as evaluated, ``python_function`` for a PromptBERT folder), and the ``python_function`` model
predicts the vectors the project evaluates with. Tiny random folders saved by the project's code, a
sqlite store in a temporary folder, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from focalcse.config import load_params
from focalcse.core.encode import encode
from focalcse.core.frameworks.promptbert import PromptEncoder
from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig
from focalcse.core.model import SentenceEncoder
from focalcse.ops import tracking
from focalcse.ops.tracking.pyfunc import sentences_of
from focalcse.testing.project import save_tiny_backbone

REPO = Path(__file__).resolve().parents[1]
# a repeat, and sentences that get no period ("?", a closing quote) in PromptBERT's template
SENTENCES = ["a man is playing a guitar", "is it raining?", 'he said "no"', "two dogs run", "two dogs run"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A bare HF backbone, a PromptBERT folder (denoised evaluation) and a SimCSE folder from it."""
    root = tmp_path_factory.mktemp("models")
    backbone = save_tiny_backbone(root / "backbone")
    prompt = PromptEncoder.from_pretrained_backbone(
        str(backbone), PromptBERTConfig(eval_denoise=True), pooler="cls", seed=0
    )
    simcse = SentenceEncoder.from_pretrained(str(backbone), pooler="cls", seed=0)
    return {
        "backbone": backbone,
        "promptbert": prompt.save(root / "promptbert"),
        "simcse": simcse.save(root / "simcse"),
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(uri, client, experiment id)`` of a sqlite store with its artifacts beside it; MLflow's
    process-wide URI and experiment (set by ``log_model``) are put back afterwards."""
    import mlflow
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
            mp.delenv(var, raising=False)
        client = MlflowClient(uri)
        exp = client.create_experiment("models", artifact_location=(root / "artifacts").as_uri())
        yield uri, client, exp
        mlflow.set_tracking_uri(None)
        mlflow.tracking.fluent._active_experiment_id = None


def _logged(store, folder: Path, register: str):
    """Log ``folder`` into a fresh run of the store: ``(ModelInfo, run, logged model)``."""
    uri, client, exp = store
    run = client.create_run(exp, run_name=folder.name)
    info = tracking.log_model(uri, run.info.run_id, folder, register=register)
    run = client.get_run(run.info.run_id)
    return info, run, client.get_logged_model(info.model_id)


def test_the_flavour_is_read_from_the_folder(folders) -> None:
    assert tracking.model_flavour(folders["simcse"]) == tracking.SENTENCE_TRANSFORMERS
    assert tracking.model_flavour(folders["promptbert"]) == tracking.PYTHON_FUNCTION
    assert tracking.model_flavour(folders["backbone"]) is None  # no focalcse.json: files only
    with pytest.raises(ValueError, match="not a model folder"):
        tracking.log_model("sqlite:///unused.db", "no-run", folders["backbone"])


def test_sentences_of_each_input_form() -> None:
    want = ["a b", "c"]
    for given in (want, tuple(want), pd.Series(want), np.array(want), pd.DataFrame({"s": want})):
        assert sentences_of(given) == want
    assert sentences_of("one") == ["one"]
    with pytest.raises(ValueError, match=r"columns \['a', 'b'\]"):
        sentences_of(pd.DataFrame({"a": want, "b": want}))
    with pytest.raises(ValueError, match="int 3"):
        sentences_of(["x", 3])
    with pytest.raises(ValueError, match="got dict"):
        sentences_of({"x": 1})


def test_promptbert_logs_a_python_function_model_with_the_evaluated_vectors(folders, store, tmp_path) -> None:
    import mlflow
    from mlflow.models import Model

    info, run, model = _logged(store, folders["promptbert"], register="tiny-promptbert")
    assert set(info.flavors) == {"python_function"}
    # the run's "Logged models" (the runs table's Models column), in the run's experiment, registered
    assert [o.model_id for o in run.outputs.model_outputs] == [info.model_id]
    assert (model.name, model.source_run_id, model.experiment_id) == (
        "focalcse_encoder",
        run.info.run_id,
        run.info.experiment_id,
    )
    assert model.artifact_location.startswith(store[1].get_experiment(store[2]).artifact_location)
    (version,) = store[1].search_model_versions("name = 'tiny-promptbert'")
    assert version.source == f"models:/{info.model_id}" and version.run_id == run.info.run_id
    sig = info.signature.to_dict()
    assert json.loads(sig["inputs"]) == [{"type": "string", "required": True}]
    assert json.loads(sig["outputs"]) == [
        {"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 32]}}
    ]

    # what the project evaluates with: the folder through SentenceEncoder.from_pretrained and encode()
    want = encode(SentenceEncoder.from_pretrained(folders["promptbert"]), SENTENCES).numpy()
    loaded = mlflow.pyfunc.load_model(f"models:/{info.model_id}")
    assert isinstance(loaded.unwrap_python_model().encoder, PromptEncoder)
    for given in (SENTENCES, pd.Series(SENTENCES), pd.DataFrame({"sentence": SENTENCES})):
        got = loaded.predict(given)
        assert got.dtype == np.float32 and got.shape == (len(SENTENCES), 32)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert not np.allclose(want[0], want[1])  # the vectors tell sentences apart

    # the downloaded model is self-contained: the folder, the package's code, the requirements
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{info.model_id}", dst_path=str(tmp_path)))
    assert (local / "artifacts" / "promptbert" / "focalcse.json").is_file()
    assert (local / "code" / "focalcse" / "core" / "model.py").is_file()
    assert not list((local / "code").rglob("__pycache__"))
    reqs = (local / "requirements.txt").read_text().split()
    assert {r.split("==")[0] for r in reqs} >= {"mlflow", "torch", "transformers"}
    assert Model.load(str(local)).flavors["python_function"]["loader_module"] == "mlflow.pyfunc.model"

    # ... and loads from its own code in a fresh process, ahead of any installed focalcse (this
    # environment's editable install of another checkout included)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = (
        "import json, sys, mlflow.pyfunc\n"
        "m = mlflow.pyfunc.load_model(sys.argv[1])\n"
        "import focalcse\n"
        "print(json.dumps({'file': focalcse.__file__, 'v': m.predict(json.loads(sys.argv[2])).tolist()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(local), json.dumps(SENTENCES)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    shown = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(shown["file"]).is_relative_to(local / "code")
    np.testing.assert_allclose(np.array(shown["v"], dtype=np.float32), want, rtol=0, atol=1e-6)


def test_a_sentence_transformers_folder_still_logs_that_flavour(folders, store) -> None:
    import mlflow.sentence_transformers

    info, run, model = _logged(store, folders["simcse"], register="tiny-simcse")
    assert "sentence_transformers" in info.flavors
    assert [o.model_id for o in run.outputs.model_outputs] == [info.model_id]
    assert (model.name, model.source_run_id) == ("sentence_transformer", run.info.run_id)
    (version,) = store[1].search_model_versions("name = 'tiny-simcse'")
    assert version.source == f"models:/{info.model_id}" and version.run_id == run.info.run_id
    st = mlflow.sentence_transformers.load_model(f"models:/{info.model_id}")
    want = encode(SentenceEncoder.from_pretrained(folders["simcse"]), SENTENCES).numpy()
    np.testing.assert_allclose(st.encode(SENTENCES), want, rtol=0, atol=1e-5)


def test_a_promptbert_train_run_finishes_with_its_python_function_model(
    folders, store, monkeypatch, tmp_path
) -> None:
    """``TrainRun.finish`` (what the train stage calls) logs the folder's model, registered under
    ``FOCALCSE_REGISTER_MODEL``, beside the folder's files."""
    uri, client, _ = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))  # the local queue goes there
    monkeypatch.setenv("FOCALCSE_REGISTER_MODEL", "tiny-promptbert-run")
    params = load_params(REPO / "params.yaml")
    with tracking.train_run(params, "all-MiniLM-L6-v2", "infonce", 1, framework="promptbert") as run:
        run.log_metrics({"loss": 1.0}, 1)
        run.finish({"steps": 1}, folders["promptbert"])
    r = client.get_run(run.run_id)
    assert r.info.status == "FINISHED" and r.data.tags["model_sha256"]
    (out,) = r.outputs.model_outputs
    model = client.get_logged_model(out.model_id)
    assert (model.name, model.source_run_id) == ("focalcse_encoder", run.run_id)
    assert "model/focalcse.json" in {a.path for a in client.list_artifacts(run.run_id, "model")}
    (version,) = client.search_model_versions("name = 'tiny-promptbert-run'")
    assert version.source == f"models:/{out.model_id}"
