"""The typed settings the science core consumes, torch-free: the train config (one matrix item's
effective ``train`` keys), the rules that turn a params mapping into a frozen dataclass, and the
trainer's own length checks.

It sits in the core layer so that :mod:`focalcse.core.training` needs nothing from
:mod:`focalcse.config` (which loads, merges and validates ``params.yaml`` above the core). Importing
it needs no torch: the losses' names and hyper-parameters come from the torch-free registry
(:mod:`focalcse.core.losses`), the poolers from :mod:`focalcse.core.backbones`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar, get_type_hints

from focalcse.core.backbones import POOLERS, unpad_unsupported_config
from focalcse.core.frameworks import framework_spec
from focalcse.core.losses import hyper_declarations, hyper_params, loss_names, resolve_hyper
from focalcse.errors import ConfigError

TRAIN_PRECISIONS = ("fp32", "bf16")  # training: fp16 without loss scaling underflows, so it is refused


def _fail(section: str, key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"params {section}.{key} = {value!r}: expected {allowed}")


def _finite(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (every float param must be one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps(:\d+)?)$")

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")  # org/name


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
    # SimCSE items: run the encoder's dense layers on the real tokens only (focalcse.core.unpad);
    # false = the padded transformers forward. Frameworks always train padded (padded_reason decides;
    # the recorded config then says false).
    unpad: bool = True

    def __post_init__(self) -> None:
        s = "train"
        if self.loss not in loss_names():
            _fail(s, "loss", self.loss, f"one of {', '.join(loss_names())}")
        if not (_finite(self.temperature) and self.temperature > 0):
            _fail(s, "temperature", self.temperature, "a number > 0")
        for key, value in self.hyper:
            _check_hyper(s, self.loss, key, value)
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
        values = self.loss_kwargs()
        if key not in values:
            raise KeyError(f"loss {self.loss!r} has no hyper-parameter {key!r}")
        return values[key]

    def loss_kwargs(self) -> dict[str, float]:
        """The keyword arguments of this config's loss (its SPEC's hyper-parameters, defaults filled
        by :func:`focalcse.core.losses.resolve_hyper`)."""
        return resolve_hyper(self.loss, dict(self.hyper))

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
            written = dict(hyper)
            hyper += [(k, v) for k, v in resolve_hyper(loss, written).items() if k not in written]
        base = from_dict(cls, section, {k: v for k, v in data.items() if k in own})
        return _with(base, section, hyper=tuple(hyper))


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


def padded_reason(cfg: TrainConfig, framework: str, model_config: Mapping[str, Any] | None) -> str | None:
    """Why an item's train-mode forwards run padded, or None when they skip the padding
    (:mod:`focalcse.core.unpad`): the one decision that the trainer
    (:func:`focalcse.core.training._use_unpad`) takes and that the recorded config
    (:func:`recorded_train`: ``focalcse config``, MLflow, ``*.meta.json``) reports.

    Padded: ``train.unpad`` false; a framework whose SPEC does not say ``"unpad": True`` (DiffCSE's
    replaced-token loss averages over padding positions, PromptBERT reads its [MASK] positions); a backbone the unpadded
    forward does not cover (:func:`focalcse.core.backbones.unpad_unsupported_config`). ``model_config``:
    the backbone's config as a dict; None (it could not be read) decides by the first two alone."""
    if not cfg.unpad:
        return "train.unpad is false"
    if not framework_spec(framework).unpad:
        return f"framework {framework} trains padded"
    if model_config is None:
        return None
    return unpad_unsupported_config(model_config)


def recorded_train(
    cfg: TrainConfig, framework: str, model_config: Mapping[str, Any] | None, settings: Any = None
) -> dict[str, Any]:
    """``cfg.to_dict()`` as the item runs it: ``unpad`` is the forward the trainer takes
    (:func:`padded_reason`) and ``pooler`` the sentence vector the framework reads, where its settings
    name it (``settings.recorded_pooler(pooler)``, e.g. PromptBERT's template mask token). Keys keep
    their order, so an item that runs as configured records exactly ``cfg.to_dict()``."""
    out = cfg.to_dict()
    out["unpad"] = padded_reason(cfg, framework, model_config) is None
    recorded_pooler = getattr(settings, "recorded_pooler", None)
    if recorded_pooler is not None:
        out["pooler"] = recorded_pooler(cfg.pooler)
    return out


def _check_hyper(section: str, loss: str, key: str, value: Any) -> None:
    """A loss hyper-parameter's value, checked against the schema of the loss that uses it: the
    item's own loss when it declares ``key``; else (a key meant for another loss of the sweep) the
    schema of some loss that declares it. Two losses may declare one key with different ranges."""
    declared = hyper_declarations(key)
    if not declared:
        _fail(section, key, value, f"a hyper-parameter some loss declares ({', '.join(hyper_params())})")
    own = declared.get(loss)
    candidates = [own] if own is not None else list(declared.values())
    problems = [h.check(value) or (None if _finite(value) else h.allowed()) for h in candidates]
    if all(problems):
        owners = loss if own is not None else " or ".join(declared)
        _fail(
            section,
            key,
            value,
            f"{' or '.join(dict.fromkeys(p for p in problems if p))} (as {owners} declares it)",
        )
