"""Typed, validated configuration: one frozen dataclass per ``params.yaml`` section.

Every value is checked on load; a bad one raises :class:`ConfigError` naming the key, the value and
what is allowed, before any work starts. Importing this module needs no torch: the losses' names and
hyper-parameters come from the torch-free registry (:mod:`focalcse.core.losses`), the task names from
:mod:`focalcse.data.tasks`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml

from focalcse.core.backbones import POOLERS
from focalcse.core.losses import hyper_params, loss_names, loss_spec
from focalcse.data.tasks import TASKS
from focalcse.layout import BASE_FRAMEWORK  # noqa: F401 - the train / evaluate stages' framework; re-exported

FRAMEWORKS = ("simcse", "promptbert", "diffcse")  # core/frameworks/<name>.py (SimCSE: core/training.py)
PRECISIONS = ("fp32", "bf16", "fp16")  # evaluation (inference only)
TRAIN_PRECISIONS = ("fp32", "bf16")  # training: fp16 without loss scaling underflows, so it is refused


class ConfigError(ValueError):
    """A params value that is missing, of the wrong type or out of range."""


def _fail(section: str, key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"params {section}.{key} = {value!r}: expected {allowed}")


def _finite(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (every float param must be one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps(:\d+)?)$")


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
class TrainConfig:
    """``train`` section (per-backbone overrides merge over it)."""

    loss: str = "focal_infonce"
    temperature: float = 0.05  # tau; the official code uses 0.05
    # The losses' own hyper-parameters (e.g. Focal-InfoNCE's m), declared by each loss's SPEC: flat
    # keys of the train section, kept here in the order written. See `hyper_value` / `loss_kwargs`.
    hyper: tuple[tuple[str, float], ...] = ()
    pooler: str = "cls"  # SimCSE unsupervised: cls + MLP in training ...
    mlp_only_train: bool = True  # ... and the MLP dropped at evaluation (cls_before_pooler)
    batch_size: int = 64
    lr: float = 3e-5
    epochs: int = 1
    max_steps: int = 0  # 0 = run all epochs
    max_seq_len: int = 32
    eval_steps: int = 125  # STS-B dev evaluation period (SimCSE: 125)
    eval_at_start: bool = True  # also score the starting model (step 0) for the curves; never selected
    seed: int = 42
    precision: str = "fp32"  # fp32 | bf16 autocast (fp16 is refused: it needs loss scaling)
    weight_decay: float = 0.0
    log_every: int = 1
    # clip the global gradient norm before every step (SimCSE / HF Trainer: 1.0); 0 = off
    max_grad_norm: float = 1.0
    grad_cache_chunk: int = 0  # GradCache: sequences per forward (2 per sentence); 0 = one forward
    checkpoint_steps: int = 0  # resumable checkpoint every N steps; 0 = at every dev evaluation
    device: str = "cpu"

    def __post_init__(self) -> None:
        s = "train"
        if self.loss not in loss_names():
            _fail(s, "loss", self.loss, f"one of {', '.join(loss_names())}")
        if not (_finite(self.temperature) and self.temperature > 0):
            _fail(s, "temperature", self.temperature, "a number > 0")
        declared = hyper_params()
        for key, value in self.hyper:
            if key not in declared:
                _fail(s, key, value, f"a hyper-parameter some loss declares ({', '.join(declared)})")
            expected = declared[key].check(value) or (None if _finite(value) else declared[key].allowed())
            if expected:
                _fail(s, key, value, expected)
        if self.pooler not in POOLERS:
            _fail(s, "pooler", self.pooler, f"one of {', '.join(POOLERS)}")
        if self.batch_size < 2:
            _fail(s, "batch_size", self.batch_size, "an integer >= 2 (in-batch negatives need two sentences)")
        if not (_finite(self.lr) and self.lr > 0):
            _fail(s, "lr", self.lr, "a number > 0")
        if self.epochs < 1:
            _fail(s, "epochs", self.epochs, "an integer >= 1")
        if self.max_steps < 0:
            _fail(s, "max_steps", self.max_steps, "an integer >= 0 (0 = all epochs)")
        if not 2 <= self.max_seq_len <= 4096:
            _fail(s, "max_seq_len", self.max_seq_len, "an integer in [2, 4096]")
        if self.eval_steps < 1:
            _fail(s, "eval_steps", self.eval_steps, "an integer >= 1")
        if self.seed < 0:
            _fail(s, "seed", self.seed, "an integer >= 0")
        if self.precision not in TRAIN_PRECISIONS:
            _fail(
                s,
                "precision",
                self.precision,
                f"one of {', '.join(TRAIN_PRECISIONS)} (fp16 training would need a GradScaler, which this "
                "trainer does not use; bf16 needs none)",
            )
        if not (_finite(self.max_grad_norm) and self.max_grad_norm >= 0):
            _fail(s, "max_grad_norm", self.max_grad_norm, "a number >= 0 (0 = no clipping)")
        if not (_finite(self.weight_decay) and self.weight_decay >= 0):
            _fail(s, "weight_decay", self.weight_decay, "a number >= 0")
        if self.log_every < 1:
            _fail(s, "log_every", self.log_every, "an integer >= 1")
        if self.grad_cache_chunk < 0:
            _fail(s, "grad_cache_chunk", self.grad_cache_chunk, "an integer >= 0 (0 = off)")
        if self.checkpoint_steps < 0:
            _fail(s, "checkpoint_steps", self.checkpoint_steps, "an integer >= 0 (0 = at every evaluation)")
        if not _DEVICE.match(self.device):
            _fail(s, "device", self.device, "cpu, cuda, cuda:N or mps")

    def hyper_value(self, key: str) -> float:
        """A loss hyper-parameter: as written, else the default of this config's loss."""
        written = dict(self.hyper)
        if key in written:
            return written[key]
        defaults = loss_spec(self.loss).defaults
        if key not in defaults:
            raise KeyError(f"loss {self.loss!r} has no hyper-parameter {key!r}")
        return defaults[key]

    def loss_kwargs(self) -> dict[str, float]:
        """The keyword arguments of this config's loss (its SPEC's hyper-parameters)."""
        return {key: self.hyper_value(key) for key in loss_spec(self.loss).hyper_names}

    def to_dict(self) -> dict[str, Any]:
        """The flat train section this config stands for (what model records, metrics and MLflow
        store): ``loss``, ``temperature``, the hyper-parameters, then every other key."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "hyper":
                out.update(self.hyper)
            else:
                out[f.name] = getattr(self, f.name)
        return out

    @classmethod
    def from_mapping(cls, section: str, data: Mapping[str, Any] | None) -> TrainConfig:
        """Build from a flat train section: known keys are fields, keys a loss declares go to
        ``hyper`` (in the order written; the chosen loss's missing ones take their defaults)."""
        data = _section(section, data)
        own = {f.name for f in fields(cls)} - {"hyper"}
        declared = hyper_params()
        unknown = sorted(set(data) - own - set(declared))
        if "hyper" in data or unknown:
            allowed = sorted(own | set(declared))
            raise ConfigError(
                f"params {section}: unknown key(s) {unknown or ['hyper']}; allowed: {', '.join(allowed)}"
            )
        hyper = [(k, v) for k, v in data.items() if k in declared and k not in own]
        loss = data.get("loss", cls.loss)
        if isinstance(loss, str) and loss in loss_names():
            written = {k for k, _ in hyper}
            hyper += [(k, v) for k, v in loss_spec(loss).defaults.items() if k not in written]
        base = from_dict(cls, section, {k: v for k, v in data.items() if k in own})
        return _with(base, section, hyper=tuple(hyper))


@dataclass(frozen=True)
class EvalConfig:
    """``eval`` section."""

    tasks: tuple[str, ...] = tuple(TASKS)  # every registered task (focalcse.data.tasks)
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
    # Frameworks trained besides SimCSE (DVC's train_framework / evaluate_framework matrix axis).
    # SimCSE always runs, as the train / evaluate stages: every framework is compared with it.
    frameworks: tuple[str, ...] = ()
    # The backbones those frameworks train (a subset of backbones; the paper ran them on BERT-base only).
    framework_backbones: tuple[str, ...] = ()

    @property
    def all_frameworks(self) -> tuple[str, ...]:
        """SimCSE, then ``frameworks``: every framework the sweep trains."""
        return (BASE_FRAMEWORK, *self.frameworks)

    def backbones_of(self, framework: str) -> tuple[str, ...]:
        """The backbones ``framework`` trains: every sweep backbone for SimCSE, else ``framework_backbones``."""
        return self.backbones if framework == BASE_FRAMEWORK else self.framework_backbones

    def __post_init__(self) -> None:
        others = [f for f in FRAMEWORKS if f != BASE_FRAMEWORK]
        if any(f not in others for f in self.frameworks) or len(set(self.frameworks)) != len(self.frameworks):
            _fail(
                "sweep",
                "frameworks",
                list(self.frameworks),
                f"unique names from {', '.join(others)} ({BASE_FRAMEWORK} always runs, as the "
                "train / evaluate stages)",
            )
        if not self.backbones:
            _fail("sweep", "backbones", list(self.backbones), "at least one backbone")
        fb = list(self.framework_backbones)
        if any(b not in self.backbones for b in fb) or len(set(fb)) != len(fb):
            _fail(
                "sweep",
                "framework_backbones",
                fb,
                f"unique names from sweep.backbones ({', '.join(self.backbones)})",
            )
        if bool(self.frameworks) != bool(fb):
            _fail(
                "sweep",
                "framework_backbones",
                fb,
                "at least one backbone when sweep.frameworks is set, and [] when it is []"
                f" (sweep.frameworks = {list(self.frameworks)})",
            )
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


PROMPTBERT_TEMPLATES = ("auto", "bert", "roberta")


@dataclass(frozen=True)
class PromptBERTConfig:
    """``frameworks.promptbert``: PromptBERT's templates and denoising (core/frameworks/promptbert.py)."""

    # auto: the official pair of the backbone's family (roberta for RoBERTa models, else bert)
    templates: str = "auto"
    # template denoising in training and in the dev checkpoint selection (official unsupervised runs: yes)
    denoise: bool = True
    # ... in scoring the test sets (official evaluation.py for the unsupervised models: no); true is a
    # variant the report labels as such
    eval_denoise: bool = False
    train: dict[str, Any] = field(default_factory=dict)  # train keys for every PromptBERT item
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)  # <backbone>: train keys

    def __post_init__(self) -> None:
        if self.templates not in PROMPTBERT_TEMPLATES:
            _fail(
                "frameworks.promptbert",
                "templates",
                self.templates,
                f"one of {', '.join(PROMPTBERT_TEMPLATES)}",
            )
        _check_train_layers("frameworks.promptbert", self.train, self.backbones)


