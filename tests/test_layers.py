"""The architecture's layer rules, checked on the source with ``ast`` (no module is imported).

Every node of every file is walked, so imports inside functions count too: ``import x``,
``from x import y``, relative imports and ``importlib.import_module("literal")``.

* no import cycle among the modules of ``src/focalcse``;
* every module belongs to one layer of :data:`LAYERS` and imports only from the layers its row
  allows (its own included): the bottom tier imports nothing above it, the science core only the
  bottom tier (no config), data and eval nothing above them, config nothing above core / data;
* the layers of :data:`NO_TRACKING` (everything but ``ops`` and the CLI) know nothing of MLflow,
  Prefect or DVC;
* the same rules hold at run time: each layer's modules, imported in a fresh process, load no module
  of a layer they may not import;
* loading the config and asking the loss registry imports no torch / transformers (fresh process).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from fresh_process import run_fresh

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "focalcse"

TRACKING = ("mlflow", "prefect", "dvc")  # third-party orchestration / tracking packages

# layer -> its modules (package prefixes, relative to focalcse; "" = the package's __init__)
LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("", "errors", "atomic", "layout", "provenance", "results", "lockfile"),
    "core": ("core",),
    "data": ("data",),
    "eval": ("eval",),
    "config": ("config", "losses", "paramsets", "stage_table"),
    "report": ("report",),
    "evidence": ("evidence",),  # the documents' numbers and `focalcse reproduced`; no stage imports it
    "steps": ("steps",),
    "ops": ("ops",),
    "cli": ("cli",),
    "testing": ("testing",),  # the tests' and probes' project copies and local servers
}
# layer -> the layers it may import (its own included)
MAY_IMPORT: dict[str, set[str]] = {
    "base": {"base"},
    "core": {"base", "core"},
    "data": {"base", "data"},
    "eval": {"base", "core", "data", "eval"},
    "config": {"base", "core", "data", "config"},
    "report": {"base", "core", "data", "eval", "config", "report"},
    "evidence": {"base", "core", "data", "eval", "config", "report", "evidence"},
    "steps": {"base", "core", "data", "eval", "config", "report", "steps"},
    "ops": {"base", "core", "data", "eval", "config", "report", "steps", "ops"},
    "cli": set(LAYERS) - {"testing"},
    "testing": set(LAYERS) - {"cli"},
}
NO_TRACKING = ("base", "core", "data", "eval", "config", "report", "evidence", "steps")


def layer_of(name: str, package: str = PACKAGE) -> str | None:
    """The layer of module ``name`` (None: not a module of ``package``)."""
    if not _under(name, package):
        return None
    rel = name[len(package) + 1 :] if name != package else ""
    if rel == "":
        return "base"
    for layer, prefixes in LAYERS.items():
        if any(p and (rel == p or rel.startswith(p + ".")) for p in prefixes):
            return layer
    return None


# ---------------------------------------------------------------- the import graph, from the source
def module_name(path: Path, src_root: Path) -> tuple[str, bool]:
    """``(dotted name, is_package)`` of the file ``path`` under ``src_root``."""
    parts = list(path.relative_to(src_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def discover(src_root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` under ``src_root``: name -> (file, is_package)."""
    out = {}
    for path in sorted((src_root / package).rglob("*.py")):
        name, is_pkg = module_name(path, src_root)
        out[name] = (path, is_pkg)
    return out


