"""Write (or check) the code ``deps:`` of every stage in dvc.yaml from the stage's import closure.

    python scripts/dvc_deps.py           # rewrite dvc.yaml's code deps in place (``make dvc-deps``)
    python scripts/dvc_deps.py --check   # exit 1, listing the stages whose deps are stale

A stage depends on the project modules its script can import, so editing any of them reruns it and
editing anything else does not. The closure is static: ``ast`` over ``stages/<script>.py`` (a sibling
such as ``stages/_common.py`` is importable as a top-level module), then every ``focalcse`` module
reached, counting imports inside functions and ``importlib.import_module("focalcse...")`` literals. A
package's ``__init__.py`` runs on import and is counted unless it holds only a docstring and
``__future__`` imports.

Two kinds of module are left out on purpose:

- **Observers** (:data:`OBSERVERS`): tracking and provenance describe a run (MLflow, ``*.meta.json``)
  and cannot change a model or a score, so editing them reruns nothing. Their own imports are not
  followed either. ``tests/test_tracking_outputs.py`` proves the claim: a tiny item trained with
  tracking on and off gives byte-identical outputs.
- **Registries' members**: the loss registry finds loss modules by scanning its folder, and the
  frameworks are imported by computed name. A stage that trains lists its own loss module
  (:data:`OWN_LOSS`, a ``${...}`` template DVC renders per item) and its own framework
  (:data:`OWN_FRAMEWORK`), never every registered one, so a new loss or framework reruns nothing.

Only the code lines of each ``deps:`` block (``- stages/...`` and ``- src/...``) are rewritten; data
deps, comments on kept lines and everything else in dvc.yaml stay as written.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
STAGES = ROOT / "stages"
DVC_YAML = ROOT / "dvc.yaml"
LOSSES_DIR = "src/focalcse/core/losses"
FRAMEWORKS_DIR = "src/focalcse/core/frameworks"

# Modules that observe a run and cannot change its outputs: not deps, and not followed.
OBSERVERS = frozenset({"focalcse.ops.tracking", "focalcse.provenance"})
# ... except where an observer's words are the output: the report prints each result's provenance.
OBSERVER_OUTPUTS = {"report": frozenset({"focalcse.provenance"})}
# The loss module a stage trains with, as dvc.yaml names it (rendered per item).
OWN_LOSS = {
    "train": "${item.loss}",
    "train_framework": "${item.loss}",
    "ablate_tau": "${ablation.loss}",
    "ablate_m": "${ablation.loss}",
}
# A framework other than SimCSE is imported by computed name (focalcse.steps.train.framework_encoder,
# focalcse.core.model.from_pretrained): its items list their own framework module.
OWN_FRAMEWORK = {
    "train_framework": "${item.framework}",
    "evaluate_framework": "${item.framework}",
    "pretrain_generator": "${item.framework}",
}
# A framework item lists its framework's module and its settings module (the SPEC's "settings").
FRAMEWORK_FOLDERS = (FRAMEWORKS_DIR, f"{FRAMEWORKS_DIR}/settings")
# Comments written after a generated line (a kept line keeps its own comment).
COMMENTS = {
    f"{LOSSES_DIR}/__init__.py": "the registry (reads every SPEC, imports none)",
    f"{LOSSES_DIR}/${{item.loss}}.py": "its own loss only: a new loss retrains nothing",
    f"{LOSSES_DIR}/${{ablation.loss}}.py": "its own loss only: a new loss retrains nothing",
    f"{FRAMEWORKS_DIR}/${{item.framework}}.py": "its own framework only",
    f"{FRAMEWORKS_DIR}/settings/${{item.framework}}.py": "its own framework's settings only",
}
_CODE_LINE = re.compile(r"^(?P<indent>\s+)- (?P<path>(?:stages|src)/\S+?)(?P<comment>\s+#.*)?$")
_STAGE_LINE = re.compile(r"^  (?P<name>[A-Za-z_][\w-]*):\s*$")


# ---------------------------------------------------------------- static import closure
def module_file(module: str) -> Path | None:
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


def module_name(path: Path) -> tuple[str, bool]:
    """(dotted name, is a package) of a project file."""
    if path.parent == STAGES:
        return path.stem, False
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def trivial_init(path: Path) -> bool:
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
def direct_imports(path: Path) -> frozenset[str]:
    """Every project module ``path`` may import, anywhere in the file."""
    name, is_package = module_name(path)
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
    return frozenset(m for m in found if module_file(m) is not None)


def closure(*roots: Path, observers: Iterable[str] = OBSERVERS) -> set[str]:
    """Repo-relative files of everything ``roots`` import inside the project, ``roots`` included;
    ``observers`` are neither listed nor followed."""
    observers = tuple(observers)

    def observed(module: str) -> bool:  # an observer, or a module inside an observer package
        return any(module == o or module.startswith(f"{o}.") for o in observers)

    seen: set[Path] = set()
    todo = list(roots)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in direct_imports(path):
            for step in _with_parents(module):
                target = module_file(step)
                if target is not None and target not in seen and not observed(step):
                    todo.append(target)
    return {
        p.relative_to(ROOT).as_posix()
        for p in seen
        if not (p.name == "__init__.py" and p not in roots and trivial_init(p))
    }


# ---------------------------------------------------------------- the deps each stage needs
def stage_script(cmd: str) -> Path:
    match = re.search(r"python\s+(stages/\S+\.py)", cmd)
    if not match:
        raise ValueError(f"cmd {cmd!r} does not run a stages/*.py script")
    return ROOT / match.group(1)


def loss_modules() -> list[str]:
    """Every registered loss's module name (the registry's folder scan, without importing torch)."""
    from focalcse.core.losses import loss_names

    return list(loss_names())


def framework_modules() -> list[str]:
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


def _own(stage: str) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(template, its folders, the values it can take) of each module set the stage picks per item."""
    out = []
    if stage in OWN_LOSS:
        out.append((OWN_LOSS[stage], (LOSSES_DIR,), loss_modules()))
    if stage in OWN_FRAMEWORK:
        out.append((OWN_FRAMEWORK[stage], FRAMEWORK_FOLDERS, framework_modules()))
    return out


