"""Render ``dvc.yaml`` whole from the stage table (:mod:`focalcse.stage_table`).

    python -m focalcse.ops.dvc_yaml           # write dvc.yaml (``make dvc-yaml``)
    python -m focalcse.ops.dvc_yaml --check   # exit 1 if the committed file is not the rendering

Every line comes from the table except the code deps, which are computed here: the static import
closure of the stage's script (``stages/<x>.py``; a sibling such as ``stages/_common.py`` is importable
as a top-level module), then every ``focalcse`` module reached, counting imports inside functions and
``importlib.import_module("focalcse...")`` literals. A package's ``__init__.py`` runs on import and is
counted unless it holds only a docstring and ``__future__`` imports.

Two kinds of module are left out on purpose:

- **Observers** (:data:`OBSERVERS`): tracking and provenance describe a run (MLflow, ``*.meta.json``)
  and cannot change a model or a score, so editing them reruns nothing. Their own imports are not
  followed either. ``tests/test_tracking_outputs.py`` proves the claim: a tiny item trained with
  tracking on and off gives byte-identical outputs.
- **Registries' members**: the loss registry finds loss modules by scanning its folder, and the
  frameworks are imported by computed name. A stage that trains lists its own loss module (a
  ``${...}`` template DVC renders per item, :attr:`Stage.own_loss`) and a framework item its own
  framework's modules (:attr:`Stage.own_framework`, :func:`framework_own`), never every registered
  one, so a new loss or framework reruns nothing.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

import focalcse
from focalcse.atomic import atomic_write
from focalcse.paramsets import WORK_DIR, set_dir, use
from focalcse.stage_table import (
    ITEM_FRAMEWORK,
    REFERENCE_FRAMEWORK,
    STAGES,
    TOP_PLOTS,
    Entry,
    Stage,
    stage,
    stage_template,
)

ROOT = Path(focalcse.__file__).resolve().parents[2]  # the checkout whose package is imported
LOSSES_DIR = "src/focalcse/core/losses"
FRAMEWORKS_DIR = "src/focalcse/core/frameworks"
SETTINGS_DIR = f"{FRAMEWORKS_DIR}/settings"
FRAMEWORK = ITEM_FRAMEWORK
FRAMEWORK_TEMPLATES = (ITEM_FRAMEWORK, REFERENCE_FRAMEWORK)

# Modules that observe a run and cannot change its outputs: not deps, and not followed.
OBSERVERS = frozenset({"focalcse.ops.tracking", "focalcse.provenance"})
# Comments written after a code line.
COMMENTS = {
    f"{LOSSES_DIR}/__init__.py": "the registry (reads every SPEC, imports none)",
    f"{LOSSES_DIR}/${{item.loss}}.py": "its own loss only: a new loss retrains nothing",
    f"{LOSSES_DIR}/${{ablation.loss}}.py": "its own loss only: a new loss retrains nothing",
    f"{SETTINGS_DIR}/{FRAMEWORK}.py": "its own framework's settings only",
    f"{SETTINGS_DIR}/{REFERENCE_FRAMEWORK}.py": "the reference framework's settings only",
}
OWN_FRAMEWORK_COMMENT = "its own framework only"
CODE_COMMENT = "code: the import closure of the stage script, observers aside (`make dvc-yaml` writes it)"
# A set's dvc.yaml lies two folders below the checkout (sets/<name>/dvc.yaml).
SET_CODE_ROOT = "../../"
SET_HEADER = (
    "The parameter set {name!r} (params/{name}.yaml composed over params.yaml: ./params.yaml), run in",
    "this folder (`make reproduce PARAMS={name}`, or `dvc repro` here): its outputs, its dvc.lock and its",
    "report are its own, so it never prunes or overwrites another set's (`focalcse params use {name}`",
    "writes this file and params.yaml).",
)
HEADER = (
    "Rendered by `make dvc-yaml` from the stage table (src/focalcse/stage_table.py): edit the table, not",
    "this file (tests/test_dvc_yaml.py fails while they differ). train/evaluate fan out over",
    "sweep.backbones x sweep.losses x sweep.seeds; every path is the one focalcse.layout.Layout names.",
)


# ---------------------------------------------------------------- static import closure
# One rendering reads the source tree as it is at that moment: within it (:func:`snapshot`), a
# module's file, an ``__init__``'s triviality and an import closure are computed once (rendering the
# four sets' dvc.yaml asked for 71k module files and 328 closures: 6.7 s, now ~1 s). Outside it
# nothing is memoised, so a caller that edits the tree between two calls sees its edit.
_SNAPSHOT: ContextVar[dict[Any, Any] | None] = ContextVar("focalcse_dvc_yaml_snapshot", default=None)


@contextmanager
def snapshot() -> Iterator[None]:
    """Memoise the source-tree reads of the renderings inside (the tree must not change meanwhile)."""
    if _SNAPSHOT.get() is not None:  # nested: the outer one's
        yield
        return
    token = _SNAPSHOT.set({})
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)


def _memo(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    memo = _SNAPSHOT.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


@dataclass(frozen=True)
class Project:
    """The source tree of a checkout: ``src/`` and ``stages/`` under ``root``."""

    root: Path = ROOT

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def stages(self) -> Path:
        return self.root / "stages"

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def module_file(self, module: str) -> Path | None:
        """The file of a project module: ``focalcse.x.y`` under src/, a top-level name under stages/."""
        return _memo(("module_file", self.root, module), lambda: self._module_file(module))

    def _module_file(self, module: str) -> Path | None:
        parts = module.split(".")
        if parts[0] == "focalcse":
            base = self.src.joinpath(*parts)
        elif len(parts) == 1 and (self.stages / f"{module}.py").is_file():
            return self.stages / f"{module}.py"
        else:
            return None  # outside the project (stdlib, torch, ...)
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None

    def module_name(self, path: Path) -> tuple[str, bool]:
        """(dotted name, is a package) of a project file."""
        if path.parent == self.stages:
            return path.stem, False
        parts = list(path.relative_to(self.src).with_suffix("").parts)
        if parts[-1] == "__init__":
            return ".".join(parts[:-1]), True
        return ".".join(parts), False

    def direct_imports(self, path: Path) -> frozenset[str]:
        return _direct_imports(self, path)

    def closure(self, *roots: Path, observers: Iterable[str] = OBSERVERS) -> set[str]:
        """Repo-relative files of everything ``roots`` import inside the project, ``roots`` included;
        ``observers`` are neither listed nor followed."""
        observers = tuple(sorted(observers))
        key = ("closure", self.root, roots, observers)
        return set(_memo(key, lambda: frozenset(self._closure(roots, observers))))

    def _closure(self, roots: tuple[Path, ...], observers: tuple[str, ...]) -> set[str]:
        def observed(module: str) -> bool:  # an observer, or a module inside an observer package
            return any(module == o or module.startswith(f"{o}.") for o in observers)

        seen: set[Path] = set()
        todo = list(roots)
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            for module in self.direct_imports(path):
                for step in _with_parents(module):
                    target = self.module_file(step)
                    if target is not None and target not in seen and not observed(step):
                        todo.append(target)
        return {
            self.rel(p) for p in seen if not (p.name == "__init__.py" and p not in roots and trivial_init(p))
        }

    def files(self, path: str) -> set[str]:
        """A dep's Python files: the file itself, or every module under a folder."""
        full = self.root / path
        return {self.rel(p) for p in full.rglob("*.py")} if full.is_dir() else {path}