def _resolve_relative(module: str | None, level: int, current: str, is_package: bool) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_of(tree: ast.AST, current: str, is_package: bool, modules: set[str]) -> list[tuple[str, int]]:
    """Every module named by an import anywhere in ``tree`` (walking every node), resolved to an
    absolute dotted name, with its line. ``from p import n`` names ``p.n`` when that is a module of
    ``modules`` (Python imports the submodule; ``p`` itself is then only its enclosing package), else
    ``p``."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve_relative(node.module, node.level, current, is_package)
                if node.level
                else node.module or ""
            )
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            if len(subs) < len(node.names):  # some name is an attribute of `base` itself
                found.append((base, node.lineno))
            found += [(sub, node.lineno) for sub in subs]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called != "import_module" or not node.args:
                continue
            arg = node.args[0]
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                continue  # a computed name cannot be checked statically
            name = arg.value
            if name.startswith("."):
                pkg = next(
                    (
                        kw.value.value
                        for kw in node.keywords
                        if kw.arg == "package" and isinstance(kw.value, ast.Constant)
                    ),
                    node.args[1].value
                    if len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                    else None,
                )
                if pkg is None:
                    continue
                level = len(name) - len(name.lstrip("."))
                name = _resolve_relative(name.lstrip(".") or None, level, pkg, True)
            found.append((name, node.lineno))
    return found


def parse_imports(src_root: Path, package: str) -> dict[str, list[tuple[str, int]]]:
    """Module name -> every import of it as ``(absolute name, line)``."""
    mods = discover(src_root, package)
    names = set(mods)
    out = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out[name] = imports_of(tree, name, is_pkg, names)
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(src_root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it depends on. Importing ``a.b.c`` also runs the packages
    ``a`` and ``a.b`` (their ``__init__``), except the importer itself and its own enclosing
    packages, which are necessarily being imported when it runs."""
    imports = parse_imports(src_root, package)
    modules = set(imports)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, names in imports.items():
        own = {*_ancestors(mod), mod}
        for name, _ in names:
            if name in modules and name != mod:
                graph[mod].add(name)
            graph[mod].update(a for a in _ancestors(name) if a in modules and a not in own)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle: one concrete path ``[a, b, ..., a]`` per strongly connected component with
    more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[set[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan; the graphs here are small, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            sccs.append(comp)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)

    cycles = []
    for comp in sccs:
        start = min(comp)
        if len(comp) == 1 and start not in graph.get(start, ()):
            continue
        cycles.append(_cycle_through(start, comp, graph))
    return cycles


def _cycle_through(start: str, comp: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path ``start -> ... -> start`` inside the component (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w in comp and w not in seen:
                    seen.add(w)
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(comp)}")  # pragma: no cover


def _under(name: str, prefixes) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_violations(src_root: Path, package: str = PACKAGE) -> list[str]:
    """``file:line: module imports X (rule)`` for every broken layer rule, and every module that is
    in no layer."""
    out = []
    mods = discover(src_root, package)
    for mod, names in sorted(parse_imports(src_root, package).items()):
        layer = layer_of(mod, package)
        path = mods[mod][0].relative_to(src_root)
        if layer is None:
            out.append(f"src/{path}: {mod} is in no layer (add it to LAYERS)")
            continue
        for name, line in names:
            where = f"src/{path}:{line}: {mod} imports {name}"
            if name.split(".")[0] in TRACKING and layer in NO_TRACKING:
                out.append(f"{where} (layer {layer} knows no tracking/orchestration)")
                continue
            target = layer_of(name, package)
            if target is not None and target not in MAY_IMPORT[layer]:
                out.append(f"{where} (layer {layer} may import only {', '.join(sorted(MAY_IMPORT[layer]))})")
    return out


# ---------------------------------------------------------------- the checker checks itself
def _write_pkg(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_imports_of_sees_every_form(tmp_path: Path) -> None:
    src = _write_pkg(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/leaf.py": "",
            "pkg/sub/other.py": "",
            "pkg/top.py": "",
            "pkg/sub/mod.py": """
                import os.path
                from . import leaf
                from .other import thing
                from .. import top
                from ..top import name

                def f():
                    import deep.inside
                    from far.away import x
                    import importlib
                    importlib.import_module("dyn.amic")
                    importlib.import_module(".leaf", package="pkg.sub")
                    importlib.import_module(computed)  # not a literal: cannot be checked

                class C:
                    def g(self):
                        from importlib import import_module
                        return import_module("by.name")
                """,
        },
    )
    names = {n for n, _ in parse_imports(src, "pkg")["pkg.sub.mod"]}
    assert names == {
        "os.path",
        "pkg.sub.leaf",
        "pkg.sub.other",
        "pkg.top",
        "deep.inside",
        "far.away",
        "importlib",
        "dyn.amic",
        "by.name",
    }


def test_cycle_finder_finds_a_function_level_cycle(tmp_path: Path) -> None:
    # a -> b only inside a function, b -> c by a relative import, c -> a through import_module
    src = _write_pkg(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    import pkg.b\n",
            "pkg/b.py": "from .c import x\n",
            "pkg/c.py": "import importlib\n\ndef g():\n    return importlib.import_module('pkg.a')\n",
            "pkg/d.py": "from pkg import a\n",  # depends on the cycle, is not part of it
        },
    )
    cycles = find_cycles(import_graph(src, "pkg"))
    assert cycles == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert find_cycles({"x": {"x"}}) == [["x", "x"]]
    assert find_cycles({"x": {"y"}, "y": set()}) == []


def test_cycle_through_a_package_init(tmp_path: Path) -> None:
    # `import pkg.sub.leaf` runs pkg/sub/__init__.py, which imports the importer back
    src = _write_pkg(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.user import helper\n",
            "pkg/sub/leaf.py": "",
            "pkg/user.py": "import pkg.sub.leaf\n",
        },
    )
    assert find_cycles(import_graph(src, "pkg")) == [["pkg.sub", "pkg.user", "pkg.sub"]]


