"""The loss registry. Importing it needs no torch.

A loss is one module in this folder (or any importable module named by :func:`register_module` or
the ``FOCALCSE_LOSS_MODULES`` environment variable) that defines

* ``SPEC``: a literal dict with the loss's ``name``, its ``class``, the report's ``label`` and
  ``color``, and ``hyper``: its own hyper-parameters (``{key: {"default", "min", "max", "help"}}``);
* the class named there, a :class:`~focalcse.core.losses.base.ContrastiveLoss` taking
  ``temperature`` plus those hyper-parameters as keyword arguments.

``SPEC`` is read from the source with :func:`ast.literal_eval`, so config validation, the report and
the Prefect process learn every loss's name, hyper-parameters, label and colour without importing
torch; the module itself is imported only when :func:`build_loss` builds that loss.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from focalcse.core.literal import add_unique, module_origin, plugin_modules, read_literal, scan

PLUGINS_ENV = "FOCALCSE_LOSS_MODULES"  # comma-separated extra loss modules (seen by stage subprocesses)
_PACKAGE = __name__
_HERE = Path(__file__).parent
_NOT_LOSSES = {"__init__", "base"}


@dataclass(frozen=True)
class HyperParam:
    """One hyper-parameter a loss declares: a number with a default and an allowed range."""

    name: str
    default: float
    min: float | None = None
    max: float | None = None
    help: str = ""

    def allowed(self) -> str:
        if self.min is not None and self.max is not None:
            return f"a number in [{self.min}, {self.max}]"
        if self.min is not None:
            return f"a number >= {self.min}"
        if self.max is not None:
            return f"a number <= {self.max}"
        return "a number"

    def check(self, value: Any) -> str | None:
        """None if ``value`` is allowed, else what is expected."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.allowed()
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            return self.allowed()
        return None


@dataclass(frozen=True)
class LossSpec:
    """What the rest of the project knows about a loss without importing it."""

    name: str
    module: str  # import path of the module that defines the class
    cls: str
    label: str
    color: str
    hyper: tuple[HyperParam, ...] = ()
    source: str = ""  # the module's file (a train item's DVC dependency)
    # the reference implementation it is checked against, and what this one does differently from it:
    # sentences the report prints, formatted with the item's hyper-parameters and ``temperature``
    reference: str = ""
    departures: tuple[str, ...] = ()

    @property
    def hyper_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hyper)

    @property
    def defaults(self) -> dict[str, float]:
        return {h.name: h.default for h in self.hyper}


class LossRegistryError(ValueError):
    """A loss module whose SPEC is missing or malformed, or a name registered twice."""


def read_spec(path: str | os.PathLike, module: str) -> LossSpec:
    """The ``SPEC`` literal of the loss module at ``path``, without importing it."""
    raw = read_literal(path, "SPEC", LossRegistryError)
    if raw is None:
        raise LossRegistryError(f"{path}: no SPEC = {{...}} at module level; see focalcse.core.losses")
    return _spec(raw, module, Path(path))


def _spec(raw: Any, module: str, path: Path) -> LossSpec:
    need = {"name", "class", "label", "color"}
    if not isinstance(raw, dict) or not need <= set(raw):
        raise LossRegistryError(f"{path}: SPEC needs the keys {sorted(need)} (and optional 'hyper')")
    if not isinstance(raw.get("hyper") or {}, dict):
        raise LossRegistryError(f"{path}: SPEC 'hyper' must be a dict of {{key: {{'default': ...}}}}")
    hyper = []
    for key, h in (raw.get("hyper") or {}).items():
        if not isinstance(h, dict) or "default" not in h:
            raise LossRegistryError(f"{path}: SPEC hyper {key!r} needs at least a 'default'")
        hyper.append(HyperParam(key, h["default"], h.get("min"), h.get("max"), h.get("help", "")))
        if hyper[-1].check(h["default"]):
            raise LossRegistryError(
                f"{path}: SPEC hyper {key!r} default {h['default']!r} is out of its range"
            )
    unknown = sorted(set(raw) - {*need, "hyper", "reference", "departures"})
    if unknown:
        raise LossRegistryError(f"{path}: SPEC has unknown key(s) {unknown}")
    departures = raw.get("departures", [])
    if not isinstance(departures, list) or not all(isinstance(d, str) for d in departures):
        raise LossRegistryError(f"{path}: SPEC 'departures' must be a list of sentences")
    if departures and not raw.get("reference"):
        raise LossRegistryError(f"{path}: SPEC 'departures' needs the 'reference' they depart from")
    return LossSpec(
        name=raw["name"],
        module=module,
        cls=raw["class"],
        label=raw["label"],
        color=raw["color"],
        hyper=tuple(hyper),
        source=str(path),
        reference=str(raw.get("reference", "")),
        departures=tuple(departures),
    )


