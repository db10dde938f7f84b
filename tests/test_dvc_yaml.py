"""dvc.yaml is the stage table's rendering, and each item's code deps are its import closure.

The committed file must equal the rendering (``make dvc-yaml``). DVC's own parser then expands it for
parameter sets and must agree with the table's expansion (:func:`focalcse.stage_table.expand`: item
names, commands, data deps, params, outputs) and with each item's code deps
(:func:`focalcse.ops.dvc_yaml.code_deps` given the item's loss and framework), so the templates and
the table say the same thing and no test renders DVC templates itself.

Code deps cover each item's import closure and list nothing it never imports; an item depends on its
own loss and its own framework's modules only, never on a folder holding every loss or framework (a
new one would rerun every existing item). Observers (tracking, provenance) are left out:
tests/test_tracking_outputs.py shows they change no output.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from focalcse.config import load_params
from focalcse.ops import dvc_yaml
from focalcse.ops.dvc_yaml import (
    FRAMEWORKS_DIR,
    LOSSES_DIR,
    SETTINGS_DIR,
    Project,
    code_deps,
    framework_own,
    framework_template,
    loss_own,
    package_frameworks,
    package_losses,
)
from focalcse.paramsets import compose_set
from focalcse.stage_table import STAGES, expand, stage

ROOT = Path(__file__).resolve().parents[1]
P = Project(ROOT)
LOSS_FREE = ("train", "ablate_tau", "ablate_m", "evaluate")  # no folder dep holding every loss


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(f"{d}/") for d in deps)


# ---------------------------------------------------------------- every item, every registered value
def all_items() -> list[tuple[str, dict[str, str]]]:
    """(stage, its per-item values) for every stage and every package loss x framework it can pick:
    any params file can select them, not only the sweep's."""
    out = []
    for st in STAGES:
        axes: dict[str, list[str]] = {}
        if st.own_loss:
            axes["loss"] = package_losses(P)
        if st.own_framework:
            axes["framework"] = package_frameworks(P)
        out += [(st.name, dict(zip(axes, combo))) for combo in itertools.product(*axes.values())]
    return out


def own_deps(name: str, values: dict[str, str]) -> set[str]:
    """The files of the modules the item picks by name (its own loss and framework; a stage's
    ``named_folders``, whose modules it reads by name: the report's loss SPECs and settings classes)."""
    deps = [*loss_own(values["loss"])] if "loss" in values else []
    deps += framework_own(P, values["framework"]) if "framework" in values else []
    deps += stage(name).named_folders
    return {f for d in deps for f in P.files(d)}


def expected_closure(name: str, values: dict[str, str]) -> set[str]:
    st = stage(name)
    roots = [ROOT / f for f in sorted(own_deps(name, values))]
    return P.closure(ROOT / st.script, *roots, observers=dvc_yaml.OBSERVERS - st.observer_outputs)


def _is_per_item(path: str) -> bool:
    """A loss, framework or framework-settings module: listed for its own items only."""
    parent = path.rpartition("/")[0]
    if parent in (LOSSES_DIR, FRAMEWORKS_DIR, SETTINGS_DIR):
        return not path.endswith(("__init__.py", "base.py"))
    return parent.startswith(f"{FRAMEWORKS_DIR}/") and parent != SETTINGS_DIR  # a framework package's


# ---------------------------------------------------------------- the file is the rendering
def test_committed_dvc_yaml_is_the_rendering() -> None:
    assert (ROOT / "dvc.yaml").read_text(encoding="utf-8") == dvc_yaml.render(P), "run `make dvc-yaml`"
    for path, name in dvc_yaml.targets(ROOT)[1:]:  # every committed set folder's (sets/<name>/dvc.yaml)
        assert path.read_text(encoding="utf-8") == dvc_yaml.render(P, name), f"{path}: run `make dvc-yaml`"


