"""The framework registry (focalcse.core.frameworks): a framework is one module with a literal SPEC,
read without importing it; registering a toy framework from a temporary module is all it takes to
validate its settings, name it in the report and train a tiny model with it."""

from __future__ import annotations

import math
import random
import sys
import uuid
from pathlib import Path

import pytest
from conftest import random_sentence

from focalcse.config import ConfigError, FrameworksConfig, SweepConfig, TrainConfig
from focalcse.core import frameworks as registry
from focalcse.core.frameworks import (
    FrameworkRegistryError,
    all_frameworks,
    default_framework,
    framework_label,
    framework_module,
    framework_names,
    framework_spec,
    read_spec,
    register_module,
    settings_class,
)

TOY_SOURCE = """
from dataclasses import dataclass, field
from typing import Any

SPEC = {{
    "name": "{name}",
    "label": "Toy framework",
    "settings": "{module}:ToySettings",
    "needs": [],
    "refuses": ["ddp", "gradcache"],
}}

CALLS = []  # the batch size of every loss() call


@dataclass(frozen=True)
class ToySettings:
    reverse: bool = True  # the second view: the sentence's tokens in reverse order
    train: dict[str, Any] = field(default_factory=dict)
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)

    def refusal(self, cfg):
        return ("pooler", cfg.pooler, "cls") if cfg.pooler != "cls" else None


class ToyStep:
    name = "{name}"

    def __init__(self, settings):
        self.settings = {{"reverse": settings.reverse}}
        self.reverse = settings.reverse

    def attach(self, encoder):
        pass

    def loss(self, encoder, loss_fn, rows, device):
        from focalcse.core.encode import pad_batch

        pad = encoder.tokenizer.pad_token_id
        second = [[r[0], *r[-2:0:-1], r[-1]] if self.reverse else r for r in rows]
        ids1, mask1 = pad_batch(rows, pad)
        ids2, mask2 = pad_batch(second, pad)
        z1 = encoder(input_ids=ids1.to(device), attention_mask=mask1.to(device))
        z2 = encoder(input_ids=ids2.to(device), attention_mask=mask2.to(device))
        CALLS.append(len(rows))
        return loss_fn(z1.float(), z2.float()), {{}}


def training_setup(source, cfg, settings, prepared_dir):
    from focalcse.core.model import SentenceEncoder

    return SentenceEncoder.for_training(source, cfg), ToyStep(settings), cfg.max_seq_len
"""


@pytest.fixture
def toy_framework(tmp_path: Path, monkeypatch):
    """``(name, module)`` of a toy framework written to a temporary module (not yet registered);
    removed from the registry and ``sys.modules`` afterwards."""
    tag = uuid.uuid4().hex[:8]
    module, name = f"toy_framework_{tag}", f"toyfw{tag}"
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{module}.py").write_text(TOY_SOURCE.format(name=name, module=module), encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield name, module
    registry._REGISTRY.pop(name, None)
    sys.modules.pop(module, None)


def test_builtin_specs() -> None:
    assert framework_names() == ("diffcse", "promptbert", "simcse")  # built-ins, alphabetical
    # SimCSE is one of them, not a loop of its own; listings show the default (the paper's) first
    assert all_frameworks() == ("simcse", "diffcse", "promptbert")
    assert default_framework() == "simcse"
    diff, prompt, simcse = framework_spec("diffcse"), framework_spec("promptbert"), framework_spec("simcse")
    assert diff.needs == ("generator",) and prompt.needs == () and simcse.needs == ()
    assert prompt.encoder and not diff.encoder and not simcse.encoder
    assert diff.refuses == prompt.refuses == ("ddp", "gradcache") and simcse.refuses == ()
    assert simcse.unpad and not diff.unpad and not prompt.unpad  # the one step with the unpadded forward
    assert [s.default for s in (diff, prompt, simcse)] == [False, False, True]
    assert [framework_label(f) for f in all_frameworks()] == ["SimCSE", "DiffCSE", "PromptBERT"]
    for f in framework_names():  # the settings module is the SPEC's, in the settings folder
        assert framework_spec(f).settings_module == f"focalcse.core.frameworks.settings.{f}"
        assert settings_class(f).__module__ == framework_spec(f).settings_module
    assert framework_module("simcse").__name__ == "focalcse.core.frameworks.simcse"
    assert SweepConfig().frameworks == ("simcse",)  # a sweep naming none trains the default


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ('SPEC = {"label": "x"}', "needs at least"),
        ('SPEC = {"name": "x", "label": "x", "needs": ["gpu"]}', "needs"),
        ('SPEC = {"name": "x", "label": "x", "settings": "nocolon"}', "module:Class"),
        ('SPEC = {"name": "x", "label": "x", "refuses": ["tpu"]}', "refuses"),
        ('SPEC = {"name": "x", "label": "x", "colour": 1}', "unknown key"),
        ("SPEC = dict(name='x')", "literal"),
    ],
)
def test_read_spec_errors_name_the_file(tmp_path: Path, source: str, match: str) -> None:
    path = tmp_path / "bad_framework.py"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(FrameworkRegistryError, match=match) as err:
        read_spec(path, "bad_framework")
    assert str(path) in str(err.value)


