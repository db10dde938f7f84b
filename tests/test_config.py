"""params.yaml validation: every committed parameter set loads; every rule names key, value and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from focalcse.config import ConfigError, load_params
from focalcse.core.losses import loss_names
from focalcse.paramsets import load_any

LOSSES = ", ".join(loss_names())  # as the registry lists them

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "path", ["params.yaml", *[str(p.relative_to(REPO)) for p in sorted((REPO / "params").glob("*.yaml"))]]
)
def test_committed_parameter_sets_load(path: str) -> None:
    params = load_any(REPO / path)  # a set under params/ is an overlay on params.yaml
    for backbone in params.sweep.backbones:
        for loss in params.sweep.losses:
            cfg = params.train_config(backbone, loss, params.sweep.seeds[0])
            assert cfg.loss == loss


# method.md: batch / lr per backbone; InfoNCE (SimCSE) at 0.05 everywhere; Focal-InfoNCE at the
# paper's printed {0.7, 0.7, 0.5, 0.5} read as 0.07/0.07/0.05/0.05 (paper.yaml) or 0.05 (paper-tau005).
PAPER_BATCH_LR = {
    "bert-base-uncased": (64, 3e-5),
    "bert-large-uncased": (64, 1e-5),
    "roberta-base": (512, 1e-5),
    "roberta-large": (512, 3e-5),
}
PAPER_TAU = {
    "paper": {
        "infonce": dict.fromkeys(PAPER_BATCH_LR, 0.05),
        "focal_infonce": {
            "bert-base-uncased": 0.07,
            "bert-large-uncased": 0.07,
            "roberta-base": 0.05,
            "roberta-large": 0.05,
        },
    },
    "paper-tau005": {
        "infonce": dict.fromkeys(PAPER_BATCH_LR, 0.05),
        "focal_infonce": dict.fromkeys(PAPER_BATCH_LR, 0.05),
    },
}


@pytest.mark.parametrize("name", sorted(PAPER_TAU))
def test_paper_sets_have_the_method_md_settings_for_every_item(name: str) -> None:
    p = load_any(REPO / f"params/{name}.yaml")
    assert p.data.num_sentences == 1_000_000 and p.train.eval_steps == 125
    assert len(p.sweep.seeds) >= 3
    assert set(p.sweep.backbones) == set(PAPER_BATCH_LR) and set(p.sweep.losses) == set(PAPER_TAU[name])
    for backbone, (bs, lr) in PAPER_BATCH_LR.items():
        for loss, taus in PAPER_TAU[name].items():
            for seed in p.sweep.seeds:
                cfg = p.train_config(backbone, loss, seed)
                got = (
                    cfg.batch_size,
                    cfg.lr,
                    cfg.epochs,
                    cfg.max_seq_len,
                    cfg.temperature,
                    cfg.max_grad_norm,
                )
                assert got == (bs, lr, 1, 32, taus[backbone], 1.0), (backbone, loss, seed)
                assert cfg.loss_kwargs() == ({"m": 0.3} if loss == "focal_infonce" else {})
                assert cfg.weight_decay == 0.0 and cfg.precision != "fp16"


def test_the_two_paper_readings_differ_only_in_focal_tau() -> None:
    a, b = load_any(REPO / "params/paper.yaml"), load_any(REPO / "params/paper-tau005.yaml")
    for backbone in a.sweep.backbones:
        for loss in a.sweep.losses:
            ca, cb = a.effective_config(backbone, loss), b.effective_config(backbone, loss)
            diff = {k for k in ca if ca[k] != cb.get(k)}
            assert diff <= {"temperature"} and (diff == set()) == (loss == "infonce" or "roberta" in backbone)
    assert a.ablation_default("tau") == 0.07 and b.ablation_default("tau") == 0.05
    assert a.ablation_points("tau") == b.ablation_points("tau") == (0.03, 0.05, 0.07, 0.1)  # Table 4
    assert a.ablation_points("m") == (0.1, 0.2, 0.3, 0.4, 0.5)  # Table 5


def _layered(tmp_path: Path, **sections) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params.update(sections)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_item_config_is_train_then_backbone_then_loss_overrides(tmp_path: Path) -> None:
    b = "all-MiniLM-L6-v2"
    path = _layered(
        tmp_path,
        backbone_overrides={b: {"lr": 1e-5, "temperature": 0.2, "losses": {"focal_infonce": {"m": 0.4}}}},
        loss_overrides={"focal_infonce": {"temperature": 0.15, "m": 0.2, "lr": 2e-5}},
    )
    p = load_params(path)
    info, focal = p.train_config(b, "infonce", 1), p.train_config(b, "focal_infonce", 2)
    assert (info.lr, info.temperature, info.loss_kwargs(), info.seed) == (1e-5, 0.2, {}, 1)  # backbone layer
    assert (focal.lr, focal.temperature) == (2e-5, 0.15)  # the loss layer wins over the backbone's
    assert focal.loss_kwargs() == {"m": 0.4}  # and the backbone's own loss layer over both
    assert [name for name, _ in p.config_layers(b, "focal_infonce")] == [
        "train",
        f"backbone_overrides.{b}",
        "loss_overrides.focal_infonce",
        f"backbone_overrides.{b}.losses.focal_infonce",
        "frameworks.simcse.train",  # then the item's framework (the reference, SimCSE), as for every one
        f"frameworks.simcse.backbones.{b}",
    ]
    assert p.config_layers(b, "focal_infonce") == p.config_layers(b, "focal_infonce", "simcse")
    assert "m" not in p.effective_config(b, "infonce")  # InfoNCE has no m to report
    # the ablations vary that effective config: tau at the loss's effective m, m at its effective tau
    assert (p.ablation_default("tau"), p.ablation_default("m")) == (0.15, 0.4)
    assert p.ablation_train_config("tau", 0.03).loss_kwargs() == {"m": 0.4}
    assert p.ablation_train_config("m", 0.1).temperature == 0.15


@pytest.mark.parametrize(
    ("sections", "match"),
    [
        ({"loss_overrides": {"focal": {"m": 0.2}}}, r"loss_overrides: unknown loss\(es\) \['focal'\]"),
        ({"loss_overrides": {"focal_infonce": {"lr": -1}}}, r"lr = -1: expected a number > 0"),
        ({"loss_overrides": {"infonce": {"seed": 3}}}, "come from the sweep item"),
        (
            {"backbone_overrides": {"all-MiniLM-L6-v2": {"losses": {"focal_infonce": {"tau": 0.1}}}}},
            r"unknown key\(s\) \['tau'\]",
        ),
    ],
)
def test_override_layers_are_validated(tmp_path: Path, sections: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_params(_layered(tmp_path, **sections))


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (
            "temperatures",
            [0.03, 0.05],
            r"ablation.temperatures = \[0.03, 0.05\]: expected values other than 0.05",
        ),
        ("ms", [0.3, 0.5], r"ablation.ms = \[0.3, 0.5\]: expected values other than 0.3"),
        ("seed", 9, r"ablation.seed = 9: expected one of sweep.seeds \(1, 2, 3\)"),
        ("loss", "hcl", r"ablation.loss = 'hcl': expected one of sweep.losses"),
        ("max_steps", 24, r"unknown key\(s\) \['max_steps'\]"),
    ],
)
def test_ablation_reuses_the_main_sweep_run(tmp_path: Path, key: str, value, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_params(_write(tmp_path, "ablation", key, value))


def test_config_command_prints_the_logged_dict(tmp_path: Path) -> None:
    from focalcse.ops.tracking import flatten

    out = subprocess.run(
        [sys.executable, "-m", "focalcse.cli", "config", "--params", str(REPO / "params/paper.yaml")]
        + ["--backbone", "bert-base-uncased", "--loss", "focal_infonce"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    import json

    shown = json.loads(out)
    assert (shown["temperature"], shown["m"], shown["max_grad_norm"], shown["seed"]) == (0.07, 0.3, 1.0, 1)
    p = load_any(REPO / "params/paper.yaml")
    assert shown == p.train_config("bert-base-uncased", "focal_infonce", 1).to_dict()
    assert flatten(shown, "train.") == flatten(
        p.effective_config("bert-base-uncased", "focal_infonce"), "train."
    )
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "focalcse.cli",
            "config",
            "--backbone",
            "bert-base-uncased",
            "--loss",
            "infonce",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert bad.returncode == 2 and "--backbone 'bert-base-uncased': expected one of" in bad.stderr


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
    ("train", "precision", "int8", "fp32, bf16"),
    ("train", "precision", "fp16", "GradScaler"),
    ("train", "max_grad_norm", -1.0, ">= 0"),
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
    ("sweep", "frameworks", [], "one or more unique names from diffcse, promptbert, simcse"),
    ("sweep", "frameworks", ["simcse", "simcse"], "one or more unique names"),
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