@dataclass(frozen=True)
class GeneratorConfig:
    """``frameworks.diffcse.pretrain``: the small MLM the ``pretrain_generator`` stage trains on the
    corpus with the backbone's tokenizer (random init; no MLM can be downloaded offline)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    steps: int = (
        1500  # about 4 minutes on 2 cores (held-out MLM loss 6.9 from 10.3; distilbert is far better)
    )
    batch_size: int = 64
    lr: float = 2.0e-3
    mask_ratio: float = 0.15  # BERT's MLM rate
    max_seq_len: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        s = "frameworks.diffcse.pretrain"
        for key in ("hidden", "layers", "heads", "steps", "max_seq_len"):
            if getattr(self, key) < 1:
                _fail(s, key, getattr(self, key), "an integer >= 1")
        if self.batch_size < 2:  # a batch of one sentence is dropped (batch_spans): no MLM batch at all
            _fail(s, "batch_size", self.batch_size, "an integer >= 2")
        if self.hidden % self.heads:
            _fail(s, "hidden", self.hidden, f"a multiple of heads ({self.heads})")
        if not (_finite(self.lr) and self.lr > 0):
            _fail(s, "lr", self.lr, "a number > 0")
        if self.seed < 0:
            _fail(s, "seed", self.seed, "an integer >= 0")
        if not 0 < self.mask_ratio < 1:
            _fail(s, "mask_ratio", self.mask_ratio, "a number in (0, 1)")


@dataclass(frozen=True)
class DiffCSEConfig:
    """``frameworks.diffcse``: DiffCSE's generator, masking, RTD weight and projector
    (core/frameworks/diffcse.py; official bert-base values: mask 0.30, lambda 0.005, BatchNorm)."""

    generator: str = ""  # "" = the pretrain_generator stage's MLM; else a hub id or an MLM folder
    mask_ratio: float = 0.30
    lambda_weight: float = 0.005
    batchnorm: bool = True
    pretrain: GeneratorConfig = field(default_factory=GeneratorConfig)
    train: dict[str, Any] = field(default_factory=dict)
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = "frameworks.diffcse"
        if not 0 < self.mask_ratio < 1:
            _fail(s, "mask_ratio", self.mask_ratio, "a number in (0, 1)")
        if not (_finite(self.lambda_weight) and self.lambda_weight >= 0):
            _fail(s, "lambda_weight", self.lambda_weight, "a number >= 0 (0 = SimCSE's loss)")
        if self.generator and not (Path(self.generator).is_dir() or _HUB_ID.match(self.generator)):
            _fail(
                s,
                "generator",
                self.generator,
                "'' (the pretrain_generator stage's MLM), an MLM folder or a hub id",
            )
        _check_train_layers(s, self.train, self.backbones)


@dataclass(frozen=True)
class FrameworksConfig:
    """``frameworks`` section: each framework's own settings (used by its items only)."""

    promptbert: PromptBERTConfig = field(default_factory=PromptBERTConfig)
    diffcse: DiffCSEConfig = field(default_factory=DiffCSEConfig)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> FrameworksConfig:
        data = _section("frameworks", data)
        unknown = sorted(set(data) - {"promptbert", "diffcse"})
        if unknown:
            raise ConfigError(f"params frameworks: unknown key(s) {unknown}; allowed: diffcse, promptbert")
        diff = _section("frameworks.diffcse", data.get("diffcse"))
        pretrain = from_dict(GeneratorConfig, "frameworks.diffcse.pretrain", diff.pop("pretrain", None))
        return cls(
            promptbert=from_dict(PromptBERTConfig, "frameworks.promptbert", data.get("promptbert")),
            diffcse=_with(
                from_dict(DiffCSEConfig, "frameworks.diffcse", diff), "frameworks.diffcse", pretrain=pretrain
            ),
        )

    def settings(self, framework: str) -> PromptBERTConfig | DiffCSEConfig | None:
        return getattr(self, framework, None)

    def train_layers(self, framework: str, backbone: str) -> list[tuple[str, dict[str, Any]]]:
        """The framework's train keys over an item's config: ``frameworks.<f>.train``, then
        ``frameworks.<f>.backbones.<backbone>``."""
        cfg = self.settings(framework)
        if cfg is None:
            return []
        return [
            (f"frameworks.{framework}.train", dict(cfg.train)),
            (f"frameworks.{framework}.backbones.{backbone}", dict(cfg.backbones.get(backbone) or {})),
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


T = TypeVar("T")


def _with(cfg: T, section: str, **changes: Any) -> T:
    """A copy of dataclass ``cfg`` with ``changes``, validated like a fresh one."""
    values = {f.name: getattr(cfg, f.name) for f in fields(cfg)}  # type: ignore[arg-type]
    values.update(changes)
    try:
        return type(cfg)(**values)
    except TypeError as err:  # pragma: no cover - callers pass field names
        raise ConfigError(f"params {section}: {err}") from err


def from_dict(cls: type[T], section: str, data: dict[str, Any] | None) -> T:
    """Build dataclass ``cls`` from a params section, refusing unknown keys and wrong types."""
    data = _section(section, data)
    hints = get_type_hints(cls)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"params {section}: unknown key(s) {unknown}; allowed: {', '.join(sorted(names))}")
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(section, key, value, hints[key])
    try:
        return cls(**kwargs)
    except TypeError as err:  # pragma: no cover - from_dict checks names first
        raise ConfigError(f"params {section}: {err}") from err


