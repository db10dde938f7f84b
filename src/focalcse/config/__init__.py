"""Typed, validated configuration: one frozen dataclass per ``params.yaml`` section.

Every value is checked on load; a bad one raises :class:`ConfigError` naming the key, the value and
what is allowed, before any work starts. Importing this package needs no torch: the losses' names and
hyper-parameters come from the torch-free registry (:mod:`focalcse.core.losses`), the task names from
:mod:`focalcse.data.tasks`.

The package sits above the core: it loads, merges and validates (:mod:`.params`, :mod:`.sections`).
The settings the core consumes are the core's own, torch-free (:mod:`focalcse.core.settings`: the train
config; :mod:`focalcse.core.frameworks.settings`: each framework's), re-exported here.
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
    FRAMEWORKS,
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
from focalcse.core.frameworks.settings import (
    PROMPTBERT_TEMPLATES,
    DiffCSEConfig,
    GeneratorConfig,
    PromptBERTConfig,
)
from focalcse.core.settings import (
    ITEM_KEYS,
    TRAIN_PRECISIONS,
    TrainConfig,
    batch_spans,
    from_dict,
    training_steps,
)
from focalcse.errors import ConfigError
from focalcse.layout import BASE_FRAMEWORK

__all__ = [
    "BASE_FRAMEWORK",
    "FRAMEWORKS",
    "ITEM_KEYS",
    "OTHER_SECTIONS",
    "PRECISIONS",
    "PROMPTBERT_TEMPLATES",
    "SECTIONS",
    "TRAIN_PRECISIONS",
    "AblationConfig",
    "ConfigError",
    "DataConfig",
    "DiffCSEConfig",
    "EvalConfig",
    "FrameworksConfig",
    "GeneratorConfig",
    "Params",
    "PromptBERTConfig",
    "ReportConfig",
    "SignificanceConfig",
    "SweepConfig",
    "TrackingConfig",
    "TrainConfig",
    "batch_spans",
    "check_ablation",
    "check_backbone",
    "from_dict",
    "load_params",
    "training_steps",
]
