"""``params.yaml`` as one validated :class:`Params`: load, merge an item's train layers, check the
ablations and the backbones."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from focalcse.config.sections import (
    AblationConfig,
    DataConfig,
    EvalConfig,
    FrameworksConfig,
    ReportConfig,
    SignificanceConfig,
    SweepConfig,
    TrackingConfig,
)
from focalcse.core.backbones import backbone_config
from focalcse.core.losses import hyper_params, loss_names, loss_spec
from focalcse.core.settings import HUB_ID, ITEM_KEYS, TrainConfig, _fail, _with, from_dict, recorded_train
from focalcse.errors import ConfigError


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
    frameworks: FrameworksConfig = field(default_factory=lambda: FrameworksConfig.from_mapping(None))
    backbone_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def backbone_source(self, backbone: str) -> str:
        """What ``from_pretrained`` loads for a sweep backbone name: ``backbone_overrides.<name>.source``
        (a hub id or a folder) if set, else the name itself."""
        return str((self.backbone_overrides.get(backbone) or {}).get("source", backbone))

    def config_layers(
        self, backbone: str, loss: str, framework: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """The train keys of one item, layer by layer, later layers winning: ``train``, the backbone's
        overrides (``backbone_overrides.<b>``), the loss's overrides (``loss_overrides.<l>``), the
        loss's overrides for this backbone (``backbone_overrides.<b>.losses.<l>``), then the framework's
        ``frameworks.<f>.train`` and ``frameworks.<f>.backbones.<b>`` (``framework`` None: the sweep's
        reference, its first framework)."""
        framework = framework or self.sweep.reference
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
        self, backbone: str, loss: str, seed: int, framework: str | None = None, **changes: Any
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
        framework = framework or self.sweep.reference
        where = f"backbone {backbone}, loss {loss}" + (
            "" if framework == self.sweep.reference else f", framework {framework}"
        )
        try:
            return TrainConfig.from_mapping(f"train ({where})", merged)
        except ConfigError as err:  # name the layers over `train` that this item merges
            layers = [name for name, layer in self.config_layers(backbone, loss, framework)[1:] if layer]
            if not layers:
                raise
            raise ConfigError(f"{err} (layers over train for this item: {', '.join(layers)})") from err

    def effective_config(
        self, backbone: str, loss: str, seed: int | None = None, framework: str | None = None
    ) -> dict[str, Any]:
        """The dict ``focalcse config`` prints and MLflow logs: the effective train config of the item
        (seed: the first sweep seed unless given) as the trainer runs it (:func:`recorded_train`: the
        forward it takes, ``unpad``, decided on the backbone's ``config.json`` where it can be read, and
        the framework's own name for its sentence vector, ``pooler``); a framework's own settings under
        ``framework`` (:meth:`framework_record`; a framework with none, SimCSE, gives the train config
        alone)."""
        framework = framework or self.sweep.reference
        seed = self.sweep.seeds[0] if seed is None else seed
        cfg = self.train_config(backbone, loss, seed, framework)
        model_config = backbone_config(self.backbone_source(backbone))
        out = recorded_train(cfg, framework, model_config, self.frameworks.settings(framework))
        record = self.framework_record(framework)
        if record is not None:
            out["framework"] = record
        return out

    def framework_record(self, framework: str) -> dict[str, Any] | None:
        """What a framework's items record of it (:meth:`framework_settings`), or None when it has no
        setting of its own besides its train-key layers (SimCSE): its records are then the train
        config alone."""
        settings = self.framework_settings(framework)
        return settings if len(settings) > 1 else None

    def framework_settings(self, framework: str) -> dict[str, Any]:
        """``{"name": f, ...}``: a framework's own settings (no train keys), as saved models record them."""
        cfg = self.frameworks.settings(framework)
        if cfg is None:
            return {"name": framework}
        values = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in ("train", "backbones")}
        for key, value in values.items():  # a nested block (DiffCSE's pretrain) as a plain dict
            if is_dataclass(value):
                values[key] = {f.name: getattr(value, f.name) for f in fields(value)}
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


def parse_yaml(text: str, where: str | Path) -> Any:
    """``yaml.safe_load`` of ``text``; a syntax error is one :class:`ConfigError` line naming the
    file (``where``), the line and column and what YAML found there."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        raise ConfigError(
            f"{where}{at}: not valid YAML ({problem}{f', {context}' if context else ''})"
        ) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate ``params.yaml``; raises :class:`ConfigError` on the first bad value."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    raw = parse_yaml(path.read_text(), path) or {}
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
    if resolved == source and not Path(source).is_dir() and not HUB_ID.match(source):
        _fail(
            f"backbone_overrides.{name}",
            "source",
            source,
            "all-MiniLM-L6-v2, an existing model folder, or a hub id like org/name",
        )
