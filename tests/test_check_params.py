"""Every bad params value stops ``dvc repro`` at the ``check`` stage, before DVC deletes any output.

The bad values are derived from the schema itself (the dataclasses of :mod:`focalcse.config`, walked
from :class:`focalcse.config.Params`): for every field of every section a wrong type, and for ints a
negative, for floats out of range, NaN and inf, for strings an unknown choice, for lists a scalar and
a bad element, for mappings a list and a non-mapping entry, plus an unknown key and a non-mapping value
for every section. A field added without validation makes this test fail. Each one must be refused by
what the check stage runs in-process (``load_params`` + :func:`focalcse.steps.check.check_params`) with
one line naming the key and what is expected. The rules that need the sample size (the trainer's
``max_steps`` / batch count, the dev period, the batch size) and the frameworks' refusals of a train
config are checked for every item of every framework and every ablation item.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import yaml
from safetensors import SafetensorError

from focalcse import errors
from focalcse.config import (
    ConfigError,
    FrameworksConfig,
    Params,
    TrainConfig,
    batch_spans,
    load_params,
    training_steps,
)
from focalcse.core.frameworks import framework_names, settings_class
from focalcse.core.losses import hyper_params
from focalcse.data.sources import MIRROR_ENV
from focalcse.paramsets import load_any
from focalcse.steps.check import check_params

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "all-MiniLM-L6-v2"
UNKNOWN = "no_such_key"
BAD_CHOICE = "no such choice!"  # no choice list, name pattern, hub id or folder accepts it
NOT_A_MAPPING = ["a", "list"]


def _base() -> dict[str, Any]:
    """The committed CPU default with every framework swept (SimCSE the reference), so every section
    is in use."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweep"].update(frameworks=["simcse", "promptbert", "diffcse"])
    return raw


@pytest.fixture(autouse=True)
def _no_mirror_env(monkeypatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)  # data.mirror is the mirror in use


def _validate(tmp_path: Path, raw: dict[str, Any]) -> Params:
    """What the check stage decides from params, in-process: load every section, then every item."""
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    params = load_params(path)
    check_params(params)
    return params