def test_a_set_folder_runs_the_same_table_apart(tmp_path: Path) -> None:
    """A set's dvc.yaml (sets/<name>/) as DVC reads it: the table's items, each writing the table's
    paths inside the set's folder and running the checkout's scripts and code from two levels up."""
    from dvc.repo import Repo

    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    here = tmp_path / "sets" / "frameworks"
    here.mkdir(parents=True)
    (here / "dvc.yaml").write_text(dvc_yaml.render(P, "frameworks"))
    (here / "params.yaml").write_text(yaml.safe_dump(compose_set(ROOT, "frameworks"), sort_keys=False))
    items = {it.name: it for it in expand(load_params(here / "params.yaml"))}
    with Repo(str(tmp_path)) as repo:
        mine = [s for s in repo.index.stages if Path(s.path).parent == here]
        others = [s for s in repo.index.stages if Path(s.path).parent == tmp_path]
        assert sorted(s.name for s in mine) == sorted(items) and others  # the default's stages too
        default_outs = {str(o.fs_path) for s in others for o in s.outs}
        for s in mine:
            it = items[s.name]
            assert Path(s.wdir) == here and s.cmd == dvc_yaml.command(it.cmd, "../../")
            assert [o.def_path for o in s.outs] == [e.path for e in (*it.outs, *it.metrics, *it.plots)]
            assert all(Path(o.fs_path).is_relative_to(here) for o in s.outs)
            assert not {str(o.fs_path) for o in s.outs} & default_outs  # never the default's paths
            code = [d.def_path for d in s.deps if getattr(d, "params", None) is None][:1]
            assert code == [f"../../{stage(it.stage).script}"]


def test_check_mode_fails_on_a_stale_file_and_writing_fixes_it(tmp_path: Path, capsys) -> None:
    stale = tmp_path / "dvc.yaml"
    stale.write_text(
        (ROOT / "dvc.yaml").read_text().replace("      - src/focalcse/core/training.py\n", "", 1)
    )
    assert dvc_yaml.main(["--check", "--root", str(ROOT), "--file", str(stale)]) == 1
    assert "run `make dvc-yaml`" in capsys.readouterr().err
    assert dvc_yaml.main(["--root", str(ROOT), "--file", str(stale)]) == 0
    assert stale.read_text() == (ROOT / "dvc.yaml").read_text()
    assert dvc_yaml.main(["--check", "--root", str(ROOT), "--file", str(stale)]) == 0


# ---------------------------------------------------------------- DVC's expansion is the table's
def _dvc_stages(tmp: Path, params: dict[str, Any]) -> dict[str, Any]:
    from dvc.repo import Repo

    shutil.copy(ROOT / "dvc.yaml", tmp / "dvc.yaml")
    (tmp / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp, check=True)
    with Repo(str(tmp)) as repo:
        return {s.name: s for s in repo.index.stages}


@pytest.mark.parametrize("param_set", ["", "frameworks", "paper"])
def test_dvc_expands_dvc_yaml_as_the_table_does(tmp_path: Path, param_set: str) -> None:
    raw = compose_set(ROOT, param_set) if param_set else yaml.safe_load((ROOT / "params.yaml").read_text())
    stages = _dvc_stages(tmp_path, raw)
    items = expand(load_params(tmp_path / "params.yaml"))
    assert [it.name for it in items] == list(stages)
    for it in items:
        s = stages[it.name]
        params = [d for d in s.deps if getattr(d, "params", None) is not None]
        files = [d.def_path for d in s.deps if d not in params]
        assert s.cmd == it.cmd, it.name
        assert [d for d in files if not d.startswith(("src/", "stages/"))] == [e.path for e in it.deps], (
            it.name
        )
        assert sorted(k for d in params for k in d.params) == sorted(e.path for e in it.params), it.name
        assert [o.def_path for o in s.outs] == [e.path for e in (*it.outs, *it.metrics, *it.plots)], it.name
        assert {o.def_path: o.use_cache for o in s.outs} == {
            e.path: dict(e.options).get("cache", True) for e in (*it.outs, *it.metrics, *it.plots)
        }
        # the per-item code deps DVC renders from the templates are the item's own
        own = {"loss": it.values.get("loss", raw["ablation"]["loss"])} if stage(it.stage).own_loss else {}
        # an item's framework axis, or the reference (the sweep's first) for a stage without one
        reference = (raw["sweep"].get("frameworks") or ["simcse"])[0]
        own |= {"framework": it.values.get("framework", reference)} if stage(it.stage).own_framework else {}
        assert [d for d in files if d.startswith(("src/", "stages/"))] == code_deps(it.stage, P, **own), (
            it.name
        )
    if param_set == "paper":
        assert {it.stage for it in items} == {st.name for st in STAGES}  # every stage has items


# ---------------------------------------------------------------- code deps and the import closure
def test_closure_follows_function_level_relative_and_submodule_imports() -> None:
    train = P.closure(P.stages / "train.py")
    assert "stages/_common.py" in train  # `from _common import ...`
    assert "src/focalcse/core/distributed.py" in train  # imported inside main()
    assert "src/focalcse/steps/train.py" in train  # `from focalcse.steps import train`: a submodule
    assert "src/focalcse/core/losses/__init__.py" in train  # the registry, a non-trivial package
    assert "src/focalcse/steps/__init__.py" not in train  # docstring only
    # the registry imports loss modules by computed name: only an item's own loss is added
    assert not {loss_own(n)[0] for n in package_losses(P)} & train
    focal = P.closure(ROOT / loss_own("focal_infonce")[0])
    assert f"{LOSSES_DIR}/base.py" in focal