def _coerce(section: str, key: str, value: Any, hint: Any) -> Any:
    text = str(hint)
    if hint is bool or text == "bool":
        if not isinstance(value, bool):
            _fail(section, key, value, "true or false")
        return value
    if hint is int or text == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(section, key, value, "an integer")
        return value
    if hint is float or text == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(section, key, value, "a number")
        return value  # an int stays as written, so error messages quote the user's value
    if hint is str or text == "str":
        if not isinstance(value, str):
            _fail(section, key, value, "a string")
        return value
    if text.startswith("tuple"):
        if not isinstance(value, (list, tuple)):
            _fail(section, key, value, "a list")
        inner = "float" if "float" in text else "int" if "int" in text else "str"
        if inner == "float":
            if any(isinstance(item, bool) or not isinstance(item, (int, float)) for item in value):
                _fail(section, key, value, "a list of numbers")
            return tuple(float(item) for item in value)
        for item in value:
            if inner == "int" and (isinstance(item, bool) or not isinstance(item, int)):
                _fail(section, key, value, "a list of integers")
            if inner == "str" and not isinstance(item, str):
                _fail(section, key, value, "a list of strings")
        return tuple(value)
    if text.startswith("dict"):
        if not isinstance(value, Mapping) or any(not isinstance(k, str) for k in value):
            _fail(section, key, value, "a mapping of names to values")
        if text.startswith("dict[str, dict") and any(not isinstance(v, Mapping) for v in value.values()):
            _fail(section, key, value, "a mapping of names to mappings of train keys")
        return dict(value)
    raise ConfigError(f"params {section}.{key}: no validation for its type {text}")  # a new field type


