"""The ``params.yaml`` sections above the train config: data, eval, significance, sweep, ablation,
report, tracking and the frameworks' section (each framework's own settings class is named by its
registry ``SPEC``, :mod:`focalcse.core.frameworks`; the train config is :mod:`focalcse.core.settings`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from focalcse.core.frameworks import default_framework, framework_names, settings_class
from focalcse.core.losses import loss_names
from focalcse.core.settings import _fail, _finite, _section, _with, from_dict
from focalcse.data.tasks import PAPER_TASKS, TASKS
from focalcse.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")  # evaluation (inference only)


@dataclass(frozen=True)
class DataConfig:
    """``data`` section: the training-sentence sample and the data sources."""

    num_sentences: int = 10_000  # sampled from the corpus (paper: all 10^6)
    seed: int = 42  # sample seed, independent of the training seeds
    mirror: str = ""  # mirror folder laid out like shared/data; "" = standard downloads

    def __post_init__(self) -> None:
        if self.num_sentences < 2:
            _fail("data", "num_sentences", self.num_sentences, "an integer >= 2")
        if self.seed < 0:
            _fail("data", "seed", self.seed, "an integer >= 0")


@dataclass(frozen=True)
class EvalConfig:
    """``eval`` section."""

    tasks: tuple[str, ...] = PAPER_TASKS  # the paper's 7; a registered task runs where a set lists it
    batch_size: int = 128
    precision: str = "fp32"

    def __post_init__(self) -> None:
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            _fail("eval", "tasks", list(self.tasks), f"a non-empty subset of {', '.join(TASKS)}")
        if self.batch_size < 1:
            _fail("eval", "batch_size", self.batch_size, "an integer >= 1")
        if self.precision not in PRECISIONS:
            _fail("eval", "precision", self.precision, f"one of {', '.join(PRECISIONS)}")

    def with_tasks(self, tasks: tuple[str, ...]) -> EvalConfig:
        """The same settings on other tasks (e.g. the ablations' STS-B test alone)."""
        return _with(self, "eval", tasks=tuple(tasks))


@dataclass(frozen=True)
class SignificanceConfig:
    """``significance`` section: every other sweep loss is tested against ``baseline``."""

    alpha: float = 0.05
    baseline: str = "infonce"

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            _fail("significance", "alpha", self.alpha, "a number in (0, 1)")
        if self.baseline not in loss_names():
            _fail("significance", "baseline", self.baseline, f"one of {', '.join(loss_names())}")


@dataclass(frozen=True)
class SweepConfig:
    """``sweep`` section: the matrix that ``train``/``evaluate`` fan out over."""

    backbones: tuple[str, ...] = ("all-MiniLM-L6-v2",)
    losses: tuple[str, ...] = ("infonce", "focal_infonce")
    seeds: tuple[int, ...] = (1, 2, 3)
    # The frameworks the sweep trains (the train / evaluate matrix's framework axis), each on every sweep
    # backbone; the first is the reference the report and the significance tests compare the others with.
    # Unset: the framework whose SPEC says it is the default (focalcse.core.frameworks.default_framework).
    frameworks: tuple[str, ...] = field(default_factory=lambda: (default_framework(),))

    @property
    def all_frameworks(self) -> tuple[str, ...]:
        """Every framework the sweep trains, the reference first (``frameworks``)."""
        return self.frameworks

    @property
    def reference(self) -> str:
        """The framework every other one is compared with: the first of ``frameworks``."""
        return self.frameworks[0]

    @property
    def others(self) -> tuple[str, ...]:
        """The frameworks besides the reference (each compared with it in the report)."""
        return self.frameworks[1:]

    def backbones_of(self, framework: str) -> tuple[str, ...]:
        """The backbones ``framework`` trains: every sweep backbone (one cross product per set)."""
        return self.backbones

    def __post_init__(self) -> None:
        names = framework_names()
        fw = list(self.frameworks)
        if not fw or any(f not in names for f in fw) or len(set(fw)) != len(fw):
            _fail("sweep", "frameworks", fw, f"one or more unique names from {', '.join(names)}")
        if not self.backbones:
            _fail("sweep", "backbones", list(self.backbones), "at least one backbone")
        bad = [x for x in self.losses if x not in loss_names()]
        if bad or not self.losses or len(set(self.losses)) != len(self.losses):
            _fail(
                "sweep",
                "losses",
                list(self.losses),
                f"a non-empty list of unique names from {', '.join(loss_names())}",
            )
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            _fail("sweep", "seeds", list(self.seeds), "a non-empty list of unique integers")
        if any((not isinstance(x, int)) or x < 0 for x in self.seeds):
            _fail("sweep", "seeds", list(self.seeds), "integers >= 0")


@dataclass(frozen=True)
class AblationConfig:
    """``ablation`` section: the tau and m sweeps of the paper's Tables 4 and 5 (DVC stages
    ``ablate_tau`` / ``ablate_m``). Each item trains ``loss`` on ``backbone`` with one seed, as long as
    the main runs; every other train key is that item's effective config (train, backbone and loss
    overrides): the tau sweep keeps the loss's effective m, the m sweep its effective tau.

    The lists name only the values to train. The point at the effective default (e.g. tau 0.05) is
    the main sweep's run of that backbone, loss and seed, reused by the report, so listing it is
    refused."""

    loss: str = "focal_infonce"
    backbone: str = ""  # "" = the first sweep backbone
    seed: int = 1  # one of sweep.seeds: the default point is that main-sweep run
    temperatures: tuple[float, ...] = (0.03, 0.1)  # Table 4, besides the default
    ms: tuple[float, ...] = (0.1, 0.5)  # Table 5, besides the default

    def __post_init__(self) -> None:
        s = "ablation"
        if self.loss not in loss_names():
            _fail(s, "loss", self.loss, f"one of {', '.join(loss_names())}")
        if self.seed < 0:
            _fail(s, "seed", self.seed, "an integer >= 0")
        if len(set(self.temperatures)) != len(self.temperatures):
            _fail(s, "temperatures", list(self.temperatures), "a list of unique numbers ([] = no Table 4)")
        if any(not (_finite(t) and t > 0) for t in self.temperatures):
            _fail(s, "temperatures", list(self.temperatures), "numbers > 0")
        if len(set(self.ms)) != len(self.ms):
            _fail(s, "ms", list(self.ms), "a list of unique numbers ([] = no Table 5)")
        if any(not (_finite(m) and m >= 0) for m in self.ms):
            _fail(s, "ms", list(self.ms), "numbers >= 0")


@dataclass(frozen=True)
class ReportConfig:
    """``report`` section: the qualitative hard negatives and Figure 1 of the report."""

    hard_negatives: int = 5  # pairs shown in the qualitative table (paper §5.1)
    hard_negative_max_gold: float = 1.0  # a "negative" is an STS-B train pair with gold <= this (0-5)
    figure1_ms: tuple[float, ...] = (0.1, 0.3, 0.5)  # m values drawn in Figure 1

    def __post_init__(self) -> None:
        s = "report"
        if self.hard_negatives < 1:
            _fail(s, "hard_negatives", self.hard_negatives, "an integer >= 1")
        if not 0 <= self.hard_negative_max_gold <= 5:
            _fail(s, "hard_negative_max_gold", self.hard_negative_max_gold, "a number in [0, 5]")
        if not self.figure1_ms or any(not 0 <= m < 2 for m in self.figure1_ms):
            _fail(s, "figure1_ms", list(self.figure1_ms), "a non-empty list of numbers in [0, 2)")


@dataclass(frozen=True)
class FrameworksConfig:
    """``frameworks`` section: each registered framework's own settings (used by its items only),
    built by the settings class its ``SPEC`` names (:mod:`focalcse.core.frameworks`)."""

    values: tuple[tuple[str, Any], ...] = ()  # (framework, its settings) for every framework that has some

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> FrameworksConfig:
        data = _section("frameworks", data)
        names = framework_names()
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"params frameworks: unknown key(s) {unknown}; allowed: {', '.join(names)}")
        values = []
        for name in names:
            klass, section = settings_class(name), f"frameworks.{name}"
            if klass is None:
                if data.get(name):
                    raise ConfigError(f"params {section}: framework {name} has no settings; expected none")
                continue
            build = getattr(klass, "from_mapping", None)
            values.append(
                (name, build(section, data.get(name)) if build else from_dict(klass, section, data.get(name)))
            )
        return cls(tuple(values))

    def settings(self, framework: str) -> Any | None:
        """The settings of ``framework`` (None: SimCSE, or a framework without settings)."""
        return dict(self.values).get(framework)

    def __getattr__(self, name: str) -> Any:  # params.frameworks.<name>
        if name != "values" and not name.startswith("_"):
            for framework, settings in self.values:
                if framework == name:
                    return settings
        raise AttributeError(f"params frameworks: no settings of a framework {name!r}")

    def train_layers(self, framework: str, backbone: str) -> list[tuple[str, dict[str, Any]]]:
        """The framework's train keys over an item's config: ``frameworks.<f>.train``, then
        ``frameworks.<f>.backbones.<backbone>`` (for settings that declare them)."""
        cfg = self.settings(framework)
        if cfg is None:
            return []
        return [
            (f"frameworks.{framework}.train", dict(getattr(cfg, "train", {}) or {})),
            (
                f"frameworks.{framework}.backbones.{backbone}",
                dict((getattr(cfg, "backbones", {}) or {}).get(backbone) or {}),
            ),
        ]


_EXPERIMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,99}$")


@dataclass(frozen=True)
class TrackingConfig:
    """``tracking`` section: where MLflow files the runs of this parameter set."""

    experiment: str = "default"  # MLflow experiment name (one per parameter set)

    def __post_init__(self) -> None:
        if not _EXPERIMENT.match(self.experiment):
            _fail(
                "tracking",
                "experiment",
                self.experiment,
                "1-100 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit",
            )