def code_deps(stage: str, cmd: str) -> list[str]:
    """The stage's code deps as dvc.yaml lists them: the script, its sibling modules, then src/ in
    order; a per-item module appears as its template (``src/.../${item.loss}.py``).

    A module that only some values' closures reach (DiffCSE's generator imports the training loop;
    PromptBERT's generator item does not) is listed for every item: a superset is safe (it can only
    rerun an item whose output then comes out the same). A per-item module of another value (one
    framework importing another's module) cannot be said by one templated line, and this raises."""
    script = stage_script(cmd)
    own = _own(stage)
    combos: list[list[tuple[str, str]]] = [[]]
    for t, folders, values in own:
        values = values if "${" in t else [t]  # a fixed module
        combos = [[*c, *((f"{folder}/{v}.py", t) for folder in folders)] for c in combos for v in values]
    observers = OBSERVERS - OBSERVER_OUTPUTS.get(stage, frozenset())
    closures = [(c, closure(script, *(ROOT / f for f, _ in c), observers=observers)) for c in combos]
    per_item = {f for combo, _ in closures for f, _ in combo}
    for combo, found in closures:
        other = (found & per_item) - {f for f, _ in combo}
        if other:
            picked = ", ".join(f for f, _ in combo)
            raise ValueError(
                f"{stage}: with {picked} it also imports {sorted(other)}; one templated line cannot say that"
            )
    common = set.union(*(s for _, s in closures))
    lines = sorted(common - per_item) + [f"{folder}/{t}.py" for t, folders, _ in own for folder in folders]
    rel_script = script.relative_to(ROOT).as_posix()
    siblings = sorted(p for p in lines if p.startswith("stages/") and p != rel_script)
    src = sorted({p for p in lines if p.startswith("src/")})
    return [rel_script, *siblings, *src]


# ---------------------------------------------------------------- dvc.yaml, rewritten in place
def render(text: str) -> str:
    """dvc.yaml's text with every inline code-deps block replaced by :func:`code_deps`."""
    spec = yaml.safe_load(text)["stages"]
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stage: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _STAGE_LINE.match(line)
        if head and head.group("name") in spec:
            stage = head.group("name")
        m = _CODE_LINE.match(line.rstrip("\n"))
        if not (m and stage):
            out.append(line)
            i += 1
            continue
        indent = m.group("indent")
        kept: dict[str, str] = {}
        while (
            i < len(lines) and (m := _CODE_LINE.match(lines[i].rstrip("\n"))) and m.group("indent") == indent
        ):
            kept[m.group("path")] = (m.group("comment") or "").strip()
            i += 1
        folders = [p for p in kept if not p.endswith(".py")]  # a folder dep stays one while it can
        for path in collapse(code_deps(stage, spec[stage]["cmd"]), folders):
            comment = kept.get(path) or (f"# {COMMENTS[path]}" if path in COMMENTS else "")
            out.append(f"{indent}- {path}{'   ' + comment if comment else ''}\n")
    return "".join(out)


def _folder_files(folder: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py")}


def collapse(paths: list[str], folders: Iterable[str]) -> list[str]:
    """``paths`` with the files of each of ``folders`` replaced by the folder (listed last), where
    every module in that folder is in ``paths``: a package the stage imports whole."""
    out = list(paths)
    tail = []
    for folder in folders:
        files = _folder_files(folder)
        if files and files <= set(out):
            out = [p for p in out if p not in files]
            tail.append(folder)
    return out + tail


def stale_stages(text: str) -> list[str]:
    """Stages whose code deps differ from :func:`code_deps` (a stage that reuses another's deps
    through a YAML alias is checked against its own script too)."""
    spec = yaml.safe_load(text)["stages"]
    stale = []
    for stage, body in spec.items():
        listed = [
            d if isinstance(d, str) else next(iter(d))
            for d in body.get("deps", [])
            if str(d if isinstance(d, str) else next(iter(d))).startswith(("stages/", "src/"))
        ]
        folders = [d for d in listed if not d.endswith(".py")]
        if listed != collapse(code_deps(stage, body["cmd"]), folders):
            stale.append(stage)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report stale stages (exit 1 if any)")
    ap.add_argument("--file", type=Path, default=DVC_YAML)
    args = ap.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    if args.check:
        stale = stale_stages(text)
        if stale:
            print(
                f"{args.file}: code deps are stale in {', '.join(stale)}; run `make dvc-deps`",
                file=sys.stderr,
            )
            return 1
        print(f"{args.file}: every stage's code deps are its import closure")
        return 0
    new = render(text)
    if new == text:
        print(f"{args.file}: already current")
        return 0
    args.file.write_text(new, encoding="utf-8")
    now_stale = stale_stages(new)
    if now_stale:  # e.g. an aliased block whose stages now need different deps
        print(
            f"{args.file}: rewritten, but {', '.join(now_stale)} still differ (YAML alias?)", file=sys.stderr
        )
        return 1
    print(f"{args.file}: code deps rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