def trivial_init(path: Path) -> bool:
    """A package ``__init__.py`` that is only a docstring and ``from __future__`` imports."""
    return _memo(("trivial_init", path), lambda: _trivial_init(path))


def _trivial_init(path: Path) -> bool:
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
def _direct_imports(project: Project, path: Path) -> frozenset[str]:
    """Every project module ``path`` may import, anywhere in the file."""
    name, is_package = project.module_name(path)
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
    return frozenset(m for m in found if project.module_file(m) is not None)


# ---------------------------------------------------------------- the modules an item picks by name
def loss_own(name: str) -> list[str]:
    """The deps of an item that trains loss ``name`` (a loss name or a DVC template)."""
    return [f"{LOSSES_DIR}/{name}.py"]


def package_losses(project: Project) -> list[str]:
    """Every registered loss whose module lies in the package's loss folder."""
    from focalcse.core.losses import loss_names

    return [n for n in loss_names() if (project.root / loss_own(n)[0]).is_file()]


def framework_own(project: Project, name: str) -> list[str]:
    """A framework's own modules: ``core/frameworks/<name>.py`` or the package folder
    ``core/frameworks/<name>/`` (listed as the folder), every ``core/frameworks/<name>_*.py`` beside
    it, and its settings module ``core/frameworks/settings/<name>.py``."""
    folder = project.root / FRAMEWORKS_DIR
    own = [
        f"{FRAMEWORKS_DIR}/{p.name}"
        for p in sorted(folder.iterdir())
        if (p.is_dir() and p.name == name)
        or (p.suffix == ".py" and (p.stem == name or p.stem.startswith(f"{name}_")))
    ]
    return [*own, f"{SETTINGS_DIR}/{name}.py"]


