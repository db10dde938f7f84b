"""Typed, validated configuration: one frozen dataclass per ``params.yaml`` section.

Every value is checked on load; a bad one raises :class:`ConfigError` naming the key, the value and
what is allowed, before any work starts. Importing this package needs no torch: the losses' names and
hyper-parameters come from the torch-free registry (:mod:`focalcse.core.losses`), the task names from
:mod:`focalcse.data.tasks`.

The package sits above the core: it loads, merges and validates (:mod:`.params`, :mod:`.sections`).
The settings the core consumes are the core's own, torch-free (:mod:`focalcse.core.settings`: the train
config, re-exported here). Each framework's settings class is its own (named by its registry ``SPEC``,
:mod:`focalcse.core.frameworks`) and is not re-exported: a stage imports no framework's settings
statically, so only that framework's items depend on them.
"""

from focalcse.config.params import (
    OTHER_SECTIONS,
    SECTIONS,
    Params,
    check_ablation,
    check_backbone,
    load_params,
)
from focalcse.config.sections import (
    PRECISIONS,
    AblationConfig,
    DataConfig,
    EvalConfig,
    FrameworksConfig,
    ReportConfig,
    SignificanceConfig,
    SweepConfig,
    TrackingConfig,
)
from focalcse.core.frameworks import all_frameworks
from focalcse.core.settings import (
    ITEM_KEYS,
    TRAIN_PRECISIONS,
    TrainConfig,
    batch_spans,
    from_dict,
    training_steps,
)
from focalcse.errors import ConfigError

__all__ = [
    "ITEM_KEYS",
    "OTHER_SECTIONS",
    "PRECISIONS",
    "SECTIONS",
    "TRAIN_PRECISIONS",
    "AblationConfig",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "FrameworksConfig",
    "Params",
    "ReportConfig",
    "SignificanceConfig",
    "SweepConfig",
    "TrackingConfig",
    "TrainConfig",
    "all_frameworks",
    "batch_spans",
    "check_ablation",
    "check_backbone",
    "from_dict",
    "load_params",
    "training_steps",
]
