"""Parameter sets as overlays: ``params/<set>.yaml`` holds only what differs from the set it extends.

A set is composed by a deep merge: a mapping merges key by key, any other value (a list, a scalar)
replaces the base's. A set's base is the set its top-level ``extends: <name>`` names (itself composed
the same way, so overlays stack: ``paper-tau005`` extends ``paper``, which extends the default), or the
default ``params.yaml`` when it names none. The default is the file in the checkout, or, when the
checkout's ``params.yaml`` is itself a composed set (it starts with :data:`HEADER`), the committed one
(``git show HEAD:params.yaml``), so composing twice never stacks two sets.

Each set runs in a folder of its own, ``sets/<set>/`` (:func:`set_dir`): ``make reproduce
PARAMS=<set>`` (``focalcse params use <set>``) writes the composed set there as ``params.yaml``, headed
by a comment naming the set, beside the set's ``dvc.yaml`` (:func:`focalcse.ops.dvc_yaml.write_set`),
and DVC runs it there. Its data, models, metrics, report and ``dvc.lock`` are its own, so running one
set never prunes or overwrites another's; the checkout's ``params.yaml`` stays the default's.
"""

from __future__ import annotations

import copy
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from focalcse.atomic import atomic_write
from focalcse.config import ConfigError, Params, load_params
from focalcse.config.params import parse_yaml

HEADER = "# composed parameter set"
SETS_DIR = "params"
WORK_DIR = "sets"  # sets/<name>/: a set's params.yaml, dvc.yaml, dvc.lock and outputs
EXTENDS = "extends"  # an overlay's top-level key naming the set it is merged over


def compose(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overlay`` merged in: mappings key by key, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = compose(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def is_composed(text: str) -> bool:
    return text.startswith(HEADER)


def available(root: str | Path) -> list[str]:
    return sorted(p.stem for p in (Path(root) / SETS_DIR).glob("*.yaml"))


def base_text(root: str | Path) -> str:
    """The default ``params.yaml`` of the checkout at ``root`` (see the module docstring)."""
    path = Path(root) / "params.yaml"
    text = path.read_text(encoding="utf-8")
    if not is_composed(text):
        return text
    proc = subprocess.run(
        ["git", "show", "HEAD:params.yaml"], cwd=root, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or is_composed(proc.stdout):
        raise ConfigError(
            f"{path} holds a composed parameter set and the committed default cannot be read "
            f"(git show HEAD:params.yaml: {proc.stderr.strip() or 'composed too'}); restore the default params.yaml first"
        )
    return proc.stdout


def _mapping(text: str, where: str) -> dict[str, Any]:
    raw = parse_yaml(text, where) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of sections, got {type(raw).__name__}")
    return raw


def overlay_path(root: str | Path, name: str) -> Path:
    path = Path(root) / SETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"parameter set {name!r}: no {SETS_DIR}/{name}.yaml; available: {', '.join(available(root))}"
        )
    return path


def chain(root: str | Path, name: str) -> list[str]:
    """The sets ``name`` is composed from, the set itself last: ``["paper", "paper-tau005"]``."""
    names: list[str] = []
    current: str | None = name
    while current is not None:
        if current in names:
            loop = " -> ".join([*names, current])
            raise ConfigError(f"parameter set {name!r}: {EXTENDS} forms a loop ({loop})")
        names.append(current)
        path = overlay_path(root, current)
        parent = _mapping(path.read_text(encoding="utf-8"), str(path)).get(EXTENDS)
        if parent is not None and (not isinstance(parent, str) or not parent):
            raise ConfigError(f"{path}: {EXTENDS}: {parent!r}: expected the name of a set in {SETS_DIR}/")
        current = parent
    return names[::-1]


def compose_set(root: str | Path, name: str) -> dict[str, Any]:
    """The raw mapping of set ``name``: the default params.yaml with every overlay of its chain
    (:func:`chain`) merged in, base first; the ``extends`` keys themselves are dropped."""
    links = chain(root, name)  # first: an unknown set is named before the default is read
    raw = _mapping(base_text(root), f"{root}/params.yaml")
    for link in links:
        path = overlay_path(root, link)
        overlay = _mapping(path.read_text(encoding="utf-8"), str(path))
        overlay.pop(EXTENDS, None)
        raw = compose(raw, overlay)
    return raw


def validate(raw: dict[str, Any], where: str) -> Params:
    """Validate a composed mapping exactly as ``params.yaml`` is (``focalcse.config.load_params``)."""
    with tempfile.TemporaryDirectory(prefix="paramset-") as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        try:
            return load_params(path)
        except ConfigError as err:
            raise ConfigError(str(err).replace(str(path), where)) from err


def load_set(root: str | Path, name: str) -> Params:
    """Set ``name`` composed and validated."""
    return validate(compose_set(root, name), f"{SETS_DIR}/{name}.yaml over params.yaml")


def load_any(path: str | Path) -> Params:
    """``load_params`` for a ``params.yaml``, or the composed set for a file under ``params/``."""
    path = Path(path)
    if path.parent.name == SETS_DIR and (path.parent.parent / "params.yaml").is_file():
        return load_set(path.parent.parent, path.stem)
    return load_params(path)


def render(name: str, raw: dict[str, Any], links: list[str] | None = None) -> str:
    merged = ", then ".join(f"{SETS_DIR}/{link}.yaml" for link in (links or [name]))
    header = (
        f"{HEADER}: params.yaml with {merged} merged in (`focalcse params use {name}`,\n"
        f"# `make reproduce PARAMS={name}`). Edit {SETS_DIR}/{name}.yaml, not this file.\n"
    )
    return header + yaml.safe_dump(raw, sort_keys=False, width=110)


def set_dir(root: str | Path, name: str) -> Path:
    """The folder set ``name`` runs in: ``<root>/sets/<name>`` (the default runs in ``root``)."""
    overlay_path(root, name)  # a known set, so the name is a plain file stem
    return Path(root) / WORK_DIR / name


def use(root: str | Path, name: str) -> str:
    """Write set ``name``, composed, as ``sets/<name>/params.yaml`` (validated first; nothing is
    written when it fails). Returns the line that says what was written."""
    raw = compose_set(root, name)
    validate(raw, f"{SETS_DIR}/{name}.yaml over params.yaml")
    links = chain(root, name)
    target = set_dir(root, name) / "params.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, render(name, raw, links))
    return (
        f"{target.relative_to(root).as_posix()} <- params.yaml + {' + '.join(f'{SETS_DIR}/{link}.yaml' for link in links)} "
        f"(experiment {raw.get('tracking', {}).get('experiment')!r})"
    )
