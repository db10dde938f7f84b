"""Read a module-level literal (a registry's ``SPEC``) from a source file without importing it.

The loss and framework registries learn every member's name, label and options this way, so config
validation, the report and the Prefect process need no torch.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path
from typing import Any


def read_literal(path: str | os.PathLike, name: str, error: type[Exception]) -> Any | None:
    """The value of ``name = <literal>`` at module level in ``path``; None when no such assignment
    exists; ``error`` when the file cannot be parsed or the value is not a literal."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as err:
        raise error(f"{path}: cannot be parsed ({err})") from err
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:  # SPEC: dict = {...}
            targets = [node.target]
        else:
            continue
        if any(getattr(t, "id", None) == name for t in targets):
            try:
                return ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError) as err:
                raise error(f"{path}: {name} must be a literal dict ({err})") from err
    return None


# ---------------------------------------------------------------- the registries' shared rules
def add_unique(registry: dict[str, Any], spec: Any, kind: str, error: type[Exception]) -> Any:
    """Put ``spec`` (with ``name`` and ``module``) in ``registry``; ``error`` when another module
    already registered that name (the same module again is a no-op)."""
    known = registry.get(spec.name)
    if known is not None and known.module != spec.module:
        raise error(f"{kind} {spec.name!r} is registered twice: {known.module} and {spec.module}")
    registry[spec.name] = spec
    return spec


def module_origin(module: str, kind: str, error: type[Exception]) -> str:
    """The source file of importable ``module``, found without importing it."""
    found = importlib.util.find_spec(module)
    if found is None or not found.origin:
        raise error(f"{kind} module {module!r} not found on the Python path")
    return found.origin


def scan(folder: Path, package: str, skip: set[str]) -> list[tuple[Path, str]]:
    """``(file, module name)`` of every module of ``folder`` but ``skip``, in name order: each
    ``<name>.py`` and each package ``<name>/`` (its ``__init__.py`` is the file read)."""
    found = [(p, p.stem) for p in folder.glob("*.py")]
    found += [(d / "__init__.py", d.name) for d in folder.iterdir() if (d / "__init__.py").is_file()]
    return [(p, f"{package}.{name}") for p, name in sorted(found, key=lambda f: f[1]) if name not in skip]


def plugin_modules(env: str) -> list[str]:
    """The comma-separated module names in environment variable ``env``."""
    return [m.strip() for m in os.environ.get(env, "").split(",") if m.strip()]