def test_every_item_lists_its_import_closure_and_only_existing_files() -> None:
    missing, absent = {}, []
    for name, values in all_items():
        deps = code_deps(name, P, **values)
        absent += [f"{name} {values}: {d}" for d in deps if not (ROOT / d).exists()]
        gap = sorted(f for f in expected_closure(name, values) if not _covered(f, deps))
        if gap:
            missing[f"{name} {values}"] = gap
    assert not absent, "code deps that do not exist:\n" + "\n".join(absent)
    assert not missing, f"deps miss modules the item imports: {missing}"


def test_no_item_lists_code_it_does_not_import() -> None:
    """The other direction: a code dep outside the closure reruns the item for an edit that cannot
    change its output. One templated deps list serves every item of a stage, so a module that only
    some items' own framework reaches (DiffCSE's generator imports the training loop) is listed for
    all of them: the bound is the union of the stage's items' closures."""
    union: dict[str, set[str]] = {}
    for name, values in all_items():
        union.setdefault(name, set()).update(expected_closure(name, values))
    extra = {}
    for name, values in all_items():
        own = own_deps(name, values)
        needed = {f for f in union[name] if f in own or not _is_per_item(f)} | expected_closure(name, values)
        unused = [d for d in code_deps(name, P, **values) if not any(_covered(f, [d]) for f in needed)]
        if unused:
            extra[f"{name} {values}"] = unused
    assert not extra, f"deps list code the item never imports: {extra}"


def test_items_depend_on_their_own_loss_and_framework_only() -> None:
    losses = {loss_own(n)[0] for n in package_losses(P)}
    frameworks = {f for n in package_frameworks(P) for d in framework_own(P, n) for f in P.files(d)}
    assert len(frameworks) >= 2 * len(package_frameworks(P))
    checked = set()
    for name, values in all_items():
        deps = code_deps(name, P, **values)
        files = {f for d in deps for f in P.files(d)}
        own = own_deps(name, values)
        assert files & losses == own & losses, f"{name} {values}: loss deps {sorted(files & losses)}"
        assert files & frameworks == own & frameworks, (
            f"{name} {values}: framework deps {sorted(files & frameworks)}"
        )
        folders = [
            d
            for d in deps
            if not d.endswith(".py") and _covered(LOSSES_DIR, [d]) and d not in stage(name).named_folders
        ]
        assert not folders, f"{name}: folder dep {folders} holds every loss; a new loss would rerun it"
        checked.add(name)
    assert checked >= {*LOSS_FREE, "train", "evaluate", "pretrain_generator"}


def test_templates_name_the_own_modules() -> None:
    train = code_deps("train")
    assert f"{LOSSES_DIR}/${{item.loss}}.py" in train and f"{LOSSES_DIR}/base.py" in train
    # an ablation trains the reference framework (the sweep's first) with its own loss
    assert [d for d in code_deps("ablate_m") if "${" in d] == [
        f"{FRAMEWORKS_DIR}/${{sweep.frameworks[0]}}",
        f"{SETTINGS_DIR}/${{sweep.frameworks[0]}}.py",
        f"{LOSSES_DIR}/${{ablation.loss}}.py",
    ]
    fw = code_deps("train")
    assert {f"{FRAMEWORKS_DIR}/${{item.framework}}", f"{SETTINGS_DIR}/${{item.framework}}.py"} <= set(fw)
    report = code_deps("report")
    assert not any("${" in d for d in report)
    # its own package whole, then the folders whose modules it reads by name (every loss's SPEC: the
    # report, seconds long, reruns for any loss edit; every framework's settings class)
    assert report[-3:] == ["src/focalcse/report", LOSSES_DIR, SETTINGS_DIR]


def test_observers_are_no_deps_except_where_they_are_the_output() -> None:
    train = code_deps("train")
    assert "src/focalcse/ops/tracking/__init__.py" not in train and "src/focalcse/provenance.py" not in train
    # stages/train.py imports tracking, and nothing but tracking reaches mlflow-only helpers
    whole = P.closure(P.stages / "train.py", observers=())
    assert {"src/focalcse/ops/tracking/__init__.py", "src/focalcse/ops/tracking/runs.py"} <= whole
    assert not any("/ops/tracking/" in f for f in P.closure(P.stages / "train.py"))  # the package, whole
    report = code_deps("report")
    assert "src/focalcse/provenance.py" in report  # the report prints each result's provenance
    assert "src/focalcse/ops/tracking/__init__.py" not in report


