"""The loss registry: built-in specs, SPEC errors, config validation from the specs, and a plugin loss
that trains with no change anywhere else (registering it is all it takes)."""

from __future__ import annotations

import math
import os
import random
import sys
import uuid
from pathlib import Path

import pytest
from conftest import random_sentence
from fresh_process import run_fresh

import focalcse.core.losses as registry
from focalcse.config import ConfigError, TrainConfig
from focalcse.core.losses import (
    PLUGINS_ENV,
    LossRegistryError,
    build_loss,
    hyper_params,
    loss_names,
    loss_spec,
    read_spec,
    register_module,
)

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- built-in specs
def test_builtin_specs() -> None:
    names = loss_names()
    assert {"infonce", "focal_infonce"} <= set(names)
    for name in names:
        spec = loss_spec(name)
        assert spec.name == name
        assert spec.label.strip() and spec.color.strip(), name
        assert Path(spec.source).is_file(), name
    focal = loss_spec("focal_infonce")
    (m,) = [h for h in focal.hyper if h.name == "m"]
    assert (m.default, m.min) == (0.3, 0)
    assert focal.defaults == {"m": 0.3} and focal.cls == "FocalInfoNCE"
    assert loss_spec("infonce").hyper == () and loss_spec("infonce").cls == "InfoNCE"
    assert hyper_params()["m"] is m
    with pytest.raises(ValueError, match="unknown loss 'nope'.*infonce"):
        loss_spec("nope")


def test_loss_names_imports_no_loss_module() -> None:
    out = run_fresh(
        """
        import json, sys
        from focalcse.core.losses import hyper_params, loss_names, loss_spec
        names = loss_names()
        hyper_params(); [loss_spec(n) for n in names]
        loaded = sorted(m for m in sys.modules
                        if m.startswith("focalcse.core.losses.") or m.split(".")[0] == "torch")
        print(json.dumps({"names": list(names), "loaded": loaded}))
        """
    )
    assert {"infonce", "focal_infonce"} <= set(out["names"])
    assert out["loaded"] == [], f"reading the specs imported {out['loaded']}"


# ---------------------------------------------------------------- read_spec errors
GOOD_SPEC = 'SPEC = {"name": "x", "class": "X", "label": "X", "color": "#000000"}\n'


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("class X:\n    pass\n", "no SPEC"),
        ("def f():\n    SPEC = {}\n", "no SPEC"),  # only a module-level SPEC counts
        ('SPEC = dict(name="x", **{"class": "X"})\n', "literal"),
        ('NAME = "x"\nSPEC = {"name": NAME, "class": "X", "label": "X", "color": "#000"}\n', "literal"),
        ('SPEC = {"name": "x", "class": "X"}\n', "needs the keys"),
        ('SPEC = ["name", "class", "label", "color"]\n', "needs the keys"),
        (GOOD_SPEC.replace("}", ', "hyper": {"k": {"min": 0}}}'), "'k' needs at least a 'default'"),
        (GOOD_SPEC.replace("}", ', "hyper": {"k": {"default": -1, "min": 0}}}'), "'k' default -1"),
        (GOOD_SPEC.replace("}", ', "hyper": {"k": {"default": 2, "max": 1}}}'), "out of its range"),
        (GOOD_SPEC.replace("}", ', "hyper": {"k": {"default": "big"}}}'), "out of its range"),
        (GOOD_SPEC.replace("}", ', "hyper": ["k"]}'), "'hyper' must be a dict"),
        ("SPEC = {[1]: 2}\n", "literal"),  # unhashable key: a TypeError inside literal_eval
        ("SPEC = {\n", "cannot be parsed"),
    ],
)
def test_read_spec_errors_name_the_file(tmp_path: Path, source: str, match: str) -> None:
    path = tmp_path / "bad_loss.py"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(LossRegistryError, match=match) as err:
        read_spec(path, "bad_loss")
    assert str(path) in str(err.value)


def test_read_spec_reads_an_annotated_spec(tmp_path: Path) -> None:
    path = tmp_path / "annotated_loss.py"
    path.write_text(GOOD_SPEC.replace("SPEC =", "SPEC: dict ="), encoding="utf-8")
    assert read_spec(path, "annotated_loss").name == "x"


def test_read_spec_reads_a_good_one(tmp_path: Path) -> None:
    path = tmp_path / "good_loss.py"
    path.write_text(
        GOOD_SPEC.replace("}", ', "hyper": {"k": {"default": 0.5, "min": 0, "max": 1, "help": "h"}}}'),
        encoding="utf-8",
    )
    spec = read_spec(path, "good_loss")
    assert (spec.name, spec.module, spec.cls, spec.source) == ("x", "good_loss", "X", str(path))
    assert spec.defaults == {"k": 0.5} and spec.hyper[0].allowed() == "a number in [0, 1]"
    assert spec.hyper[0].check(2) and spec.hyper[0].check(True) and spec.hyper[0].check(0.7) is None


