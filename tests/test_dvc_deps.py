"""dvc.yaml's ``deps:`` cover each stage's import closure inside the project, so editing any module a
stage runs reruns that stage (and nothing else).

The closure is derived statically: ``ast`` over ``stages/<script>.py`` (``stages/_common.py`` and any
other sibling is importable as a top-level module), then every ``focalcse`` module reached, counting
imports inside functions and ``importlib.import_module("focalcse...")`` literals; a package's
``__init__.py`` runs on import and is counted unless it is only a docstring and ``__future__`` imports.

The loss registry (``focalcse.core.losses``) finds loss modules by scanning its folder and imports
them lazily: a stage that trains gets its own loss module (``OWN_LOSS``), never every registered loss,
and no training or evaluation stage may depend on a folder holding the loss modules (adding a loss
would then rerun every existing item).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from focalcse.config import BASE_FRAMEWORK, FRAMEWORKS
from focalcse.core.losses import loss_names

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
STAGES = ROOT / "stages"
LOSSES_DIR = "src/focalcse/core/losses"
# The loss module a stage trains with, as dvc.yaml names it (rendered per item).
OWN_LOSS = {
    "train": "${item.loss}",
    "train_framework": "${item.loss}",
    "ablate_tau": "${ablation.loss}",
    "ablate_m": "${ablation.loss}",
}
FRAMEWORKS_DIR = "src/focalcse/core/frameworks"
# A framework other than SimCSE is imported by computed name (focalcse.steps.train.framework_encoder,
# focalcse.core.model.from_pretrained): its items list their own framework module.
OWN_FRAMEWORK = {
    "train_framework": "${item.framework}",
    "evaluate_framework": "${item.framework}",
    "pretrain_generator": "diffcse",  # DiffCSE's generator: its masking
}
LOSS_FREE = ("train", "ablate_tau", "ablate_m", "evaluate")  # no folder dep holding every loss


# ---------------------------------------------------------------- static import closure
def _module_file(module: str) -> Path | None:
    """The file of a project module: ``focalcse.x.y`` under src/, a top-level name under stages/."""
    parts = module.split(".")
    if parts[0] == "focalcse":
        base = SRC.joinpath(*parts)
    elif len(parts) == 1 and (STAGES / f"{module}.py").is_file():
        return STAGES / f"{module}.py"
    else:
        return None  # outside the project (stdlib, torch, ...)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _module_name(path: Path) -> tuple[str, bool]:
    """(dotted name, is a package) of a project file."""
    if path.parent == STAGES:
        return path.stem, False
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _trivial_init(path: Path) -> bool:
    """A package ``__init__.py`` that is only a docstring and ``from __future__`` imports."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        return False
    return True


def _with_parents(module: str) -> Iterator[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs its packages first."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


@cache
def _direct_imports(path: Path) -> frozenset[str]:
    """Every project module ``path`` may import, anywhere in the file."""
    name, is_package = _module_name(path)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            # `from pkg import name`: name may be a submodule (imported too) or an attribute
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0]
            if callee == "import_module" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
    return frozenset(m for m in found if _module_file(m) is not None)


def closure(*roots: Path) -> set[str]:
    """Repo-relative files of everything ``roots`` import inside the project, ``roots`` included."""
    seen: set[Path] = set()
    todo = list(roots)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _direct_imports(path):
            for step in _with_parents(module):
                target = _module_file(step)
                if target is not None and target not in seen:
                    todo.append(target)
    return {
        p.relative_to(ROOT).as_posix()
        for p in seen
        if not (p.name == "__init__.py" and p not in roots and _trivial_init(p))
    }


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
                axes["framework"] += [
                    f for f in FRAMEWORKS if f != BASE_FRAMEWORK and f not in axes["framework"]
                ]
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
        roots.append(ROOT / FRAMEWORKS_DIR / f"{_render(OWN_FRAMEWORK[stage], context)}.py")
        assert roots[-1].is_file(), f"{stage}: no framework module {roots[-1]}"
    return closure(*roots)


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
    """SimCSE's stages (and every other) depend on no framework module, so editing PromptBERT or
    DiffCSE reruns only their own items; a framework item lists its own module and no other's."""
    modules = {f"{FRAMEWORKS_DIR}/{f}.py" for f in FRAMEWORKS if f != BASE_FRAMEWORK}
    checked = set()
    for stage, name, deps, context in rendered_stages():
        own = (
            {f"{FRAMEWORKS_DIR}/{_render(OWN_FRAMEWORK[stage], context)}.py"}
            if stage in OWN_FRAMEWORK
            else set()
        )
        assert {d for d in deps if d in modules} == own, f"{name}: framework deps {deps}"
        assert not any(_covered(m, [d]) for m in modules for d in deps if d not in modules), f"{name}: {deps}"
        checked.add(stage)
    assert checked >= {"train", "evaluate", "train_framework", "evaluate_framework"}


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
    change its output (e.g. every stage depending on the training loop through an error class)."""
    extra: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for stage, name, deps, context in rendered_stages():
        needed = expected_closure(stage, context)
        code = [d for d in deps if d.startswith(("stages/", "src/"))]
        unused = tuple(d for d in code if not any(f == d or f.startswith(f"{d}/") for f in needed))
        if unused:
            extra.setdefault((stage, unused), []).append(name)
    report = [
        f"{stage} ({', '.join(names)}) lists:\n    " + "\n    ".join(u) for (stage, u), names in extra.items()
    ]
    assert not extra, "dvc.yaml deps list code the stage never imports:\n" + "\n".join(report)