def _section(section: str, data: Any) -> dict[str, Any]:
    """A params section as a dict: ``None`` (empty in YAML) is ``{}``; anything but a mapping is refused."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"params {section} = {data!r}: expected a mapping of keys to values")
    return dict(data)


# The train keys the sweep item sets itself: an override layer may not set them (they would be ignored).
ITEM_KEYS = ("loss", "seed")


def _check_train_layers(section: str, train: Mapping[str, Any], backbones: Mapping[str, Any]) -> None:
    """A framework's train-key layers (``<section>.train``, ``<section>.backbones.<b>``) name only train
    keys; their values are validated in each item's merged config (:meth:`Params.train_config`)."""
    own = {f.name for f in fields(TrainConfig)} - {"hyper"}
    allowed = own | set(hyper_params())
    for where, layer in (("train", train), *((f"backbones.{b}", v) for b, v in backbones.items())):
        unknown = sorted(set(layer) - allowed)
        if unknown:
            raise ConfigError(
                f"params {section}.{where}: unknown key(s) {unknown}; allowed: {', '.join(sorted(allowed))}"
            )
        fixed = sorted(set(layer) & set(ITEM_KEYS))
        if fixed:
            raise ConfigError(f"params {section}.{where}: {fixed} come from the sweep item; remove them")