def package_frameworks(project: Project) -> list[str]:
    """Every registered framework in the package (each with its settings module in settings/)."""
    from focalcse.core.frameworks import framework_names, framework_spec

    names = [f for f in framework_names() if framework_spec(f).module.startswith("focalcse.")]
    for name in names:
        wanted = f"focalcse.core.frameworks.settings.{name}"
        if framework_spec(name).settings_module != wanted:
            raise ValueError(
                f"framework {name}: SPEC settings must live in {wanted} (one file per item's deps)"
            )
    return names


def framework_template(project: Project, template: str = FRAMEWORK) -> list[str]:
    """The framework items' own deps as DVC templates (``core/frameworks/${item.framework}.py``). One
    templated line serves every framework, so every framework's own modules must have one shape."""
    names = package_frameworks(project)

    def shape(name: str, path: str) -> str:
        folder, _, last = path.rpartition("/")
        return f"{folder}/{last.replace(name, template, 1)}"

    shapes = {n: [shape(n, p) for p in framework_own(project, n)] for n in names}
    first = shapes[names[0]] if names else []
    odd = [n for n in names if shapes[n] != first]
    if odd:
        described = "; ".join(f"{n}: {', '.join(framework_own(project, n))}" for n in names)
        raise ValueError(
            f"frameworks' own modules differ in shape ({described}): expected each as <name>.py or a "
            "folder <name>/, with the same <name>_*.py beside it, so one templated dep names them per item"
        )
    return first


def _own_sets(st: Stage, project: Project) -> list[tuple[str, list[str], Any]]:
    """(template value, values it can take, deps of one value) of each module set ``st`` picks per item."""
    out: list[tuple[str, list[str], Any]] = []
    if st.own_loss:
        out.append((st.own_loss, package_losses(project), loss_own))
    if st.own_framework:
        out.append((st.own_framework, package_frameworks(project), lambda n: framework_own(project, n)))
    return out


def code_deps(name: str, project: Project | None = None, **values: str) -> list[str]:
    """Stage ``name``'s code deps: the script, its sibling modules, then src/ in order, then the
    stage's code folders. A per-item module appears as its template (``src/.../${item.loss}.py``)
    unless ``values`` names the item's own (``loss="infonce"``, ``framework="diffcse"``; an ablation's
    loss is ``loss`` too): then the deps of that item.

    A module that only some values' closures reach (DiffCSE's generator imports the training loop;
    PromptBERT's generator item does not) is listed for every item: a superset is safe (it can only
    rerun an item whose output then comes out the same). A per-item module of another value (one
    framework importing another's module) cannot be said by one templated line, and this raises."""
    project = project or Project()
    st = stage(name)
    script = project.root / st.script
    own = _own_sets(st, project)
    if st.own_framework:
        framework_template(project, st.own_framework)  # one shape, or a one-line error
    combos: list[list[tuple[str, list[str]]]] = [[]]
    for template, names, deps_of in own:
        names = names if "${" in template else [template]  # a fixed module
        combos = [[*c, (template, deps_of(n))] for c in combos for n in names]
    observers = OBSERVERS - st.observer_outputs
    closures = []
    for combo in combos:
        roots = [project.root / f for _, deps in combo for d in deps for f in sorted(project.files(d))]
        closures.append((combo, project.closure(script, *roots, observers=observers)))
    per_item = {f for combo, _ in closures for _, deps in combo for d in deps for f in project.files(d)}
    for combo, found in closures:
        mine = {f for _, deps in combo for d in deps for f in project.files(d)}
        other = (found & per_item) - mine
        if other:
            picked = ", ".join(d for _, deps in combo for d in deps)
            raise ValueError(
                f"{name}: with {picked} it also imports {sorted(other)}; one templated line cannot say that"
            )
    common = set.union(*(s for _, s in closures))
    keys = {
        "${item.loss}": "loss",
        "${ablation.loss}": "loss",
        **dict.fromkeys(FRAMEWORK_TEMPLATES, "framework"),
    }
    concrete: dict[str, str] = {}  # a template line -> the item's own (in the template's place)
    templates: list[str] = []
    for template, _, deps_of in own:
        lines_of = _templates(deps_of, template, project)
        templates += lines_of
        if keys[template] in values:
            concrete |= dict(zip(lines_of, deps_of(values[keys[template]]), strict=True))
    lines = sorted(common - per_item) + templates
    rel_script = st.script
    siblings = sorted(p for p in lines if p.startswith("stages/") and p != rel_script)
    src = [concrete.get(p, p) for p in sorted({p for p in lines if p.startswith("src/")})]
    folders = []
    # a code folder must hold a module the stage imports; a named one (read by name) any module
    for folder, imported in [*((f, True) for f in st.code_folders), *((f, False) for f in st.named_folders)]:
        inside = project.files(folder)
        if imported and not inside & set(src):
            raise ValueError(f"{name}: code folder {folder} holds no module the stage imports")
        if not imported and not any(p.endswith(".py") for p in inside):
            raise ValueError(f"{name}: named folder {folder} holds no module")
        src = [p for p in src if p not in inside]
        folders.append(folder)
    return [rel_script, *siblings, *src, *folders]