def test_dep_checks_can_fail() -> None:
    assert _covered("src/focalcse/data/sts.py", ["src/focalcse/data"])
    assert not _covered("src/focalcse/data/sts.py", ["src/focalcse/dat", "src/focalcse/data/sts"])
    assert _is_per_item(f"{FRAMEWORKS_DIR}/diffcse/__init__.py") and _is_per_item(
        f"{FRAMEWORKS_DIR}/diffcse.py"
    )
    assert not _is_per_item(f"{LOSSES_DIR}/base.py") and not _is_per_item(f"{FRAMEWORKS_DIR}/__init__.py")


# ---------------------------------------------------------------- a framework as a package folder
def _copy_sources(tmp: Path) -> Project:
    for folder in ("src", "stages"):
        shutil.copytree(
            ROOT / folder, tmp / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    return Project(tmp)


def _as_file(project: Project, name: str) -> None:
    """Framework ``name``'s package folder turned back into one module ``<name>.py``."""
    package = project.root / FRAMEWORKS_DIR / name
    text = "\n".join(p.read_text() for p in sorted(package.glob("*.py")))
    shutil.rmtree(package)
    (project.root / FRAMEWORKS_DIR / f"{name}.py").write_text(text)


def test_a_framework_package_is_one_folder_dep_of_its_own_items(tmp_path: Path) -> None:
    """The built-in frameworks are package folders: a module added to one is a dep of its own items
    only, through the folder."""
    project = _copy_sources(tmp_path)
    (project.root / FRAMEWORKS_DIR / "diffcse" / "extra.py").write_text('"""More of the framework."""\n')
    folder = f"{FRAMEWORKS_DIR}/${{item.framework}}"
    assert framework_template(project) == [folder, f"{SETTINGS_DIR}/${{item.framework}}.py"]
    for name in ("train", "evaluate", "pretrain_generator"):
        deps = code_deps(name, project)
        assert folder in deps and not any(d.startswith(f"{FRAMEWORKS_DIR}/diffcse") for d in deps), deps
        mine = code_deps(
            name, project, framework="diffcse", **({"loss": "infonce"} if "train" in name else {})
        )
        assert f"{FRAMEWORKS_DIR}/diffcse" in mine and f"{FRAMEWORKS_DIR}/promptbert" not in mine
        assert not any(d.startswith(f"{FRAMEWORKS_DIR}/simcse") for d in mine), mine


def test_framework_modules_of_different_shapes_are_refused(tmp_path: Path) -> None:
    project = _copy_sources(tmp_path)
    (project.root / FRAMEWORKS_DIR / "diffcse_generator.py").write_text('"""DiffCSE\'s generator."""\n')
    assert f"{FRAMEWORKS_DIR}/diffcse_generator.py" in framework_own(project, "diffcse")
    assert f"{FRAMEWORKS_DIR}/diffcse" in framework_own(project, "diffcse")
    with pytest.raises(ValueError, match=r"frameworks' own modules differ in shape .*diffcse_generator\.py"):
        code_deps("train", project)
    (project.root / FRAMEWORKS_DIR / "promptbert_generator.py").write_text('"""PromptBERT\'s."""\n')
    with pytest.raises(ValueError, match=r"frameworks' own modules differ in shape .*simcse"):
        code_deps("train", project)  # every framework, SimCSE too, must have the same shape
    (project.root / FRAMEWORKS_DIR / "simcse_generator.py").write_text('"""SimCSE\'s."""\n')
    assert f"{FRAMEWORKS_DIR}/${{item.framework}}_generator.py" in code_deps("train", project)
    _as_file(project, "diffcse")  # a single file beside a package
    with pytest.raises(ValueError, match="differ in shape"):
        framework_template(project)


def test_a_rendering_memoises_the_tree_only_while_it_runs(tmp_path: Path) -> None:
    """Within one rendering the tree is read once; afterwards an edit is seen again."""
    project = _copy_sources(tmp_path)
    before = dvc_yaml.render(project)
    assert dvc_yaml._SNAPSHOT.get() is None
    (project.root / FRAMEWORKS_DIR / "diffcse" / "extra.py").write_text("from focalcse import atomic\n")
    assert dvc_yaml.render(project) == before  # the framework folder already covers the new module
    with dvc_yaml.snapshot():
        first = project.closure(project.root / "stages" / "train.py")
        assert project.closure(project.root / "stages" / "train.py") == first