def test_register_module_errors(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(LossRegistryError, match="not found"):
        register_module(f"no_such_loss_{uuid.uuid4().hex}")
    clash = f"clash_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{clash}.py").write_text(GOOD_SPEC.replace('"x"', '"infonce"', 1), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(registry._REGISTRY)
    with pytest.raises(LossRegistryError, match="registered twice"):
        register_module(clash)
    assert before == registry._REGISTRY  # the built-in infonce is untouched


# ---------------------------------------------------------------- config validation from the specs
def test_unknown_train_key_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="unknown key") as err:
        TrainConfig.from_mapping("train", {"loss": "focal_infonce", "mm": 0.3})
    assert "'mm'" in str(err.value)
    allowed = str(err.value).split("allowed:")[1]
    assert {"m", "temperature", "batch_size"} <= {k.strip() for k in allowed.split(",")}


def test_out_of_range_hyper_parameter_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"train\.m = -1: expected a number >= 0"):
        TrainConfig.from_mapping("train", {"loss": "focal_infonce", "m": -1})
    with pytest.raises(ConfigError, match=r"\bm\b"):
        TrainConfig.from_mapping("train", {"loss": "focal_infonce", "m": "big"})


def test_loss_kwargs_and_to_dict() -> None:
    cfg = TrainConfig.from_mapping("train", {"batch_size": 8, "loss": "focal_infonce", "m": 0.2})
    assert cfg.loss_kwargs() == {"m": 0.2}
    assert TrainConfig.from_mapping("train", {"loss": "focal_infonce"}).loss_kwargs() == {"m": 0.3}
    assert TrainConfig.from_mapping("train", {"loss": "infonce"}).loss_kwargs() == {}
    out = cfg.to_dict()
    keys = list(out)
    assert keys[:3] == ["loss", "temperature", "m"]
    assert "hyper" not in out and keys.count("m") == 1
    assert keys[3:5] == ["pooler", "mlp_only_train"]  # then the other keys, in field order
    assert (out["loss"], out["m"], out["batch_size"]) == ("focal_infonce", 0.2, 8)
    assert TrainConfig.from_mapping("train", out) == cfg  # the flat section round-trips


# ---------------------------------------------------------------- build_loss
def test_build_loss_ignores_undeclared_and_fills_defaults() -> None:
    from focalcse.core.losses.focal_infonce import FocalInfoNCE
    from focalcse.core.losses.infonce import InfoNCE

    plain = build_loss("infonce", 0.1, m=0.5, scale=9.0)
    assert type(plain) is InfoNCE and plain.temperature == 0.1 and not hasattr(plain, "m")
    focal = build_loss("focal_infonce", 0.07)
    assert type(focal) is FocalInfoNCE and (focal.temperature, focal.m) == (0.07, 0.3)
    assert build_loss("focal_infonce", 0.05, m=0.1, scale=9.0).m == 0.1


# ---------------------------------------------------------------- a plugin loss, end to end
TOY_SOURCE = '''\
"""A toy loss registered from outside the package."""

from focalcse.core.losses.base import ContrastiveLoss

SPEC = {{
    "name": "{name}",
    "class": "ToyLoss",
    "label": "Toy",
    "color": "#123456",
    "hyper": {{"scale": {{"default": 2.0, "min": 0.0}}}},
}}

INSTANCES = []  # every ToyLoss built, so a test can see which one trained
CALLS = []  # the batch size of every logits() call


class ToyLoss(ContrastiveLoss):
    def __init__(self, temperature, scale):
        super().__init__(temperature)
        self.scale = float(scale)
        INSTANCES.append(self)

    def logits(self, sim, positive_offset=0):
        CALLS.append(sim.shape[0])
        return sim * self.scale / self.temperature
'''


@pytest.fixture
def toy_loss(tmp_path: Path, monkeypatch):
    """``(loss name, module name)`` of a toy loss written to a temporary module and registered;
    removed from the registry and ``sys.modules`` afterwards."""
    tag = uuid.uuid4().hex[:8]
    module, name = f"toy_loss_{tag}", f"toy_{tag}"
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{module}.py").write_text(TOY_SOURCE.format(name=name), encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield name, module, folder
    registry._REGISTRY.pop(name, None)
    sys.modules.pop(module, None)


