"""SimCSE's own settings (``frameworks.simcse`` in ``params.yaml``), torch-free: only the train-key
layers every framework has (``train``, ``backbones``). SimCSE has no setting of its own: its items'
train config is the ``train`` section with the backbone and loss overrides (docs/method.md), and its
official recipe is the reference the report compares every set with (``focalcse.report.recipe``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from focalcse.core.settings import _check_train_layers


@dataclass(frozen=True)
class SimCSEConfig:
    """``frameworks.simcse``: train keys for every SimCSE item (``train``) and per backbone."""

    train: dict[str, Any] = field(default_factory=dict)  # train keys for every SimCSE item
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)  # <backbone>: train keys

    def __post_init__(self) -> None:
        _check_train_layers("frameworks.simcse", self.train, self.backbones)
