"""``focalcse.losses``: the public name of the loss registry (:mod:`focalcse.core.losses`).

``focalcse.losses.InfoNCE`` and ``focalcse.losses.FocalInfoNCE`` are the contract in design.md;
everything the registry exports is importable from here.
"""

from __future__ import annotations

from typing import Any

from focalcse.core import losses as _registry
from focalcse.core.losses import (  # noqa: F401  (re-exported)
    HyperParam,
    LossSpec,
    build_loss,
    hyper_params,
    loss_class,
    loss_names,
    loss_spec,
    register_module,
)


def __getattr__(name: str) -> Any:
    return getattr(_registry, name)