def test_package_reexporting_its_submodules_is_no_cycle(tmp_path: Path) -> None:
    # pkg/__init__ imports pkg.a, which imports its sibling pkg.b: the enclosing package is already
    # being imported when a submodule runs, so that is not a cycle
    src = _write_pkg(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import f\n",
            "pkg/a.py": "from pkg.b import g\nfrom pkg import c\n\ndef f():\n    return g()\n",
            "pkg/b.py": "def g():\n    return 1\n",
            "pkg/c.py": "",
        },
    )
    graph = import_graph(src, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b", "pkg.c"}, "pkg.b": set(), "pkg.c": set()}
    assert find_cycles(graph) == []
    # ... but a submodule that needs a name defined in the package's __init__ closes a cycle
    (src / "pkg" / "b.py").write_text("from pkg import f\n\ndef g():\n    return 1\n", encoding="utf-8")
    assert find_cycles(import_graph(src, "pkg")) == [["pkg", "pkg.a", "pkg.b", "pkg"]]


def test_layer_checker_catches_hidden_imports(tmp_path: Path) -> None:
    src = _write_pkg(
        tmp_path,
        {
            "focalcse/__init__.py": "",
            "focalcse/config.py": "",
            "focalcse/ops/__init__.py": "",
            "focalcse/steps/__init__.py": "",
            "focalcse/data/__init__.py": "",
            "focalcse/data/io.py": "def f():\n    from focalcse import steps\n",
            "focalcse/eval/__init__.py": "import prefect.tasks\n",
            "focalcse/core/__init__.py": "",
            "focalcse/core/ok.py": "from focalcse.core import other\nfrom .. import atomic\nimport torch\n",
            "focalcse/core/cfg.py": "from focalcse.config import X\n",
            "focalcse/stray.py": "",
            "focalcse/report/__init__.py": "import mlflow\nfrom focalcse.steps import x\n",
            "focalcse/core/bad.py": """
                def log():
                    import mlflow
                    import importlib
                    importlib.import_module("focalcse.ops.tracking")
                    from ..data import io
                """,
        },
    )
    found = "\n".join(layer_violations(src))
    assert "focalcse.core.bad imports mlflow" in found
    assert "focalcse.core.bad imports focalcse.ops.tracking" in found
    assert "focalcse.core.bad imports focalcse.data.io" in found
    assert "focalcse.data.io imports focalcse.steps" in found
    assert "focalcse.eval imports prefect.tasks" in found
    assert "focalcse.core.cfg imports focalcse.config (layer core may import only base, core)" in found
    assert "focalcse.stray is in no layer" in found
    assert "focalcse.report imports mlflow" in found
    assert "focalcse.report imports focalcse.steps" in found
    assert "focalcse.core.ok" not in found
    # bad: mlflow, ops.tracking, data.io; cfg; stray; data.io; eval; report: mlflow, steps
    assert len(layer_violations(src)) == 9


# ---------------------------------------------------------------- the rules on the real source
def test_parser_sees_the_real_source() -> None:
    """Guards the checks below against passing because nothing was parsed."""
    graph = import_graph(SRC, PACKAGE)
    assert {"focalcse.core.training", "focalcse.config", "focalcse.core.losses.focal_infonce"} <= set(graph)
    assert "focalcse.core.settings" in graph["focalcse.core.training"]
    assert "focalcse.core.losses" in graph["focalcse.config.params"]
    assert "focalcse.core.losses.base" in graph["focalcse.core.losses.focal_infonce"]
    assert "focalcse.core.frameworks" in graph["focalcse.config.sections"]
    assert "focalcse.core.backbones" in graph["focalcse.config.params"]  # a function-level import


def test_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(SRC, PACKAGE))
    assert not cycles, "import cycle(s) among the modules of src/focalcse:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


