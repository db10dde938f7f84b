"""Frameworks around the contrastive loss: how a batch becomes two views, any extra loss term, and
the sentence vector. The registry: importing it needs no torch.

Every framework, SimCSE (``simcse/``: the batch encoded twice, dropout the only augmentation) among
them, is one package folder here, ``<name>/`` with the ``SPEC`` in its ``__init__.py`` (or an importable module named by :func:`register_module` or the ``FOCALCSE_FRAMEWORK_MODULES``
environment variable) that defines

* ``SPEC``, a literal dict read without importing the module::

      SPEC = {
          "name": "diffcse",
          "label": "DiffCSE",                                  # the report's name for it
          "settings": "focalcse.core.frameworks.settings.diffcse:DiffCSEConfig",  # torch-free
          "needs": ["generator"],       # stage outputs its items need: the pretrain_generator stage's MLM
          "refuses": ["ddp", "gradcache"],                     # what its step cannot train with
          "encoder": False,             # True: its saved folders load with the module's ENCODER class
          "unpad": False,               # True: its step takes the unpadded forward (train.unpad)
          "default": False,             # True: the framework a sweep trains when it names none (one)
      }

* ``training_setup(source, cfg, settings, prepared_dir) -> (encoder, step, corpus_max_len)``; its step
  is a :class:`focalcse.core.training.FrameworkStep`: the loop hands it the batch's token ids and the
  registry's contrastive loss, so every registered loss works with every framework (a step with
  ``settings`` empty records nothing of its own in the saved folder, SimCSE's). ``prepared_dir``
  is the framework's ``pretrain_generator`` item (``models/generators/<framework>/<backbone>``).

The settings class (a frozen dataclass, torch-free) is the framework's ``frameworks.<name>`` params
section: optional ``train`` / ``backbones`` train-key layers, an optional ``from_mapping(section, data)``
for nested blocks, an optional ``refusal(train_config)`` the check stage asks before any training, an
optional ``recorded_pooler(pooler)`` naming the sentence vector ``train.pooler`` gives it in the recorded
config (:func:`focalcse.core.settings.recorded_train`; PromptBERT: the template's mask token), and
``generator`` / ``pretrain`` when the framework needs a generator. Only that framework's items depend on
its module and its settings module (both imported by computed name), so changing one framework reruns
no other framework's items.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from focalcse.core.literal import add_unique, module_origin, plugin_modules, read_literal, scan

PLUGINS_ENV = "FOCALCSE_FRAMEWORK_MODULES"  # comma-separated extra framework modules
NEEDS = ("generator",)  # the stage outputs a framework may need (the pretrain_generator stage)
REFUSALS = ("ddp", "gradcache")
_PACKAGE = __name__
_HERE = Path(__file__).parent


class FrameworkRegistryError(ValueError):
    """A framework module whose SPEC is malformed, or a name registered twice."""


@dataclass(frozen=True)
class FrameworkSpec:
    """What the rest of the project knows about a framework without importing it."""

    name: str
    module: str  # import path of the module with training_setup (torch)
    label: str
    settings: str = ""  # "module:Class" of its torch-free settings; "" = it has none
    needs: tuple[str, ...] = ()
    refuses: tuple[str, ...] = ()
    encoder: bool = False
    unpad: bool = False
    default: bool = False
    source: str = ""  # the module's file

    @property
    def settings_module(self) -> str:
        return self.settings.partition(":")[0]


def read_spec(path: str | os.PathLike, module: str) -> FrameworkSpec | None:
    """The ``SPEC`` of the framework module at ``path`` (None: the file is no framework module)."""
    raw = read_literal(path, "SPEC", FrameworkRegistryError)
    if raw is None:
        return None
    if not isinstance(raw, dict) or not {"name", "label"} <= set(raw):
        raise FrameworkRegistryError(f"{path}: SPEC needs at least 'name' and 'label'")
    unknown = sorted(
        set(raw) - {"name", "label", "settings", "needs", "refuses", "encoder", "unpad", "default"}
    )
    if unknown:
        raise FrameworkRegistryError(f"{path}: SPEC has unknown key(s) {unknown}")
    for key, allowed in (("needs", NEEDS), ("refuses", REFUSALS)):
        bad = [v for v in raw.get(key, ()) if v not in allowed]
        if bad:
            raise FrameworkRegistryError(f"{path}: SPEC {key} {bad}: expected values from {list(allowed)}")
    settings = raw.get("settings", "")
    if settings and ":" not in settings:
        raise FrameworkRegistryError(f"{path}: SPEC settings {settings!r}: expected 'module:Class'")
    return FrameworkSpec(
        name=raw["name"],
        module=module,
        label=raw["label"],
        settings=settings,
        needs=tuple(raw.get("needs", ())),
        refuses=tuple(raw.get("refuses", ())),
        encoder=bool(raw.get("encoder", False)),
        unpad=bool(raw.get("unpad", False)),
        default=bool(raw.get("default", False)),
        source=str(path),
    )


_REGISTRY: dict[str, FrameworkSpec] = {}


def _discover() -> None:
    if _REGISTRY:
        return
    for path, module in scan(_HERE, _PACKAGE, {"__init__"}):
        if (spec := read_spec(path, module)) is not None:
            _add(spec)
    for module in plugin_modules(PLUGINS_ENV):
        register_module(module)


def _add(spec: FrameworkSpec) -> FrameworkSpec:
    return add_unique(_REGISTRY, spec, "framework", FrameworkRegistryError)


def register_module(module: str) -> FrameworkSpec:
    """Register the framework defined in importable module ``module`` (read without importing it)."""
    _discover()
    origin = module_origin(module, "framework", FrameworkRegistryError)
    spec = read_spec(origin, module)
    if spec is None:
        raise FrameworkRegistryError(f"{origin}: no SPEC = {{...}} at module level")
    return _add(spec)


def framework_names() -> tuple[str, ...]:
    """Every registered framework: built-ins (alphabetical), then plugins."""
    _discover()
    return tuple(_REGISTRY)


def all_frameworks() -> tuple[str, ...]:
    """Every registered framework, the default (the paper's own) first, then :func:`framework_names`'
    order: the order listings and choices show them in."""
    first = default_framework()
    return (first, *(f for f in framework_names() if f != first))


def default_framework() -> str:
    """The framework a sweep trains when ``sweep.frameworks`` names none: the one whose SPEC says
    ``"default": True`` (exactly one must)."""
    _discover()
    names = [s.name for s in _REGISTRY.values() if s.default]
    if len(names) != 1:
        raise FrameworkRegistryError(
            f"exactly one framework SPEC must say 'default': True; found {names or 'none'}"
        )
    return names[0]


def framework_spec(name: str) -> FrameworkSpec:
    """The spec of framework ``name``; ValueError naming the registered ones if unknown."""
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"unknown framework {name!r}; expected one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def framework_label(name: str) -> str:
    return framework_spec(name).label


def settings_class(name: str) -> type | None:
    """The torch-free settings class of framework ``name`` (imported; None when it declares none)."""
    spec = framework_spec(name)
    if not spec.settings:
        return None
    module, _, cls = spec.settings.partition(":")
    return getattr(importlib.import_module(module), cls)


def framework_module(name: str) -> Any:
    """Import framework ``name``'s module (torch)."""
    return importlib.import_module(framework_spec(name).module)


__all__ = [
    "FrameworkRegistryError",
    "FrameworkSpec",
    "all_frameworks",
    "default_framework",
    "framework_label",
    "framework_module",
    "framework_names",
    "framework_spec",
    "register_module",
    "settings_class",
]