def _set(raw: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    node = raw
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return raw


# ---------------------------------------------------------------- bad values from the schema
def _bad_scalars(hint: Any) -> list[Any]:
    """Bad values of one field, from its type alone."""
    text = str(hint)
    if hint is bool:
        return ["yes", 1]
    if hint is int:
        return [-1, "x", 1.5]
    if hint is float:
        return [-1.0, math.nan, math.inf, "x"]
    if hint is str:
        return [BAD_CHOICE, 5]
    if text.startswith("tuple"):
        inner = {"float": [math.nan, -1.0, "x"], "int": [-1, "x"], "str": [BAD_CHOICE, 5]}
        kind = "float" if "float" in text else "int" if "int" in text else "str"
        return ["x", 5, *([bad] for bad in inner[kind])]
    raise AssertionError(f"no bad values for type {text}: extend _bad_scalars")


def _mapping_bad(path: tuple[str, ...], hint: Any) -> list[Any]:
    """Bad values of a mapping field (override layers: names -> train keys, or train keys)."""
    text = str(hint)
    if text.startswith("dict[str, dict"):  # <name>: {train keys}
        name = "infonce" if path[-1] == "loss_overrides" else BACKBONE
        return [NOT_A_MAPPING, {name: 5}, {name: {UNKNOWN: 1}}]
    if text.startswith("dict"):  # {train keys}
        return [NOT_A_MAPPING, {UNKNOWN: 1}]
    raise AssertionError(f"{'.'.join(path)}: no bad values for type {text}")


def _cases() -> list[tuple[str, tuple[str, ...], Any, str]]:
    """``(id, params path, bad value, what the message must name)`` for every field of the schema."""
    out: list[tuple[str, tuple[str, ...], Any, str]] = []

    def walk(cls: type, path: tuple[str, ...]) -> None:
        section = ".".join(path)
        out.append((f"{section}=<list>", path, NOT_A_MAPPING, section))  # a section must be a mapping
        out.append((f"{section}.{UNKNOWN}", (*path, UNKNOWN), 1, UNKNOWN))
        if cls is FrameworksConfig:  # one block per registered framework, its SPEC's settings class
            for name in framework_names():
                if (klass := settings_class(name)) is not None:
                    walk(klass, (*path, name))
            return
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            key = (*path, f.name)
            if dataclasses.is_dataclass(hint):
                walk(hint, key)
            elif cls is TrainConfig and f.name == "hyper":
                # not a params key: the losses' hyper-parameters are flat keys of the train section,
                # each declared with a range by its loss's SPEC (focalcse.core.losses)
                for name in hyper_params():
                    for bad in _bad_scalars(float):
                        out.append((f"train.{name}={bad!r}", (*path, name), bad, f"train.{name}"))
            elif str(hint).startswith("dict"):
                for bad in _mapping_bad(key, hint):
                    out.append((f"{'.'.join(key)}={bad!r}", key, bad, ".".join(key)))
            else:
                for bad in _bad_scalars(hint):
                    out.append((f"{'.'.join(key)}={bad!r}", key, bad, ".".join(key)))

    hints = get_type_hints(Params)
    for f in dataclasses.fields(Params):
        if f.name == "raw":  # not a params key: the file as read, kept for the record
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            walk(hint, (f.name,))
        else:  # backbone_overrides, loss_overrides: name -> train keys
            for bad in _mapping_bad((f.name,), hint):
                out.append((f"{f.name}={bad!r}", (f.name,), bad, f.name))
    out.append((f"<section {UNKNOWN}>", (UNKNOWN,), {}, UNKNOWN))
    return out


CASES = _cases()


def test_the_schema_walk_covers_every_section_and_the_base_passes(tmp_path: Path) -> None:
    named = {path[0] for _, path, _, _ in CASES}
    assert {f.name for f in dataclasses.fields(Params)} - {"raw"} <= named
    assert any(path[:3] == ("frameworks", "diffcse", "pretrain") for _, path, _, _ in CASES)
    assert any(path[:3] == ("frameworks", "simcse", "train") for _, path, _, _ in CASES)  # a framework too
    assert len(CASES) > 200
    _validate(tmp_path, _base())  # every case below differs from a valid set by one value


@pytest.mark.parametrize(("path", "value", "names"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_bad_value_of_the_schema_stops_at_check_in_one_line(
    tmp_path: Path, path: tuple[str, ...], value: Any, names: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _validate(tmp_path, _set(_base(), path, value))
    msg = str(err.value)
    assert "\n" not in msg
    assert names in msg, msg
    assert any(word in msg for word in ("expected", "unknown key", "unknown section", "allowed")), msg


# ---------------------------------------------------------------- rules that need the sample size
DATA_CASES = {
    # the issue: 8192 sentences give 128 batches of 64
    "max_steps beyond the sample": (
        ("train", "max_steps"),
        1000,
        "train.max_steps=1000 (item simcse all-MiniLM-L6-v2 infonce seed 1) but 8192 sentences x 1 "
        "epoch(s) give only 128 batches of 64: expected 0 (every batch) or at most 128",
    ),
    "max_steps beyond the sample, a framework's layer": (
        ("frameworks", "promptbert", "train", "max_steps"),
        129,
        "train.max_steps=129 (item promptbert all-MiniLM-L6-v2 infonce seed 1)",
    ),
    "max_steps beyond the sample, SimCSE's own layer": (
        ("frameworks", "simcse", "train", "max_steps"),
        129,
        "train.max_steps=129 (item simcse all-MiniLM-L6-v2 infonce seed 1)",
    ),
    "max_steps beyond the sample, one loss's layer": (
        ("loss_overrides", "focal_infonce", "max_steps"),
        200,
        "(item simcse all-MiniLM-L6-v2 focal_infonce seed 1)",
    ),
    "epochs: max_steps within two epochs only": (("train", "max_steps"), 129, "at most 128"),
    "dev period longer than the run": (("train", "eval_steps"), 129, "train.eval_steps = 129"),
    "dev period longer than a framework's run": (
        ("frameworks", "diffcse", "train", "max_steps"),
        16,
        "train.eval_steps = 32 (item diffcse all-MiniLM-L6-v2 infonce seed 1)",
    ),
    "batch larger than the sample": (("train", "batch_size"), 10_000, "train.batch_size = 10000"),
    "too small a sample for the dev period": (("data", "num_sentences"), 100, "train.eval_steps = 32"),
    "generator batch larger than the sample": (
        ("frameworks", "diffcse", "pretrain", "batch_size"),
        10_000,
        "frameworks.diffcse.pretrain.batch_size = 10000",
    ),
    "generator batch of one sentence": (
        ("frameworks", "diffcse", "pretrain", "batch_size"),
        1,
        "frameworks.diffcse.pretrain.batch_size = 1",
    ),
    "mirror folder that does not exist": (("data", "mirror"), "/no/such/mirror", "data.mirror"),
    # the frameworks' refusals of a train config (core/training.py _setup, core/frameworks/*.py)
    "GradCache under a framework": (
        ("frameworks", "promptbert", "train", "grad_cache_chunk"),
        4,
        "train.grad_cache_chunk = 4 (item promptbert",
    ),
    "GradCache on mps": (("train", "grad_cache_chunk"), 4, "GradCache replays the dropout RNG"),
    "PromptBERT with pooler avg": (
        ("frameworks", "promptbert", "train", "pooler"),
        "avg",
        "train.pooler = 'avg' (item promptbert",
    ),
    "DiffCSE without pooler cls": (
        ("frameworks", "diffcse", "train", "pooler"),
        "cls_before_pooler",
        "train.pooler = 'cls_before_pooler' (item diffcse",
    ),
    "DiffCSE BatchNorm without mlp_only_train": (
        ("frameworks", "diffcse", "backbones", BACKBONE),
        {"mlp_only_train": False},
        "train.mlp_only_train = False (item diffcse",
    ),
    "a framework layer setting the item's loss": (
        ("frameworks", "diffcse", "train", "loss"),
        "infonce",
        "frameworks.diffcse.train: ['loss'] come from the sweep item",
    ),
}
# refused when the section is loaded (no item or sample needed); the others pass load_params alone
LOAD_TIME = {"generator batch of one sentence", "a framework layer setting the item's loss"}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_rules_on_the_sample_and_the_frameworks_stop_at_check(tmp_path: Path, case: str) -> None:
    path, value, message = DATA_CASES[case]
    raw = _set(_base(), path, value)
    if case == "epochs: max_steps within two epochs only":
        _validate(tmp_path, _set(raw, ("train", "epochs"), 2))  # 256 batches in two epochs
        raw["train"]["epochs"] = 1
    if case == "GradCache on mps":
        raw["train"]["device"] = "mps"
    if case not in LOAD_TIME:
        load_params(_write(tmp_path, raw))  # each section alone is valid: only the check stage can tell
    with pytest.raises(ConfigError) as err:
        _validate(tmp_path, raw)
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_refused_settings_pass_where_they_are_allowed(tmp_path: Path) -> None:
    raw = _base()
    raw["train"].update(max_steps=128, eval_steps=128, grad_cache_chunk=4)  # SimCSE: GradCache on cpu
    raw["frameworks"]["diffcse"].update(
        batchnorm=False, train={"mlp_only_train": False, "grad_cache_chunk": 0}
    )
    raw["frameworks"]["promptbert"]["train"] = {"pooler": "cls_before_pooler", "grad_cache_chunk": 0}
    raw["data"]["mirror"] = str(tmp_path)
    _validate(tmp_path, raw)


@pytest.mark.parametrize(
    "path", ["params.yaml", *[str(p.relative_to(REPO)) for p in sorted((REPO / "params").glob("*.yaml"))]]
)
def test_committed_parameter_sets_pass_check(tmp_path: Path, path: str) -> None:
    check_params(load_any(REPO / path))  # a set under params/ is an overlay on params.yaml


def test_the_check_counts_the_batches_the_trainer_cuts() -> None:
    from focalcse.core.training import batch_order

    for n in (2, 3, 7, 64, 65, 66, 129):
        for batch_size in (2, 3, 8, 64, 200):
            for epochs in (1, 3):
                cfg = TrainConfig(batch_size=batch_size, epochs=epochs)
                assert training_steps(cfg, n) == len(batch_order(n, batch_size, epochs, 0))
                assert len(batch_spans(n, batch_size)) * epochs == len(batch_order(n, batch_size, epochs, 1))
    with pytest.raises(ConfigError, match=r"max_steps=9 but 16 sentences x 1 epoch\(s\) give only 2 batches"):
        training_steps(TrainConfig(batch_size=8, max_steps=9), 16)  # the trainer's own message
    assert issubclass(ConfigError, ValueError)  # what _setup raised before, so callers still catch it


# ---------------------------------------------------------------- an error no stage foresaw
@pytest.fixture
def common(monkeypatch, tmp_path: Path):
    """stages/_common.py imported in-process (it installs its hook: restored after the test)."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.syspath_prepend(str(REPO / "stages"))
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.delenv("FOCALCSE_DEBUG", raising=False)
    sys.modules.pop("_common", None)
    return importlib.import_module("_common")


def _raised(exc: BaseException) -> tuple[type, BaseException, Any]:
    try:
        raise exc
    except BaseException as err:  # noqa: BLE001 - the hook's input
        return type(err), err, err.__traceback__


def test_an_unexpected_error_prints_one_line_and_writes_the_traceback(
    common, tmp_path, capsys, monkeypatch
) -> None:
    common._concise_errors(*_raised(RuntimeError("index out of step\nsecond line")))
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("RuntimeError: index out of step [...] (unexpected error; full traceback in ")
    logs = list((tmp_path / ".focalcse/logs").glob("*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    text = logs[0].read_text()
    assert "Traceback (most recent call last)" in text and "second line" in text and "_raised" in text

    common._concise_errors(*_raised(ConfigError("params train.lr = 0: expected a number > 0")))
    assert capsys.readouterr().err == "error: params train.lr = 0: expected a number > 0\n"

    monkeypatch.setenv("FOCALCSE_DEBUG", "1")
    common._concise_errors(*_raised(RuntimeError("boom")))
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


def _best(root: Path) -> Path:
    return root / "models" / ".seed1.work" / "best"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            lambda root: (
                errors.DiskFullError(_best(root), 3 << 20, 91_456_608),
                f"no space left on the device writing {_best(root)}: 3.0 MiB free there, the write needs "
                "about 87.2 MiB; free some space and rerun",
            ),
            id="disk-full-named-by-the-writer",
        ),
        pytest.param(
            lambda root: (
                OSError(errno.ENOSPC, "No space left on device", str(root / "metrics.json")),
                f"no space left on the device writing {root / 'metrics.json'}: ",
            ),
            id="disk-full-from-the-os",
        ),
        pytest.param(
            lambda root: (
                SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
                "no space left on the device writing an output (not named by the error): ",
            ),
            id="disk-full-unnamed",
        ),
        pytest.param(
            lambda root: (
                errors.BackboneError("backbone 'org/evil': not a folder, not in the Hugging Face cache"),
                "backbone 'org/evil': not a folder, not in the Hugging Face cache",
            ),
            id="unresolvable-backbone",
        ),
    ],
)
def test_a_foreseen_failure_prints_its_one_line(common, tmp_path, capsys, case) -> None:
    """A :data:`focalcse.errors.RULES` entry: ``error: <line>``, no traceback, no log file."""
    exc, line = case(tmp_path)
    common._concise_errors(*_raised(exc))
    err = capsys.readouterr().err
    assert err.startswith(f"error: {line}") and err.count("\n") == 1, err
    assert "unexpected error" not in err and not (tmp_path / ".focalcse/logs").exists()


def test_the_reliability_doc_lists_every_rule() -> None:
    doc = (REPO / "docs" / "reliability.md").read_text()
    assert [rule.failure for rule in errors.RULES if f"| {rule.failure} |" not in doc] == []


def test_a_stage_script_never_shows_a_bare_traceback(tmp_path: Path) -> None:
    script = "import _common\ndef work():\n    raise KeyError('no such thing')\nwork()\n"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO / "stages")}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("KeyError: 'no such thing' (unexpected error"), proc.stderr
    log = next((tmp_path / ".focalcse/logs").glob("*.log"))
    assert f".focalcse/logs/{log.name}" in lines[0] and "in work" in log.read_text()
    debug = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**env, "FOCALCSE_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback (most recent call last)" in debug.stderr and "in work" in debug.stderr


def test_a_yaml_syntax_error_is_one_line_naming_the_file(tmp_path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "params.yaml"
    bad.write_text("train:\n  lr: [1, 2\n")
    from focalcse.config import ConfigError, load_params

    with pytest.raises(ConfigError) as e:
        load_params(bad)
    assert str(e.value).startswith(f"{bad}:3:1: not valid YAML (") and "\n" not in str(e.value)
    done = subprocess.run(
        [sys.executable, "-m", "focalcse.cli", "params", "check", "--params", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{bad}:3:1: not valid YAML" in done.stderr and "Traceback" not in done.stderr