def test_layer_rules() -> None:
    bad = layer_violations(SRC)
    assert not bad, "layer rule(s) broken:\n" + "\n".join(bad)


def test_every_layer_rule_holds_at_run_time() -> None:
    """Each layer's modules imported in a fresh process of their own: none of the modules then loaded
    belongs to a layer it may not import, and no layer of NO_TRACKING loads MLflow, Prefect or DVC
    (the static rules, seen from ``sys.modules``; catches imports no parser sees)."""
    mods = sorted(discover(SRC, PACKAGE))
    for layer in LAYERS:
        names = [m for m in mods if layer_of(m) == layer and not m.endswith("__main__")]
        if not names:
            continue
        out = run_fresh(
            f"""
            import importlib, json, sys
            for name in {names!r}:
                importlib.import_module(name)
            print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("focalcse", *{TRACKING!r}))))
            """
        )
        foreign = [m for m in out if m.startswith(PACKAGE) and layer_of(m) not in MAY_IMPORT[layer]]
        assert not foreign, f"importing layer {layer} loaded {foreign}"
        if layer in NO_TRACKING:
            tracking = [m for m in out if not m.startswith(PACKAGE)]
            assert not tracking, f"importing layer {layer} loaded {tracking}"


# ---------------------------------------------------------------- torch-free imports, in a fresh process


HEAVY = ("torch", "transformers")


def test_load_params_imports_no_torch() -> None:
    out = run_fresh(
        """
        import json, sys
        import focalcse.config
        p = focalcse.config.load_params("params.yaml")
        print(json.dumps({"loss": p.train.loss, "heavy": [m for m in ("torch", "transformers") if m in sys.modules]}))
        """
    )
    assert out["loss"]  # it really loaded
    assert out["heavy"] == [], f"load_params imported {out['heavy']}"


def test_loss_registry_imports_no_torch_and_losses_are_public() -> None:
    out = run_fresh(
        """
        import json, sys
        import focalcse.losses
        import focalcse.core.losses
        names = focalcse.core.losses.loss_names()
        spec = focalcse.core.losses.loss_spec("focal_infonce")
        heavy = [m for m in ("torch", "transformers") if m in sys.modules]
        from focalcse.losses import FocalInfoNCE, InfoNCE
        from focalcse.core.losses.base import ContrastiveLoss
        from focalcse.core.losses import focal_infonce, infonce
        print(json.dumps({
            "names": list(names),
            "m": spec.defaults.get("m"),
            "heavy": heavy,
            "subclass": [issubclass(c, ContrastiveLoss) for c in (InfoNCE, FocalInfoNCE)],
            "same": [InfoNCE is infonce.InfoNCE, FocalInfoNCE is focal_infonce.FocalInfoNCE,
                     focalcse.losses.InfoNCE is InfoNCE],
        }))
        """
    )
    assert {"infonce", "focal_infonce"} <= set(out["names"]) and out["m"] == 0.3
    assert out["heavy"] == [], f"the loss registry imported {out['heavy']}"
    assert out["subclass"] == [True, True]
    assert out["same"] == [True, True, True]


def test_focalcse_losses_unknown_name_is_attribute_error() -> None:
    import focalcse.losses

    with pytest.raises(AttributeError, match="NoSuchLoss"):
        focalcse.losses.NoSuchLoss  # noqa: B018