def _templates(deps_of: Any, template: str, project: Project) -> list[str]:
    return framework_template(project, template) if template in FRAMEWORK_TEMPLATES else deps_of(template)


# ---------------------------------------------------------------- the text
def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _comment(text: str) -> str:
    return f"   # {text}" if text else ""


def _entries(
    key: str, entries: Iterable[Entry], indent: str, key_comment: str = "", first: Iterable[str] = ()
) -> list[str]:
    out = [f"{indent}{key}:{_comment(key_comment)}", *(f"{indent}  # {c}" for c in first)]
    for e in entries:
        out += [f"{indent}  # {c}" for c in e.above]
        if e.options:
            out.append(f"{indent}  - {e.path}:{_comment(e.comment)}")
            out += [f"{indent}      {k}: {_scalar(v)}" for k, v in e.options]
        else:
            out.append(f"{indent}  - {e.path}{_comment(e.comment)}")
    return out


def _code_entries(name: str, project: Project, code_root: str = "") -> list[Entry]:
    st = stage(name)
    framework_lines = set(framework_template(project, st.own_framework)) if st.own_framework else set()
    return [
        Entry(
            code_root + p, comment=COMMENTS.get(p) or (OWN_FRAMEWORK_COMMENT if p in framework_lines else "")
        )
        for p in code_deps(name, project)
    ]


def command(cmd: str, code_root: str = "") -> str:
    """A table command run from a folder ``code_root`` below the checkout (``python stages/x.py`` ->
    ``python ../../stages/x.py``): a set's ``dvc.yaml`` runs in its own folder (:data:`SET_CODE_ROOT`)."""
    program, script, *rest = cmd.split(" ")
    return " ".join([program, code_root + script, *rest])


def render_stage(st: Stage, project: Project, code_root: str = "") -> list[str]:
    t = stage_template(st.name)
    out = [f"  # {c}" for c in st.above] + [f"  {st.name}:"]
    if st.matrix:
        out.append("    matrix:")
        out += [f"      {axis}: ${{{key}}}{_comment(c)}" for axis, key, c in st.matrix]
    out.append(f"    cmd: {command(t.cmd, code_root)}")
    out += [f"    # {c}" for c in st.key_above.get("always_changed", ())]
    if st.always_changed:
        out.append("    always_changed: true")
    out += _entries(
        "deps", [*_code_entries(st.name, project, code_root), *t.deps], "    ", first=[CODE_COMMENT]
    )
    out += _entries("params", t.params, "    ")
    for key in ("outs", "plots", "metrics"):
        entries = getattr(t, key)
        if entries:
            out += [f"    # {c}" for c in st.key_above.get(key, ())]
            out += _entries(key, entries, "    ", st.key_comment.get(key, ""))
    return out


