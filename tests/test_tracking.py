"""MLflow tracking: where runs go, failing fast on a dead server, and what the train / evaluate stages
log (checked back through ``MlflowClient``), on the tiny config in a throw-away copy of the repo."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from focalcse.config import ConfigError, Params, load_params
from focalcse.ops import tracking
from focalcse.testing.project import make_tiny_project, project_env, run, save_tiny_backbone

REPO = Path(__file__).resolve().parents[1]
TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- fast: configuration
def test_default_uri_is_sqlite_at_the_repo_root(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "elsewhere"))  # DVC's stage env (queued experiments)
    assert tracking.tracking_uri() == f"sqlite:///{(tmp_path / 'elsewhere').resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking.tracking_uri() == "http://127.0.0.1:5000"


def test_redact_hides_credentials() -> None:
    assert (
        tracking.redact("https://bob:s3cret@mlflow.example.com:8443/x")
        == "https://***@mlflow.example.com:8443/x"
    )
    assert tracking.redact("http://h/?token=abc123") == "http://h/?token=***"
    assert tracking.redact("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


def test_dead_server_is_reported_in_seconds_naming_the_uri() -> None:
    uri = f"http://127.0.0.1:{_free_port()}"
    start = time.perf_counter()
    with pytest.raises(tracking.TrackingUnavailableError, match=uri.replace(".", r"\.")):
        tracking.check_tracking_uri(uri)
    assert time.perf_counter() - start < 5


def test_experiment_name_and_params_hash() -> None:
    params = load_params(REPO / "params.yaml")
    assert tracking.experiment_name(params) == params.raw["tracking"]["experiment"]
    other = Params(raw={**params.raw, "train": {**params.raw["train"], "lr": 1.0}})
    assert tracking.params_hash(params) != tracking.params_hash(other)
    assert tracking.params_hash(params) == tracking.params_hash(load_params(REPO / "params.yaml"))


def test_tracking_section_is_validated_on_load(tmp_path) -> None:
    import yaml

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for section, match in (
        ({"experiment": ""}, "tracking.experiment"),
        ({"experiment": "x", "uri": "u"}, "unknown key"),
    ):
        path = tmp_path / "params.yaml"
        path.write_text(yaml.safe_dump({**raw, "tracking": section}))
        with pytest.raises(ConfigError, match=match):
            load_params(path)


def test_tracking_off_touches_nothing(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FOCALCSE_TRACKING", "off")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")  # would fail if contacted
    params = load_params(REPO / "params.yaml")
    with tracking.train_run(params, "all-MiniLM-L6-v2", "infonce", 1) as run:
        run.log_metrics({"loss": 1.0}, 1)
        run.finish({}, tmp_path)
    assert tracking.log_summary_run(params, [tmp_path]) is None


def test_the_run_opens_beside_the_body_and_its_error_surfaces_at_the_first_step(
    monkeypatch, tmp_path
) -> None:
    """The run is opened by a background thread; the first log_metrics waits for it. An opening that
    fails raises its own error there; a body that fails first keeps its error."""
    from focalcse.ops.tracking import runs

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    params = load_params(REPO / "params.yaml")
    calls = []

    def failing_open(*args, **kwargs):
        time.sleep(0.2)  # the body runs meanwhile
        calls.append("opened")
        raise ConnectionRefusedError("store refused")

    monkeypatch.setattr(runs, "_open_train_run", failing_open)
    item = ("all-MiniLM-L6-v2", "infonce", 1)
    with (
        pytest.raises(ConnectionRefusedError, match="store refused"),
        tracking.train_run(params, *item) as run,
    ):
        assert calls == []  # not opened yet: the body (model loading) goes on beside it
        run.log_metrics({"loss": 1.0}, 1)
    with pytest.raises(ValueError, match="the body's own"), tracking.train_run(params, *item):
        raise ValueError("the body's own error")
    assert calls == ["opened", "opened"]


def test_eval_metrics_and_flatten() -> None:
    result = {t: float(i) for i, t in enumerate(TASKS)} | {
        "avg": 3.0,
        "wmean": {"avg": 2.5},
        "alignment": 0.1,
    }
    m = tracking.eval_metrics(result)
    assert [k for k in m if k in TASKS] == TASKS and m["sts_avg"] == 3.0 and m["wmean_avg"] == 2.5
    assert "uniformity" not in m
    assert tracking.flatten({"a": {"b": 1, "c": [1, 2]}}) == {"a.b": "1", "a.c": "[1, 2]"}


# ---------------------------------------------------------------- slow: the real stages
@pytest.fixture(scope="module")
def project(tmp_path_factory, data_mirror) -> Path:
    model = save_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny")
    return make_tiny_project(
        tmp_path_factory.mktemp("trk") / "repo",
        data_mirror,
        model,
        # (ablation.loss, focal_infonce, must be a swept loss; only infonce is trained here)
        sweep={"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1]},
    )


@pytest.mark.slow
def test_train_and_evaluate_fill_one_run(project: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from focalcse.core.encode import encode
    from focalcse.core.model import SentenceEncoder

    env = project_env(project)  # MLFLOW_TRACKING_URI = sqlite:///<copy>/mlflow.db
    run(["dvc", "repro", "evaluate@simcse-tiny-infonce-1"], project, env)
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("tiny")
    assert exp is not None and exp.artifact_location == (project / "mlartifacts").as_uri()
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    r = runs[0]
    assert r.info.status == "FINISHED" and r.info.run_name == "simcse-tiny-infonce-seed1"
    tags = r.data.tags
    assert (tags["backbone"], tags["loss"], tags["seed"]) == ("tiny", "infonce", "1")
    assert (
        tags["dvc_stage"] == "train@simcse-tiny-infonce-1"
        and tags["dvc_stage_evaluate"] == "evaluate@simcse-tiny-infonce-1"
    )
    assert len(tags["params_hash"]) == 12 and len(tags["git_commit"]) >= 40
    assert r.data.params["train.loss"] == "infonce" and r.data.params["train.batch_size"] == "32"
    assert r.data.params["train.temperature"] == "0.05" and r.data.params["eval.tasks"].startswith('["STS12"')
    # the logged train config is exactly what `focalcse config` prints for the item
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "focalcse.cli",
            "config",
            "--backbone",
            "tiny",
            "--loss",
            "infonce",
            "--seed",
            "1",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    logged = {k: v for k, v in r.data.params.items() if k.startswith("train.")}
    assert logged == tracking.flatten(json.loads(shown), "train.")

    train = json.loads((project / "metrics/train/simcse-tiny-infonce-seed1.json").read_text())
    loss = client.get_metric_history(r.info.run_id, "loss")
    assert [m.step for m in loss] == list(range(1, train["steps"] + 1))
    curve = json.loads((project / "metrics/curves/loss/simcse-tiny-infonce-seed1.json").read_text())
    assert [m.value for m in loss] == pytest.approx([c["loss"] for c in curve])
    assert len(client.get_metric_history(r.info.run_id, "lr")) == train["steps"]
    grad_norm = client.get_metric_history(r.info.run_id, "grad_norm")  # pre-clip, every step
    assert [m.value for m in grad_norm] == pytest.approx([c["grad_norm"] for c in curve])
    assert len(grad_norm) == train["steps"]
    dev = client.get_metric_history(r.info.run_id, "stsb_dev_spearman")
    assert [m.step for m in dev] == [0, 3, 6]
    metrics = r.data.metrics
    assert metrics["best_step"] == train["best_step"] and metrics["sentences_per_second"] > 0
    assert metrics["wall_seconds"] == pytest.approx(train["wall_seconds"])
    ev = json.loads((project / "metrics/eval/simcse-tiny-infonce-seed1.json").read_text())
    assert {t: metrics[t] for t in TASKS} == pytest.approx({t: ev[t] for t in TASKS})
    assert metrics["sts_avg"] == pytest.approx(ev["avg"])

    # the model artifact loads back and encodes exactly as the DVC output folder does
    downloaded = client.download_artifacts(r.info.run_id, "model", dst_path=str(tmp_path))
    assert tracking.folder_fingerprint(downloaded) == tags["model_sha256"]
    sentences = ["a man is playing a guitar", "two dogs run in the park"]
    got = encode(SentenceEncoder.from_pretrained(downloaded), sentences)
    want = encode(SentenceEncoder.from_pretrained(project / "models/simcse/tiny/infonce/seed1"), sentences)
    assert torch.equal(got, want)
    # ... and is the run's MLflow (sentence-transformers) model, under "Logged models"
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    (logged,) = r.outputs.model_outputs
    model = client.get_logged_model(logged.model_id)
    assert model.source_run_id == r.info.run_id
    # in the run's experiment (its "Logged models" tab), with artifacts under its artifact location
    assert model.experiment_id == exp.experiment_id
    assert [m.model_id for m in client.search_logged_models([exp.experiment_id])] == [logged.model_id]
    assert model.artifact_location.startswith(exp.artifact_location)
    artifacts = {a.path for a in client.list_artifacts(r.info.run_id, "metrics")}
    assert "metrics/simcse-tiny-infonce-seed1.json" in artifacts


@pytest.mark.slow
def test_summary_run_logs_files_and_significance(project: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", project_env(project)["MLFLOW_TRACKING_URI"])
    params = load_params(project / "params.yaml")
    out = project / "summary-test"
    out.mkdir()
    sig = {
        "backbones": {
            "tiny": {
                "losses": {"infonce": {"avg": {"mean": 30.0, "std": 1.0}}},
                "ttest": {"focal_infonce": {"avg": {"p_value": 0.2}}},
            }
        }
    }
    (out / "significance.json").write_text(json.dumps(sig))
    (out / "table2.md").write_text("| a |\n")
    (out / "figures").mkdir()
    (out / "figures" / "fig1.png").write_bytes(b"\x89PNG\r\n")
    run_id = tracking.log_summary_run(params, [out / "significance.json", out / "table2.md", out / "figures"])
    client = MlflowClient(project_env(project)["MLFLOW_TRACKING_URI"])
    r = client.get_run(run_id)
    assert (
        r.info.status == "FINISHED"
        and r.info.run_name == "summary"
        and r.data.tags["focalcse_stage"] == "summary"
    )
    assert r.data.metrics == {
        "tiny.infonce.avg_mean": 30.0,
        "tiny.infonce.avg_std": 1.0,
        "tiny.focal_infonce.ttest_avg_p": 0.2,
    }
    paths = {a.path for a in client.list_artifacts(run_id)} | {
        a.path for a in client.list_artifacts(run_id, "figures")
    }
    assert {"significance.json", "table2.md", "figures/fig1.png"} <= paths
