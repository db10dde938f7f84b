"""dvc.yaml's ``deps:`` cover each stage's import closure inside the project, so editing any module a
stage runs reruns that stage (and nothing else).

``scripts/dvc_deps.py`` (``make dvc-deps``) writes those deps from the static import closure; here
dvc.yaml is rendered per matrix item and checked against the closure both ways, and the file must be
current. Observers (tracking, provenance) are left out: tests/test_tracking_outputs.py shows they
change no output.

The loss registry (``focalcse.core.losses``) finds loss modules by scanning its folder and imports
them lazily: a stage that trains gets its own loss module (``OWN_LOSS``), never every registered loss,
and no training or evaluation stage may depend on a folder holding the loss modules (adding a loss
would then rerun every existing item).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from focalcse.core.frameworks import framework_names
from focalcse.core.losses import loss_names

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("dvc_deps", ROOT / "scripts" / "dvc_deps.py")
dvc_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dvc_deps)
closure = dvc_deps.closure
SRC, STAGES = dvc_deps.SRC, dvc_deps.STAGES
LOSSES_DIR, FRAMEWORKS_DIR = dvc_deps.LOSSES_DIR, dvc_deps.FRAMEWORKS_DIR
OWN_LOSS, OWN_FRAMEWORK = dvc_deps.OWN_LOSS, dvc_deps.OWN_FRAMEWORK
LOSS_FREE = ("train", "ablate_tau", "ablate_m", "evaluate")  # no folder dep holding every loss


# ---------------------------------------------------------------- dvc.yaml, rendered per item
@cache
def _dvc() -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        yaml.safe_load((ROOT / "dvc.yaml").read_text()),  # anchors resolved by the loader
        yaml.safe_load((ROOT / "params.yaml").read_text()),
    )


def _lookup(context: dict[str, Any], key: str) -> Any:
    value: Any = context
    for part in key.strip().split("."):
        name, *indices = re.split(r"\[(\d+)\]", part)  # `seeds[0]`: DVC's list indexing
        value = value[name]
        for index in (i for i in indices if i):
            value = value[int(index)]
    return value


def _render(value: Any, context: dict[str, Any]) -> Any:
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\$\{([^}]+)\}", value.strip())
    if whole:
        return _lookup(context, whole.group(1))
    return re.sub(r"\$\{([^}]+)\}", lambda m: str(_lookup(context, m.group(1))), value)


def _dep_path(dep: Any) -> str:
    return next(iter(dep)) if isinstance(dep, dict) else str(dep)


def rendered_stages() -> list[tuple[str, str, list[str], dict[str, Any]]]:
    """(stage, dvc's item name, deps, render context) for every stage and matrix item.

    A ``loss`` axis covers every registered loss, not only the sweep's: an item any params file can
    select must list its own loss module."""
    dvc, params = _dvc()
    out = []
    for stage, spec in dvc["stages"].items():
        items: list[dict[str, Any]] = [{}]
        if "matrix" in spec:
            axes = {k: list(_render(v, params)) for k, v in spec["matrix"].items()}
            if "loss" in axes:
                axes["loss"] += [n for n in loss_names() if n not in axes["loss"]]
            if "backbone" in axes and not axes["backbone"]:  # sweep.framework_backbones: [] in params.yaml
                axes["backbone"] = list(params["sweep"]["backbones"])
            if "framework" in axes:  # every framework besides SimCSE, whatever params.yaml lists
                axes["framework"] += [f for f in framework_names() if f not in axes["framework"]]
            items = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
        for item in items:
            context = {**params, "item": item}
            deps = [_render(_dep_path(d), context).rstrip("/") for d in spec.get("deps", [])]
            assert not any("${" in d for d in deps), f"{stage}: unrendered dep in {deps}"
            name = f"{stage}@{'-'.join(str(v) for v in item.values())}" if item else stage
            out.append((stage, name, deps, context))
    return out


def _script(stage: str, spec: dict[str, Any]) -> Path:
    match = re.search(r"python\s+(stages/\S+\.py)", spec["cmd"])
    assert match, f"{stage}: cmd {spec['cmd']!r} does not run a stages/*.py script"
    return ROOT / match.group(1)


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(f"{d}/") for d in deps)


def _loss_folder_deps(deps: list[str]) -> list[str]:
    """The deps that are the loss folder or a folder above it."""
    return [d for d in deps if _covered(LOSSES_DIR, [d.rstrip("/")])]


def expected_closure(stage: str, context: dict[str, Any]) -> set[str]:
    roots = [_script(stage, _dvc()[0]["stages"][stage])]
    if stage in OWN_LOSS:
        loss = _render(OWN_LOSS[stage], context)
        roots.append(SRC / "focalcse" / "core" / "losses" / f"{loss}.py")
        assert roots[-1].is_file(), f"{stage}: no loss module {roots[-1]}"
    if stage in OWN_FRAMEWORK:
        for folder in dvc_deps.FRAMEWORK_FOLDERS:
            roots.append(ROOT / folder / f"{_render(OWN_FRAMEWORK[stage], context)}.py")
            assert roots[-1].is_file(), f"{stage}: no framework module {roots[-1]}"
    observers = dvc_deps.OBSERVERS - dvc_deps.OBSERVER_OUTPUTS.get(stage, frozenset())
    return closure(*roots, observers=observers)


# ---------------------------------------------------------------- the checks
def test_closure_follows_function_level_relative_and_submodule_imports() -> None:
    train = closure(STAGES / "train.py")
    assert "stages/_common.py" in train  # `from _common import ...`
    assert "src/focalcse/core/distributed.py" in train  # imported inside main()
    assert "src/focalcse/steps/train.py" in train  # `from focalcse.steps import train`: a submodule
    assert "src/focalcse/core/losses/__init__.py" in train  # the registry, a non-trivial package
    assert "src/focalcse/steps/__init__.py" not in train  # docstring only
    # the registry imports loss modules by computed name: only an item's own loss is added
    assert not {f"{LOSSES_DIR}/{n}.py" for n in loss_names()} & train
    focal = closure(SRC / "focalcse" / "core" / "losses" / "focal_infonce.py")
    assert f"{LOSSES_DIR}/base.py" in focal


def test_every_stage_lists_its_import_closure() -> None:
    missing: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for stage, name, deps, context in rendered_stages():
        gap = tuple(sorted(f for f in expected_closure(stage, context) if not _covered(f, deps)))
        if gap:
            missing.setdefault((stage, gap), []).append(name)
    report = [
        f"{stage} ({len(names)} item(s): {', '.join(names)}) misses:\n    " + "\n    ".join(gap)
        for (stage, gap), names in missing.items()
    ]
    assert not missing, "dvc.yaml deps miss modules the stage imports:\n" + "\n".join(report)


def test_training_stages_depend_on_their_own_loss_only() -> None:
    losses_dir = ROOT / LOSSES_DIR
    every_loss = {f"{LOSSES_DIR}/{p.name}" for p in losses_dir.glob("*.py")} - {
        f"{LOSSES_DIR}/__init__.py",
        f"{LOSSES_DIR}/base.py",
    }
    checked = set()
    for stage, name, deps, context in rendered_stages():
        if not stage.startswith(LOSS_FREE):
            continue
        checked.add(stage)
        folders = _loss_folder_deps(deps)
        assert not folders, f"{name}: folder dep {folders} holds every loss; a new loss would rerun it"
        own = {f"{LOSSES_DIR}/{_render(OWN_LOSS[stage], context)}.py"} if stage in OWN_LOSS else set()
        assert {d for d in deps if d in every_loss} == own, f"{name}: loss deps {deps}"
    assert checked >= set(LOSS_FREE)


def test_stages_depend_on_their_own_framework_only() -> None:
    """SimCSE's stages (and every other) depend on no framework module and no framework's settings,
    so editing PromptBERT or DiffCSE (code or settings) reruns only their own items; a framework item
    lists its own module and settings module and no other's."""
    folders = dvc_deps.FRAMEWORK_FOLDERS
    modules = {f"{folder}/{f}.py" for f in framework_names() for folder in folders}
    assert len(modules) == 2 * len(framework_names()) and all((ROOT / m).is_file() for m in modules)
    checked = set()
    for stage, name, deps, context in rendered_stages():
        own = (
            {f"{folder}/{_render(OWN_FRAMEWORK[stage], context)}.py" for folder in folders}
            if stage in OWN_FRAMEWORK
            else set()
        )
        assert {d for d in deps if d in modules} == own, f"{name}: framework deps {deps}"
        assert not any(_covered(m, [d]) for m in modules for d in deps if d not in modules), f"{name}: {deps}"
        checked.add(stage)
    assert checked >= {"train", "evaluate", "train_framework", "evaluate_framework", "pretrain_generator"}


def test_dep_checks_can_fail() -> None:
    assert _loss_folder_deps(["src", "src/focalcse/core", f"{LOSSES_DIR}/", f"{LOSSES_DIR}/base.py"]) == [
        "src",
        "src/focalcse/core",
        f"{LOSSES_DIR}/",
    ]
    assert _covered("src/focalcse/data/sts.py", ["src/focalcse/data"])
    assert not _covered("src/focalcse/data/sts.py", ["src/focalcse/dat", "src/focalcse/data/sts"])


@pytest.mark.parametrize("stage", sorted(OWN_LOSS))
def test_own_loss_stages_exist(stage: str) -> None:
    assert stage in _dvc()[0]["stages"], f"OWN_LOSS names {stage!r}, which dvc.yaml no longer has"


def test_no_stage_lists_code_it_does_not_import() -> None:
    """The other direction: a code dep outside the closure reruns the stage for an edit that cannot
    change its output (e.g. every stage depending on the training loop through an error class).

    One templated deps list serves every item of a stage, so a module that only some items' own
    framework reaches (DiffCSE's generator imports the training loop) is listed for all of them
    (``dvc_deps.code_deps``): the bound is the union of the stage's items' closures."""
    stages = rendered_stages()
    union: dict[str, set[str]] = {}
    for stage, _, _, context in stages:
        union.setdefault(stage, set()).update(expected_closure(stage, context))
    extra: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for stage, name, deps, context in stages:
        own = (
            {f"{folder}/{_render(OWN_FRAMEWORK[stage], context)}.py" for folder in dvc_deps.FRAMEWORK_FOLDERS}
            if stage in OWN_FRAMEWORK
            else set()
        )
        own |= {f"{LOSSES_DIR}/{_render(OWN_LOSS[stage], context)}.py"} if stage in OWN_LOSS else set()
        needed = {f for f in union[stage] if f in own or not _is_per_item(f)} | expected_closure(
            stage, context
        )
        code = [d for d in deps if d.startswith(("stages/", "src/"))]
        unused = tuple(d for d in code if not any(f == d or f.startswith(f"{d}/") for f in needed))
        if unused:
            extra.setdefault((stage, unused), []).append(name)
    report = [
        f"{stage} ({', '.join(names)}) lists:\n    " + "\n    ".join(u) for (stage, u), names in extra.items()
    ]
    assert not extra, "dvc.yaml deps list code the stage never imports:\n" + "\n".join(report)


def _is_per_item(path: str) -> bool:
    """A loss, framework or framework-settings module: listed for its own items only."""
    folders = (LOSSES_DIR, *dvc_deps.FRAMEWORK_FOLDERS)
    return any(path.rpartition("/")[0] == f for f in folders) and not path.endswith(
        ("__init__.py", "base.py")
    )


# ---------------------------------------------------------------- the writer
def test_dvc_yaml_is_current() -> None:
    """`make dvc-deps` has been run: rewriting dvc.yaml changes nothing."""
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    assert dvc_deps.stale_stages(text) == [], "run `make dvc-deps`"
    assert dvc_deps.render(text) == text


def test_writer_restores_a_missing_and_drops_an_extra_dep() -> None:
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    line = "      - src/focalcse/core/training.py\n"
    assert line in text
    broken = text.replace(line, "", 1).replace(
        "      - src/focalcse/steps/sample.py\n",
        "      - src/focalcse/steps/sample.py\n      - src/focalcse/ops/tracking/__init__.py\n",
        1,
    )
    assert set(dvc_deps.stale_stages(broken)) == {"sample", "train"}
    assert dvc_deps.render(broken) == text


def test_observers_are_no_deps_except_where_they_are_the_output() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    train = dvc_deps.code_deps("train", stages["train"]["cmd"])
    assert "src/focalcse/ops/tracking/__init__.py" not in train and "src/focalcse/provenance.py" not in train
    assert "src/focalcse/core/training.py" in train and f"{LOSSES_DIR}/${{item.loss}}.py" in train
    # stages/train.py imports tracking, and nothing but tracking reaches mlflow-only helpers
    whole = closure(STAGES / "train.py", observers=())
    assert {"src/focalcse/ops/tracking/__init__.py", "src/focalcse/ops/tracking/runs.py"} <= whole
    assert not any("/ops/tracking/" in f for f in closure(STAGES / "train.py"))  # the package, whole
    report = dvc_deps.code_deps("report", stages["report"]["cmd"])
    assert "src/focalcse/provenance.py" in report  # the report prints each result's provenance
    assert "src/focalcse/ops/tracking/__init__.py" not in report
