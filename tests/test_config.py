"""params.yaml validation: every committed parameter set loads; every rule names key, value and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from focalcse.config import ConfigError, load_params
from focalcse.core.losses import loss_names

LOSSES = ", ".join(loss_names())  # as the registry lists them

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "path", ["params.yaml", *[str(p.relative_to(REPO)) for p in sorted((REPO / "params").glob("*.yaml"))]]
)
def test_committed_parameter_sets_load(path: str) -> None:
    params = load_params(REPO / path)
    for backbone in params.sweep.backbones:
        for loss in params.sweep.losses:
            cfg = params.train_config(backbone, loss, params.sweep.seeds[0])
            assert cfg.loss == loss


def test_paper_set_has_the_method_md_settings() -> None:
    p = load_params(REPO / "params/paper.yaml")
    assert p.data.num_sentences == 1_000_000 and p.train.hyper_value("m") == 0.3 and p.train.eval_steps == 125
    assert len(p.sweep.seeds) >= 3
    expect = {
        "bert-base-uncased": (64, 3e-5),
        "bert-large-uncased": (64, 1e-5),
        "roberta-base": (512, 1e-5),
        "roberta-large": (512, 3e-5),
    }
    for backbone, (bs, lr) in expect.items():
        cfg = p.train_config(backbone, "focal_infonce", 1)
        assert (cfg.batch_size, cfg.lr, cfg.epochs, cfg.max_seq_len) == (bs, lr, 1, 32)


def _write(tmp_path: Path, section: str, key: str, value) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params.setdefault(section, {})[key] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


BAD = [
    ("train", "temperature", 0, "> 0"),
    ("train", "temperature", -0.05, "> 0"),
    ("train", "temperature", "hot", "a number"),
    ("train", "m", -0.1, ">= 0"),
    ("train", "batch_size", 1, ">= 2"),
    ("train", "batch_size", 64.5, "an integer"),
    ("train", "lr", 0, "> 0"),
    ("train", "loss", "triplet", LOSSES),
    ("train", "pooler", "max", "cls, cls_before_pooler, avg"),
    ("train", "precision", "int8", "fp32, bf16, fp16"),
    ("train", "epochs", 0, ">= 1"),
    ("train", "eval_steps", 0, ">= 1"),
    ("train", "max_steps", -1, ">= 0"),
    ("train", "max_seq_len", 1, "[2, 4096]"),
    ("train", "checkpoint_steps", -5, ">= 0"),
    ("train", "mlp_only_train", "yes", "true or false"),
    ("train", "device", "tpu", "cpu, cuda"),
    ("train", "learning_rate", 1e-5, "unknown key"),
    ("data", "num_sentences", 1, ">= 2"),
    ("data", "seed", -1, ">= 0"),
    ("sweep", "seeds", [1, 1, 2], "unique"),
    ("sweep", "seeds", [], "non-empty"),
    ("sweep", "seeds", [1, "two"], "integers"),
    ("sweep", "losses", ["infonce", "mse"], f"names from {LOSSES}"),
    ("sweep", "backbones", ["./no/such/folder"], "names of letters"),
    ("eval", "tasks", ["STS12", "STS99"], "subset of STS12"),
    ("eval", "batch_size", 0, ">= 1"),
    ("significance", "alpha", 1.5, "(0, 1)"),
    ("significance", "baseline", "simcse", LOSSES),
]


@pytest.mark.parametrize(
    ("section", "key", "value", "allowed"), BAD, ids=[f"{s}.{k}={v!r}" for s, k, v, _ in BAD]
)
def test_each_rule_names_key_value_and_allowed(
    tmp_path: Path, section: str, key: str, value, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_params(_write(tmp_path, section, key, value))
    msg = str(err.value)
    assert section in msg and key in msg
    assert allowed in msg
    if allowed != "unknown key":  # the whole value, or the offending list element
        assert repr(value) in msg or (isinstance(value, list) and any(repr(v) in msg for v in value))


def test_backbone_source_must_exist(tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["sweep"]["backbones"] = ["mine"]
    params["backbone_overrides"] = {"mine": {"source": str(tmp_path / "missing")}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"backbone_overrides\.mine\.source.*does not exist"):
        load_params(tmp_path / "params.yaml")


def test_backbone_override_values_are_validated(tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["backbone_overrides"] = {"all-MiniLM-L6-v2": {"lr": -1.0}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"lr = -1.0: expected a number > 0"):
        load_params(tmp_path / "params.yaml")


def test_unknown_section_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("trian: {lr: 1}\n")
    with pytest.raises(ConfigError, match=r"unknown section\(s\) \['trian'\]"):
        load_params(tmp_path / "params.yaml")
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_a_stage_fails_before_any_work_on_a_bad_value(tmp_path: Path) -> None:
    bad = _write(tmp_path, "train", "temperature", 0)
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages/sample.py")],
        cwd=tmp_path,
        env={"FOCALCSE_PARAMS": str(bad), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "train.temperature = 0: expected a number > 0" in proc.stderr
    assert not (tmp_path / "data").exists()