@dataclass(frozen=True)
class Params:
    """All of ``params.yaml``."""

    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    significance: SignificanceConfig = field(default_factory=SignificanceConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    frameworks: FrameworksConfig = field(default_factory=FrameworksConfig)
    backbone_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def backbone_source(self, backbone: str) -> str:
        """What ``from_pretrained`` loads for a sweep backbone name: ``backbone_overrides.<name>.source``
        (a hub id or a folder) if set, else the name itself."""
        return str((self.backbone_overrides.get(backbone) or {}).get("source", backbone))

    def config_layers(
        self, backbone: str, loss: str, framework: str = BASE_FRAMEWORK
    ) -> list[tuple[str, dict[str, Any]]]:
        """The train keys of one item, layer by layer, later layers winning: ``train``, the backbone's
        overrides (``backbone_overrides.<b>``), the loss's overrides (``loss_overrides.<l>``), the
        loss's overrides for this backbone (``backbone_overrides.<b>.losses.<l>``), then for a framework
        other than SimCSE ``frameworks.<f>.train`` and ``frameworks.<f>.backbones.<b>``."""
        b_over = dict(self.backbone_overrides.get(backbone) or {})
        b_loss = dict((b_over.pop("losses", None) or {}).get(loss) or {})
        b_over.pop("source", None)
        return [
            ("train", self.train.to_dict()),
            (f"backbone_overrides.{backbone}", b_over),
            (f"loss_overrides.{loss}", dict(self.loss_overrides.get(loss) or {})),
            (f"backbone_overrides.{backbone}.losses.{loss}", b_loss),
            *self.frameworks.train_layers(framework, backbone),
        ]

    def train_config(
        self, backbone: str, loss: str, seed: int, framework: str = BASE_FRAMEWORK, **changes: Any
    ) -> TrainConfig:
        """One matrix item's effective train config: :meth:`config_layers` merged in order, this item's
        loss and seed, and ``changes`` (train keys) on top."""
        merged: dict[str, Any] = {}
        for _, layer in self.config_layers(backbone, loss, framework):
            merged.update(layer)
        merged.update(loss=loss, seed=seed, **changes)
        if loss in loss_names():  # only this item's loss's hyper-parameters (InfoNCE carries no m)
            own = set(loss_spec(loss).hyper_names)
            for key in set(hyper_params()) - own - set(changes):
                merged.pop(key, None)
        where = f"backbone {backbone}, loss {loss}" + (
            "" if framework == BASE_FRAMEWORK else f", framework {framework}"
        )
        try:
            return TrainConfig.from_mapping(f"train ({where})", merged)
        except ConfigError as err:  # name the layers over `train` that this item merges
            layers = [name for name, layer in self.config_layers(backbone, loss, framework)[1:] if layer]
            if not layers:
                raise
            raise ConfigError(f"{err} (layers over train for this item: {', '.join(layers)})") from err

    def effective_config(
        self, backbone: str, loss: str, seed: int | None = None, framework: str = BASE_FRAMEWORK
    ) -> dict[str, Any]:
        """The dict ``focalcse config`` prints and MLflow logs: the effective train config of the item
        (seed: the first sweep seed unless given); for a framework other than SimCSE its own settings
        under ``framework`` (SimCSE's dict is the train config alone, as before frameworks existed)."""
        seed = self.sweep.seeds[0] if seed is None else seed
        out = self.train_config(backbone, loss, seed, framework).to_dict()
        if framework != BASE_FRAMEWORK:
            out["framework"] = self.framework_settings(framework)
        return out

    def framework_settings(self, framework: str) -> dict[str, Any]:
        """``{"name": f, ...}``: a framework's own settings (no train keys), as saved models record them."""
        cfg = self.frameworks.settings(framework)
        if cfg is None:
            return {"name": framework}
        values = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in ("train", "backbones")}
        if "pretrain" in values:
            values["pretrain"] = {f.name: getattr(cfg.pretrain, f.name) for f in fields(cfg.pretrain)}
        return {"name": framework, **values}

    def framework_items(self) -> list[tuple[str, str, str, int]]:
        """Every (framework, backbone, loss, seed) the sweep trains, SimCSE first."""
        sw = self.sweep
        return [
            (f, b, loss, s)
            for f in sw.all_frameworks
            for b in sw.backbones_of(f)
            for loss in sw.losses
            for s in sw.seeds
        ]

    def with_changes(self, **sections: Any) -> Params:
        """A copy with whole sections replaced (e.g. ``eval=...``)."""
        return _with(self, "params", **sections)

    @property
    def ablation_backbone(self) -> str:
        """The backbone the tau / m ablations train: ``ablation.backbone`` or the first sweep backbone."""
        return self.ablation.backbone or self.sweep.backbones[0]

    def ablation_base_config(self) -> TrainConfig:
        """The main-sweep run the ablations vary: ``ablation.loss`` on the ablation backbone, seed
        ``ablation.seed`` (its effective config is the ablations' default point)."""
        ab = self.ablation
        return self.train_config(self.ablation_backbone, ab.loss, ab.seed)

    def ablation_default(self, kind: str) -> float:
        """The effective value of ``kind``'s key (tau or m) for the ablation loss: the default point,
        whose run is the main sweep's."""
        key = _ablation_key(kind)
        base = self.ablation_base_config()
        return float(base.temperature if key == "temperature" else base.hyper_value(key))

    def ablation_values(self, kind: str) -> tuple[float, ...]:
        """The values ``ablate_<kind>`` trains (params order), without the default point."""
        return self.ablation.temperatures if kind == "tau" else self.ablation.ms

    def ablation_points(self, kind: str) -> tuple[float, ...]:
        """Every point of Table 4 (``tau``) or 5 (``m``), ascending: the trained values and the default."""
        return tuple(sorted({*self.ablation_values(kind), self.ablation_default(kind)}))

    def ablation_train_config(self, kind: str, value: float) -> TrainConfig:
        """One ablation item's train config: the ablation run's effective config with ``kind``'s key
        (``tau``: temperature, ``m``: m) set to ``value``; same length as the main runs."""
        key = _ablation_key(kind)
        ab = self.ablation
        if key != "temperature" and key not in loss_spec(ab.loss).hyper_names:
            raise ConfigError(
                f"params ablation.loss = {ab.loss!r}: the {kind} ablation needs a loss with {key!r}"
            )
        return self.train_config(self.ablation_backbone, ab.loss, ab.seed, **{key: value})