_REGISTRY: dict[str, LossSpec] = {}


def _discover() -> None:
    if _REGISTRY:
        return
    for path, module in scan(_HERE, _PACKAGE, _NOT_LOSSES):
        _add(read_spec(path, module))
    for module in plugin_modules(PLUGINS_ENV):
        register_module(module)


def _add(spec: LossSpec) -> LossSpec:
    return add_unique(_REGISTRY, spec, "loss", LossRegistryError)


def register_module(module: str) -> LossSpec:
    """Register the loss defined in importable module ``module`` (read without importing it)."""
    _discover()
    return _add(read_spec(module_origin(module, "loss", LossRegistryError), module))


def loss_names() -> tuple[str, ...]:
    """Every registered loss name, built-ins first (alphabetical), then plugins."""
    _discover()
    return tuple(_REGISTRY)


def loss_spec(name: str) -> LossSpec:
    """The spec of loss ``name``; ValueError naming the registered losses if unknown."""
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def hyper_params() -> dict[str, HyperParam]:
    """Every hyper-parameter key some registered loss declares, with its first declaration (for the
    key's name; each loss checks its values against its own declaration: :func:`hyper_declarations`)."""
    out: dict[str, HyperParam] = {}
    for name in loss_names():
        for h in _REGISTRY[name].hyper:
            out.setdefault(h.name, h)
    return out


def hyper_declarations(key: str) -> dict[str, HyperParam]:
    """Loss name -> its declaration of hyper-parameter ``key``, for every loss that declares it
    (registration order; empty when none does)."""
    return {name: h for name in loss_names() for h in _REGISTRY[name].hyper if h.name == key}


def resolve_hyper(name: str, written: Mapping[str, Any]) -> dict[str, float]:
    """Loss ``name``'s hyper-parameters, in its SPEC's order: as ``written``, else the SPEC default.
    The one place a loss default is filled in (the train config, its loss arguments, :func:`build_loss`);
    keys ``name`` does not declare are ignored (a train config carries every key it was merged from)."""
    return {h.name: written.get(h.name, h.default) for h in loss_spec(name).hyper}


def loss_class(name: str) -> type:
    """Import the module of loss ``name`` and return its class."""
    spec = loss_spec(name)
    return getattr(importlib.import_module(spec.module), spec.cls)


def build_loss(name: str, temperature: float, **hyper: float) -> Any:
    """The loss module ``name`` with temperature ``temperature`` and its own hyper-parameters.

    Keys in ``hyper`` that ``name`` does not declare are ignored (a train config carries the keys of
    every loss it was merged from); missing ones take the spec's default.
    """
    return loss_class(name)(temperature=temperature, **resolve_hyper(name, hyper))


_LAZY = {
    "ContrastiveLoss": "base",
    "cosine_matrix": "base",
    "loss_from_logits": "base",
    "positive_mask": "base",
    "InfoNCE": "infonce",
    "infonce_logits": "infonce",
    "FocalInfoNCE": "focal_infonce",
    "focal_logits": "focal_infonce",
}


def __getattr__(name: str) -> Any:  # the tensor code loads torch only when asked for
    if name in _LAZY:
        return getattr(importlib.import_module(f"{_PACKAGE}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "HyperParam",
    "LossSpec",
    "build_loss",
    "hyper_declarations",
    "hyper_params",
    "loss_class",
    "loss_names",
    "loss_spec",
    "register_module",
    "resolve_hyper",
    *_LAZY,
]