def _plugin(tmp_path: Path, monkeypatch, module: str, spec: str) -> str:
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / f"{module}.py").write_text(f"SPEC = {spec}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    return module


def test_simcse_is_a_registered_name_and_the_one_default(tmp_path: Path, monkeypatch) -> None:
    """SimCSE's name is taken by its own module like any framework's, and exactly one SPEC may say
    ``"default": True``."""
    tag = uuid.uuid4().hex[:8]
    clash = _plugin(tmp_path, monkeypatch, f"clash_{tag}", '{"name": "simcse", "label": "x"}')
    with pytest.raises(FrameworkRegistryError, match="'simcse' is registered twice"):
        register_module(clash)
    assert framework_spec("simcse").module == "focalcse.core.frameworks.simcse"
    name = f"second{tag}"
    second = _plugin(
        tmp_path, monkeypatch, f"second_{tag}", f'{{"name": "{name}", "label": "x", "default": True}}'
    )
    try:
        assert register_module(second).default
        with pytest.raises(FrameworkRegistryError, match=rf"exactly one .*'default': True.*simcse.*{name}"):
            default_framework()
    finally:
        registry._REGISTRY.pop(name, None)
    assert default_framework() == "simcse"


def test_a_module_without_spec_is_no_framework(tmp_path: Path) -> None:
    path = tmp_path / "helper.py"
    path.write_text("X = 1\n", encoding="utf-8")
    assert read_spec(path, "helper") is None


def test_registering_a_framework_is_all_it_takes_to_train_it(
    toy_framework, tiny_backbone, minilm_tokenizer, tmp_path
) -> None:
    from focalcse.core.training import train
    from focalcse.steps.check import check_framework_item

    name, module = toy_framework
    with pytest.raises(ConfigError, match="sweep.frameworks"):  # unknown before it is registered
        SweepConfig(frameworks=("simcse", name))
    spec = register_module(module)
    assert spec.name == name and spec.label == "Toy framework"
    assert module not in sys.modules  # registered from its SPEC, not imported
    assert name in all_frameworks() and framework_label(name) == "Toy framework"
    assert SweepConfig(frameworks=("simcse", name)).others == (name,)  # now accepted
    assert SweepConfig(frameworks=(name,)).reference == name  # it may be a set's reference too
    assert default_framework() == "simcse"  # its SPEC does not claim the default

    # its params section is its own settings class, built and checked like every section
    fw = FrameworksConfig.from_mapping({name: {"reverse": True}})
    settings = fw.settings(name)
    assert type(settings).__name__ == "ToySettings" and settings.reverse is True
    with pytest.raises(ConfigError, match=rf"frameworks.{name}: unknown key"):
        FrameworksConfig.from_mapping({name: {"nope": 1}})
    with pytest.raises(ConfigError, match=rf"frameworks.{name}.reverse"):
        FrameworksConfig.from_mapping({name: {"reverse": "yes"}})

    cfg = TrainConfig.from_mapping(
        "train",
        {"loss": "infonce", "batch_size": 8, "max_steps": 3, "lr": 1e-3, "eval_at_start": False, "seed": 5},
    )

    class P:  # the check stage reads the settings' own refusal and the SPEC's refusals
        frameworks = fw

    check_framework_item(P, name, cfg, "toy item")
    with pytest.raises(ConfigError, match=r"train.pooler = 'avg' \(toy item\): expected cls"):
        check_framework_item(P, name, TrainConfig.from_mapping("train", {"pooler": "avg"}), "toy item")
    with pytest.raises(ConfigError, match="does not support GradCache"):
        check_framework_item(P, name, TrainConfig.from_mapping("train", {"grad_cache_chunk": 4}), "toy item")

    encoder, step, max_len = framework_module(name).training_setup(str(tiny_backbone), cfg, settings, None)
    rng = random.Random(0)
    corpus = minilm_tokenizer(
        [random_sentence(rng, 4, 10) for _ in range(40)], truncation=True, max_length=max_len
    )["input_ids"]
    logged: list[tuple[dict, int]] = []
    out = tmp_path / "model"
    result = train(
        encoder,
        corpus,
        cfg,
        out,
        log_metrics=lambda metrics, s: logged.append((dict(metrics), s)),
        progress=False,
        framework=step,
    )
    assert result.steps == 3 and [s for _, s in logged] == [1, 2, 3]
    assert all(math.isfinite(m["loss"]) and m["loss"] > 0 for m, _ in logged)
    assert sys.modules[module].CALLS == [8, 8, 8]  # its step made every batch's loss
    assert (out / "config.json").is_file()