def _ablation_key(kind: str) -> str:
    from focalcse.layout import ABLATION_KINDS

    if kind not in ABLATION_KINDS:
        raise ConfigError(f"ablation kind {kind!r}: expected one of {', '.join(ABLATION_KINDS)}")
    return ABLATION_KINDS[kind]


def check_ablation(params: Params) -> None:
    """The ablations vary a main-sweep run: its backbone, loss and seed must be in the sweep, and the
    lists must not repeat the default point (that run is reused, never retrained)."""
    ab, sw = params.ablation, params.sweep
    if params.ablation_backbone not in sw.backbones:
        _fail(
            "ablation", "backbone", ab.backbone, f"one of sweep.backbones ({', '.join(sw.backbones)}) or ''"
        )
    if ab.loss not in sw.losses:
        _fail("ablation", "loss", ab.loss, f"one of sweep.losses ({', '.join(sw.losses)})")
    if ab.seed not in sw.seeds:
        _fail("ablation", "seed", ab.seed, f"one of sweep.seeds ({', '.join(map(str, sw.seeds))})")
    for kind, key in (("tau", "temperatures"), ("m", "ms")):
        values = params.ablation_values(kind)
        if kind == "m" and "m" not in loss_spec(ab.loss).hyper_names:
            continue
        default = params.ablation_default(kind)
        if any(abs(v - default) <= 1e-12 for v in values):
            _fail(
                "ablation",
                key,
                list(values),
                f"values other than {default:g}, the effective {key[:-1]} of {ab.loss} on "
                f"{params.ablation_backbone} (that point is the main sweep's seed-{ab.seed} run, reused)",
            )
        for v in values:
            params.ablation_train_config(kind, v)