def test_registering_a_loss_is_all_it_takes_to_train_it(
    toy_loss, tiny_encoder_factory, minilm_tokenizer, tmp_path
):
    from focalcse.core.training import train

    name, module, _ = toy_loss
    assert name not in loss_names()
    with pytest.raises(ConfigError):  # unknown before it is registered
        TrainConfig.from_mapping("train", {"loss": name})
    spec = register_module(module)
    assert spec.name == name and spec.module == module and spec.defaults == {"scale": 2.0}
    assert module not in sys.modules  # registered from its SPEC, not imported
    assert name in loss_names() and loss_spec(name).label == "Toy"

    cfg = TrainConfig.from_mapping(
        "train",
        {
            "loss": name,
            "temperature": 0.05,
            "scale": 3.0,
            "batch_size": 8,
            "max_steps": 3,
            "lr": 1e-3,
            "eval_at_start": False,
            "seed": 5,
            "precision": "fp32",
            "device": "cpu",
        },
    )
    assert cfg.loss_kwargs() == {"scale": 3.0}
    with pytest.raises(ConfigError, match="scale"):
        TrainConfig.from_mapping("train", {"loss": name, "scale": -1.0})

    rng = random.Random(0)
    sentences = [random_sentence(rng, 4, 10) for _ in range(40)]
    corpus = minilm_tokenizer(sentences, truncation=True, max_length=16)["input_ids"]
    logged: list[tuple[dict, int]] = []
    out = tmp_path / "model"
    result = train(
        tiny_encoder_factory("cls", mlp_only_train=True),
        corpus,
        cfg,
        out,
        log_metrics=lambda metrics, step: logged.append((dict(metrics), step)),
        progress=False,
    )

    assert result.steps == 3 and result.best_step == 3
    assert [s for _, s in logged] == [1, 2, 3]
    losses = [m["loss"] for m, _ in logged]
    assert all(math.isfinite(x) and x > 0 for x in losses)
    assert losses == [h["loss"] for h in result.history]
    assert out.is_dir() and (out / "config.json").is_file()
    toy = sys.modules[module]  # imported by build_loss, from the registered module
    assert len(toy.INSTANCES) == 1
    assert type(toy.INSTANCES[0]).__name__ == "ToyLoss"
    assert (toy.INSTANCES[0].scale, toy.INSTANCES[0].temperature) == (3.0, 0.05)
    assert toy.CALLS == [8, 8, 8]  # its logits made every step's loss


def test_plugin_from_the_environment(toy_loss) -> None:
    name, module, folder = toy_loss
    out = run_fresh(
        f"""
        import json
        from focalcse.core.losses import loss_names, loss_spec
        from focalcse.config import TrainConfig
        cfg = TrainConfig.from_mapping("train", {{"loss": "{name}", "scale": 4.0}})
        print(json.dumps({{"names": list(loss_names()), "kwargs": cfg.loss_kwargs(),
                           "color": loss_spec("{name}").color}}))
        """,
        **{
            PLUGINS_ENV: f" {module} ,",
            "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert out["names"][-1] == name and {"infonce", "focal_infonce"} <= set(out["names"])
    assert out["kwargs"] == {"scale": 4.0} and out["color"] == "#123456"
    assert name not in loss_names()  # this process never registered it


def test_each_loss_checks_its_own_hyper_parameters(tmp_path: Path, monkeypatch) -> None:
    """Two losses declare ``m`` with different ranges (Focal-InfoNCE: m >= 0; the toy: m in [-1, -0.5]):
    each item's value is checked against its own loss's declaration, not the first one registered."""
    tag = uuid.uuid4().hex[:8]
    module, name = f"toy_m_{tag}", f"toy_m_{tag}"
    folder = tmp_path / "plugins"
    folder.mkdir()
    source = TOY_SOURCE.format(name=name).replace(
        '"hyper": {"scale": {"default": 2.0, "min": 0.0}}',
        '"hyper": {"m": {"default": -0.75, "min": -1.0, "max": -0.5}}',
    )
    assert '"m": {"default": -0.75' in source
    (folder / f"{module}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    try:
        register_module(module)
        assert set(registry.hyper_declarations("m")) == {"focal_infonce", name}
        # the toy's own range: -0.75 passes (Focal-InfoNCE's m >= 0 would refuse it), 0.3 does not
        assert TrainConfig.from_mapping("train", {"loss": name, "m": -0.75}).hyper_value("m") == -0.75
        with pytest.raises(
            ConfigError, match=rf"train\.m = 0\.3: expected a number in \[-1\.0, -0\.5\] \(as {name}"
        ):
            TrainConfig.from_mapping("train", {"loss": name, "m": 0.3})
        # Focal-InfoNCE's range for its own items
        with pytest.raises(
            ConfigError, match=r"train\.m = -0\.75: expected a number >= 0(\.0)? \(as focal_infonce"
        ):
            TrainConfig.from_mapping("train", {"loss": "focal_infonce", "m": -0.75})
        # a loss that declares no m: the value must suit some loss that does
        assert TrainConfig.from_mapping("train", {"loss": "infonce", "m": -0.75}).loss_kwargs() == {}
        assert TrainConfig.from_mapping("train", {"loss": "infonce", "m": 0.3}).loss_kwargs() == {}
        with pytest.raises(ConfigError, match=r"train\.m = -5: expected"):
            TrainConfig.from_mapping("train", {"loss": "infonce", "m": -5})
    finally:
        registry._REGISTRY.pop(name, None)
        sys.modules.pop(module, None)