def render(project: Project | None = None, set_name: str = "") -> str:
    """The whole of ``dvc.yaml``: the checkout's (the default set), or with ``set_name`` the one in
    ``sets/<set_name>/`` (:func:`focalcse.paramsets.set_dir`), whose stages run in that folder (their
    outputs, ``params.yaml`` and ``dvc.lock`` are the set's own) and reach the code two levels up."""
    with snapshot():
        return _render(project or Project(), set_name)


def _render(project: Project, set_name: str) -> str:
    code_root = SET_CODE_ROOT if set_name else ""
    header = HEADER if not set_name else (*HEADER, *SET_HEADER)
    out = [*(f"# {c.format(name=set_name)}" for c in header), "vars:", "  - params.yaml", "stages:"]
    for i, st in enumerate(STAGES):
        out += ([""] if i else []) + render_stage(st, project, code_root)
    out.append("")
    for e in TOP_PLOTS:
        out += [f"# {c}" for c in e.above]
    out += ["plots:", *(f"  - {e.path}" for e in TOP_PLOTS)]
    text = "\n".join(out) + "\n"
    _check_structure(text, project, code_root)
    return text


def _check_structure(text: str, project: Project, code_root: str = "") -> None:
    """The text parses to the table's stages (a guard on the hand-written emitter above)."""
    parsed = yaml.safe_load(text)
    for st in STAGES:
        t, body = stage_template(st.name), parsed["stages"][st.name]
        dep_paths = [d for d in body["deps"]]
        code = [code_root + p for p in code_deps(st.name, project)]
        if body["cmd"] != command(t.cmd, code_root) or dep_paths != [*code, *(e.path for e in t.deps)]:
            raise AssertionError(f"dvc.yaml rendering of {st.name} does not parse back to the table")
        for key in ("outs", "plots", "metrics"):
            want = [{e.path: dict(e.options)} if e.options else e.path for e in getattr(t, key)]
            if body.get(key, []) != want:
                raise AssertionError(
                    f"dvc.yaml rendering of {st.name}.{key} does not parse back to the table"
                )


def targets(root: Path) -> list[tuple[Path, str]]:
    """Every ``dvc.yaml`` of the checkout at ``root`` with its set's name: the default's, then each
    set folder's that ``focalcse params use`` has written (``sets/<name>/dvc.yaml``)."""
    sets = sorted(p.parent.name for p in (root / WORK_DIR).glob("*/dvc.yaml"))
    return [(root / "dvc.yaml", ""), *((set_dir(root, name) / "dvc.yaml", name) for name in sets)]


def write_set(root: str | Path, name: str) -> str:
    """``focalcse params use <name>``: the set's folder ``sets/<name>/`` gets its composed
    ``params.yaml`` (:func:`focalcse.paramsets.use`) and its ``dvc.yaml``. Returns what was written."""
    root = Path(root)
    line = use(root, name)
    path = set_dir(root, name) / "dvc.yaml"
    # the code deps of the checkout's source, or (a folder holding only params) of the imported package's
    source = root.resolve() if (root / "src" / "focalcse").is_dir() else ROOT
    atomic_write(path, render(Project(source), name))
    return f"{line}; {path.relative_to(root).as_posix()} rendered: run it there (`cd {path.parent.relative_to(root).as_posix()} && dvc repro`)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only compare (exit 1 if a dvc.yaml is stale)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: the imported package's)")
    ap.add_argument(
        "--file",
        type=Path,
        help="the one file to write or compare (default: <root>/dvc.yaml and every set's)",
    )
    args = ap.parse_args(argv)
    root = args.root.resolve()
    todo = [(args.file, "")] if args.file else targets(root)
    stale = 0
    with snapshot():  # writing a dvc.yaml changes no source: one reading of the tree for every set
        for path, name in todo:
            new = render(Project(root), name)
            old = path.read_text(encoding="utf-8") if path.is_file() else ""
            if new == old:
                print(f"{path}: current")
            elif args.check:
                print(
                    f"{path}: differs from the stage table's rendering; run `make dvc-yaml`", file=sys.stderr
                )
                stale += 1
            else:
                atomic_write(path, new)
                print(f"{path}: rendered")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