def batch_spans(n: int, batch_size: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` slices of one epoch's sentence permutation that are its batches
    (:func:`focalcse.core.training.batch_order` cuts every epoch with them): consecutive runs of
    ``batch_size``, the last one shorter, dropped when it holds a single sentence (no in-batch negative)."""
    spans = [(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
    return [(start, stop) for start, stop in spans if stop - start >= 2]


def training_steps(cfg: TrainConfig, n: int, where: str = "") -> int:
    """The optimizer steps ``cfg`` runs on ``n`` sentences in one process: ``max_steps``, or every batch
    of ``epochs`` epochs when it is 0.

    The trainer's own refusals (:func:`focalcse.core.training._setup` calls this), torch-free so that
    the check stage applies them to every item before DVC deletes any output: ``max_steps`` beyond the
    batches the sentences give, or no batch at all. ``where`` names the item in the message."""
    available = len(batch_spans(n, cfg.batch_size)) * cfg.epochs
    item = f" ({where})" if where else ""
    if cfg.max_steps > available:
        raise ConfigError(
            f"params train.max_steps={cfg.max_steps}{item} but {n} sentences x {cfg.epochs} epoch(s) give only "
            f"{available} batches of {cfg.batch_size}: expected 0 (every batch) or at most {available}"
        )
    if available == 0:
        raise ConfigError(f"no training batch: {n} sentences with batch_size {cfg.batch_size}{item}")
    return cfg.max_steps or available


SECTIONS = {
    "data": DataConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "significance": SignificanceConfig,
    "sweep": SweepConfig,
    "ablation": AblationConfig,
    "report": ReportConfig,
    "tracking": TrackingConfig,
}
OTHER_SECTIONS = ("backbone_overrides", "loss_overrides", "frameworks", "benchmark")


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate ``params.yaml``; raises :class:`ConfigError` on the first bad value."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SECTIONS) - set(OTHER_SECTIONS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown section(s) {unknown}; allowed: {', '.join([*SECTIONS, *OTHER_SECTIONS])}"
        )
    built = {
        name: TrainConfig.from_mapping(name, raw.get(name))
        if cls is TrainConfig
        else from_dict(cls, name, raw.get(name))
        for name, cls in SECTIONS.items()
    }
    overrides = raw.get("backbone_overrides") or {}
    if not isinstance(overrides, dict) or any(not isinstance(v, dict) for v in overrides.values()):
        raise ConfigError(
            f"params backbone_overrides = {overrides!r}: expected a mapping backbone -> train keys"
        )
    for backbone, over in overrides.items():
        losses = over.get("losses") or {}
        if not isinstance(losses, dict) or any(not isinstance(v, dict) for v in losses.values()):
            raise ConfigError(
                f"params backbone_overrides.{backbone}.losses = {losses!r}: expected a mapping loss -> train keys"
            )
        _check_loss_names(f"backbone_overrides.{backbone}.losses", losses)
        for where, layer in ((backbone, over), *((f"{backbone}.losses.{k}", v) for k, v in losses.items())):
            if set(layer) & set(ITEM_KEYS):
                raise ConfigError(
                    f"params backbone_overrides.{where}: 'loss' and 'seed' come from the sweep item"
                )
    loss_over = raw.get("loss_overrides") or {}
    if not isinstance(loss_over, dict) or any(not isinstance(v, dict) for v in loss_over.values()):
        raise ConfigError(f"params loss_overrides = {loss_over!r}: expected a mapping loss -> train keys")
    _check_loss_names("loss_overrides", loss_over)
    for loss, over in loss_over.items():
        if set(over) & set(ITEM_KEYS):
            raise ConfigError(f"params loss_overrides.{loss}: 'loss' and 'seed' come from the sweep item")
    params = Params(
        **built,
        frameworks=FrameworksConfig.from_mapping(raw.get("frameworks")),
        backbone_overrides=overrides,
        loss_overrides=loss_over,
        raw=raw,
    )
    for backbone in params.sweep.backbones:  # validate every merged train config up front
        check_backbone(backbone, params.backbone_source(backbone))
        for framework in params.sweep.all_frameworks:
            if backbone not in params.sweep.backbones_of(framework):
                continue
            for loss in params.sweep.losses:
                params.train_config(backbone, loss, params.sweep.seeds[0], framework)
    check_ablation(params)
    return params


def _check_loss_names(where: str, mapping: dict[str, Any]) -> None:
    bad = sorted(set(mapping) - set(loss_names()))
    if bad:
        raise ConfigError(
            f"params {where}: unknown loss(es) {bad}; expected names from {', '.join(loss_names())}"
        )


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_backbone(name: str, source: str) -> None:
    """A sweep backbone needs a path-safe name and a source that is the offline default, an existing
    model folder, or a well-formed hub id (its existence on the hub is checked when it is loaded)."""
    from focalcse.core.backbones import resolve_backbone

    if not _NAME.match(name):
        _fail(
            "sweep",
            "backbones",
            name,
            "names of letters, digits, '.', '_' or '-' (set backbone_overrides.<name>.source for a path or org/id)",
        )
    try:
        resolved = resolve_backbone(source)
    except ValueError as err:
        raise ConfigError(f"params backbone_overrides.{name}.source = {source!r}: {err}") from err
    if resolved == source and not Path(source).is_dir() and not _HUB_ID.match(source):
        _fail(
            f"backbone_overrides.{name}",
            "source",
            source,
            "all-MiniLM-L6-v2, an existing model folder, or a hub id like org/name",
        )
