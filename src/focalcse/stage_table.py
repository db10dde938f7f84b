"""The stage graph as one table: every DVC stage, and every item of a parameter set.

Each :class:`Stage` holds what ``dvc.yaml`` says of one stage: its command, its matrix axes (the
params keys they range over), its params, its data deps and its outputs (paths from
:class:`~focalcse.layout.Layout`), its flags and the comments that explain it. The paths are built by
one function per stage from the item's values, so the same function gives the DVC template (the
values are ``${item.backbone}``-style placeholders: :func:`stage_template`) and the paths of each item
of a loaded :class:`~focalcse.config.Params` (:func:`expand`). ``dvc.yaml`` is rendered from this
table (:mod:`focalcse.ops.dvc_yaml`, ``make dvc-yaml``), the orchestration names its matrix items
with :func:`expand`, and the check stage prunes what no expanded item writes.

Code deps are not listed here: they are the import closure of each stage's script, computed when
``dvc.yaml`` is rendered. The table says only which modules an item picks by name (:attr:`Stage.own_loss`,
:attr:`Stage.own_framework`): those are deps of that item alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.layout import ABLATION_KINDS, ABLATION_TASK, DEV_SPLIT, Layout, companion_file

Values = Mapping[str, Any]  # an item's values: the matrix axes plus FIRST_SEED


@dataclass(frozen=True)
class Entry:
    """One line of a ``deps`` / ``params`` / ``outs`` / ``plots`` / ``metrics`` list.

    ``options``: the output's DVC flags (``cache: false``, ``persist: true``, a plot's ``x`` / ``y``);
    ``comment``: after the line; ``above``: comment lines before it."""

    path: str
    options: tuple[tuple[str, Any], ...] = ()
    comment: str = ""
    above: tuple[str, ...] = ()


def plain(
    path: Path | str, *options: tuple[str, Any], comment: str = "", above: tuple[str, ...] = ()
) -> Entry:
    """An output kept in git, not in DVC's cache (``cache: false``)."""
    return Entry(str(path), (("cache", False), *options), comment, above)


def line(path: Path | str, comment: str = "", above: tuple[str, ...] = ()) -> Entry:
    return Entry(str(path), comment=comment, above=above)


# Values every item sees besides its axes: the first sweep seed (hard_negatives reads that model) and
# the reference framework, the sweep's first (the ablations train it, hard_negatives reads its model).
FIRST_SEED = "first_seed"
REFERENCE = "reference"
PLACEHOLDERS = {FIRST_SEED: "${sweep.seeds[0]}", REFERENCE: "${sweep.frameworks[0]}"}
# The template naming an item's own framework: its axis, or the reference for a stage without one.
ITEM_FRAMEWORK = "${item.framework}"
REFERENCE_FRAMEWORK = PLACEHOLDERS[REFERENCE]


@dataclass(frozen=True)
class Stage:
    """One DVC stage. ``cmd``, ``params`` and the entry functions see the item's values: in
    :func:`stage_template` the DVC placeholders (``${item.<axis>}``), in :func:`expand` an item's own."""

    name: str
    cmd: Callable[[Values], str]
    outs: Callable[[Layout, Values], list[Entry]]
    deps: Callable[[Layout, Values], list[Entry]] = lambda L, v: []  # data deps besides the check file
    params: Callable[[Values], list[Entry]] = lambda v: []
    matrix: tuple[tuple[str, str, str], ...] = ()  # (axis, params key, comment)
    plots: Callable[[Layout, Values], list[Entry]] = lambda L, v: []
    metrics: Callable[[Layout, Values], list[Entry]] = lambda L, v: []
    always_changed: bool = False
    # comments: above the stage, above a key (``always_changed``, ``metrics``), after a key (``outs``)
    above: tuple[str, ...] = ()
    key_above: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    key_comment: Mapping[str, str] = field(default_factory=dict)
    # code deps an item picks by name (imported by computed name, so no closure reaches them):
    own_loss: str = ""  # the value naming its loss module: "${item.loss}" / "${ablation.loss}"
    own_framework: str = ""  # the value naming its framework's modules: ITEM_FRAMEWORK / REFERENCE_FRAMEWORK
    observer_outputs: frozenset[str] = frozenset()  # observers whose words are this stage's output
    code_folders: tuple[str, ...] = ()  # packages depended on whole (their modules and data files)
    named_folders: tuple[str, ...] = ()  # packages whose modules it reads by name: depended on whole

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(axis for axis, _, _ in self.matrix)

    @property
    def script(self) -> str:
        """The ``stages/<x>.py`` file the command runs."""
        return self.cmd(_placeholders(self)).split()[1]


def _placeholders(stage: Stage) -> dict[str, Any]:
    return {**{axis: f"${{item.{axis}}}" for axis in stage.axes}, **PLACEHOLDERS}


# ---------------------------------------------------------------- the table
CHECK_DEP = "the check stage passed (params and sources valid)"
PER_ITEM = ("per-item numbers and their provenance: plain outputs (DVC's metrics are metrics/summary.json)",)
TRAIN_PARAMS = ("train", "backbone_overrides", "loss_overrides", "eval.batch_size")
SWEEP_AXES = (
    ("framework", "sweep.frameworks", ""),
    ("backbone", "sweep.backbones", ""),
    ("loss", "sweep.losses", ""),
    ("seed", "sweep.seeds", ""),
)


def _run(v: Values) -> tuple[Any, ...]:
    """A train / evaluate item's Layout arguments."""
    return (v["backbone"], v["loss"], v["seed"], v["framework"])


def _train_outs(L: Layout, v: Values) -> list[Entry]:
    metrics = L.train_metrics(*_run(v))
    return [
        line(L.model_dir(*_run(v))),
        plain(metrics, above=PER_ITEM),
        plain(companion_file(metrics, "meta")),
    ]


def _train_plots(L: Layout, v: Values) -> list[Entry]:
    return [
        plain(L.loss_curve(*_run(v)), ("x", "step"), ("y", "loss")),
        plain(L.dev_curve(*_run(v)), ("x", "step"), ("y", "stsb_dev_spearman")),
    ]


def _train_deps(L: Layout, v: Values) -> list[Entry]:
    deps = [
        line(L.corpus_file),
        line(L.sts_manifest, "the prepared splits' counts (read before any split)"),
        line(
            L.sts_split(DEV_SPLIT), "the one split it reads: an edit to a test split reruns only evaluation"
        ),
    ]
    generator = L.generator_dir(v["framework"], v["backbone"])
    deps.append(line(generator, "its own framework's generator item"))
    return deps


def _train_params(v: Values) -> list[Entry]:
    return [*map(line, TRAIN_PARAMS), line(f"frameworks.{v['framework']}")]


def _eval_outs(L: Layout, v: Values) -> list[Entry]:
    metrics = L.eval_metrics(*_run(v))
    return [plain(metrics), *(plain(companion_file(metrics, k)) for k in ("subsets", "meta"))]


def _train(**extra: Any) -> Stage:
    return Stage(
        "train",
        cmd=lambda v: f"python stages/train.py {v['framework']} {v['backbone']} {v['loss']} {v['seed']}",
        matrix=SWEEP_AXES,
        deps=_train_deps,
        params=_train_params,
        outs=_train_outs,
        plots=_train_plots,
        own_loss="${item.loss}",
        own_framework=ITEM_FRAMEWORK,
        **extra,
    )


def _evaluate(**extra: Any) -> Stage:
    return Stage(
        "evaluate",
        cmd=lambda v: f"python stages/evaluate.py {v['framework']} {v['backbone']} {v['loss']} {v['seed']}",
        matrix=SWEEP_AXES,
        deps=lambda L, v: [line(L.model_dir(*_run(v))), line(L.sts_dir)],
        params=lambda v: [line("eval")],
        outs=_eval_outs,
        key_comment={
            "outs": "the 7 tasks, avg, wmean, alignment/uniformity; per-subset scores and provenance beside"
        },
        own_framework=ITEM_FRAMEWORK,
        **extra,
    )


ABLATION_PARAMS = (
    "ablation.loss",
    "ablation.backbone",
    "ablation.seed",
    "sweep.backbones",  # the reference framework (sweep.frameworks[0]) is in its code deps' paths, so
    *TRAIN_PARAMS,  # adding a framework to the sweep reruns no ablation item
    "eval.precision",
)


def _ablate(kind: str, above: tuple[str, ...] = ()) -> Stage:
    axis = ABLATION_KINDS[kind]
    key = "temperatures" if kind == "tau" else "ms"
    point = "tau" if kind == "tau" else "m"

    def outs(L: Layout, v: Values) -> list[Entry]:
        path = L.ablation_metrics(kind, dvc_str(v[axis]))
        return [plain(path), plain(companion_file(path, "meta"))]

    return Stage(
        f"ablate_{kind}",
        cmd=lambda v: f"python stages/ablate.py {kind} {v[axis]}",
        matrix=((axis, f"ablation.{key}", f"the default {point}'s point is the main sweep's run"),),
        deps=lambda L, v: [
            line(L.corpus_file),
            line(L.sts_manifest, "the prepared splits' counts (read before any split)"),
            line(L.sts_split(DEV_SPLIT), "checkpoint selection"),
            line(
                L.sts_split(ABLATION_TASK),
                "the one test split it scores: other tasks' edits rerun no ablation",
            ),
        ],
        params=lambda v: [*map(line, ABLATION_PARAMS), line(f"frameworks.{v[REFERENCE]}")],
        outs=outs,
        own_loss="${ablation.loss}",
        own_framework=REFERENCE_FRAMEWORK,
        above=above,
    )


STAGES: tuple[Stage, ...] = (
    Stage(
        "check",
        cmd=lambda v: "python stages/check.py",
        always_changed=True,
        params=lambda v: list(
            map(
                line,
                (
                    "data",
                    "train",
                    "backbone_overrides",
                    "loss_overrides",
                    "eval",
                    "significance",
                    "sweep",
                    "ablation",
                    "report",
                    "tracking",
                    "frameworks",
                ),
            )
        ),
        outs=lambda L, v: [
            plain(L.check_file, ("persist", True)),
            plain(
                L.corpus_sources_file,
                ("persist", True),
                comment="sha256 of the corpus read (the sample depends on it)",
            ),
            plain(
                L.sts_sources_file,
                ("persist", True),
                comment="sha256 of every SentEval file (prepare_sts depends on it)",
            ),
        ],
        above=(
            "First: every params section and the sources are checked before DVC removes any stage's outputs",
            "(it deletes them just before running a stage). data/checked.json is persisted (never deleted)",
            "and constant, so a passing check reruns nothing downstream.",
        ),
        key_above={
            "always_changed": (
                "runs on every `dvc repro`: the sources sit behind a setting DVC cannot see (FOCALCSE_DATA_MIRROR),",
                "so the stage fingerprints them by content (data/sources/*.json, rewritten only when they change)",
            )
        },
    ),
    Stage(
        "sample",
        cmd=lambda v: "python stages/sample.py",
        deps=lambda L, v: [line(L.corpus_sources_file, "the corpus's content, whichever mirror holds it")],
        params=lambda v: list(map(line, ("data.num_sentences", "data.seed", "data.mirror"))),
        outs=lambda L, v: [line(L.corpus_file)],
    ),
    Stage(
        "prepare_sts",
        cmd=lambda v: "python stages/prepare_sts.py",
        deps=lambda L, v: [
            line(L.sts_sources_file, "the SentEval files' content, whichever mirror holds them")
        ],
        params=lambda v: [
            line("data.mirror"),
            line(
                "eval.tasks", "the evaluated tasks' splits only: a registered task no set lists is not read"
            ),
        ],
        outs=lambda L, v: [line(L.sts_dir)],
    ),
    Stage(
        "pretrain_generator",
        cmd=lambda v: f"python stages/pretrain_generator.py {v['framework']} {v['backbone']}",
        matrix=SWEEP_AXES[:2],
        deps=lambda L, v: [line(L.corpus_file)],
        params=lambda v: [line(f"frameworks.{v['framework']}"), line("backbone_overrides")],
        outs=lambda L, v: [
            line(L.generator_dir(v["framework"], v["backbone"])),
            plain(
                L.generator_meta_file(v["framework"], v["backbone"]),
                comment="provenance and timings: nothing depends on them",
            ),
        ],
        own_framework=ITEM_FRAMEWORK,
        above=(
            "The MLM generator of each framework item (framework x backbone): trained here on the corpus for a",
            'framework whose SPEC needs one (DiffCSE) when its settings name none (frameworks.<f>.generator: "";',
            "no MLM can be downloaded offline); otherwise the item writes only generator.json saying why not.",
            "Its folder holds nothing that changes between reruns: commit and timings go to metrics/generators/.",
            "A framework's items depend on their own generator item only: no PromptBERT item waits for or",
            "reruns after DiffCSE's generator.",
        ),
    ),
    _train(
        above=(
            "One item per framework x backbone x loss x seed: every framework (sweep.frameworks, SimCSE's own",
            "step among them) runs the same script and step through the framework registry.",
        ),
    ),
    _evaluate(),
    Stage(
        "significance",
        cmd=lambda v: "python stages/significance.py",
        deps=lambda L, v: [line(L.eval_dir)],
        params=lambda v: list(map(line, ("significance", "sweep", "eval.tasks"))),
        outs=lambda L, v: [
            plain(L.significance_file),
            plain(companion_file(L.significance_file, "meta")),
            plain(companion_file(L.summary_file, "meta")),
        ],
        metrics=lambda L, v: [plain(L.summary_file)],
        key_above={
            "metrics": (
                "DVC's one metrics file: per backbone and loss mean avg / STS-B, std, raw and Holm p (`dvc",
                "metrics show`, `dvc exp show`); the per-item files above are plain outputs",
            )
        },
    ),
    _ablate(
        "tau",
        above=(
            "Tables 4 and 5: one run of ablation.loss per listed tau / m on ablation.backbone (default the first",
            "sweep backbone), as long as the main runs; the model is scored on STS-B test and deleted, only",
            "metrics are kept. The default point is the main sweep's ablation.seed run (the report reads it).",
        ),
    ),
    _ablate("m"),
    Stage(
        "hard_negatives",
        cmd=lambda v: f"python stages/hard_negatives.py {v['backbone']} {v['loss']}",
        matrix=SWEEP_AXES[1:3],
        deps=lambda L, v: [
            line(L.sts_dir),
            line(L.model_dir(v["backbone"], v["loss"], v[FIRST_SEED], v[REFERENCE])),
        ],
        params=lambda v: list(
            map(
                line,
                (
                    "report.hard_negatives",
                    "report.hard_negative_max_gold",
                    *TRAIN_PARAMS,
                    f"frameworks.{v[REFERENCE]}",
                    "eval.precision",
                ),
            )
        ),
        outs=lambda L, v: [
            plain(L.hard_negatives_file(v["backbone"], v["loss"])),
            plain(companion_file(L.hard_negatives_file(v["backbone"], v["loss"]), "meta")),
        ],
        own_framework=REFERENCE_FRAMEWORK,
        above=(
            "Paper §5.1: the hardest STS-B train negatives under the starting model, before / after training",
            "(the reference framework's first-seed model of each loss): one item per backbone x loss,",
            "depending on that model only.",
        ),
    ),
    Stage(
        "report",
        cmd=lambda v: "python stages/report.py",
        deps=lambda L, v: [
            line(
                L.summary_file,
                "logged to MLflow with the report",
                above=(
                    "the folders hold the current sweep's items only (the check stage removes the outputs of",
                    "items a params edit took out of the sweep)",
                ),
            ),
            line(L.significance_file),
            line(companion_file(L.significance_file, "meta")),
            *map(line, (L.eval_dir, L.train_metrics_dir, L.curves_dir, L.ablation_dir, L.hard_negatives_dir)),
        ],
        params=lambda v: list(
            map(
                line,
                (
                    "report",
                    "ablation",
                    "significance",
                    "sweep",
                    *TRAIN_PARAMS[:3],
                    "data.num_sentences",
                    "eval.tasks",
                    "eval.precision",
                    "tracking.experiment",
                    "frameworks",
                ),
            )
        ),
        outs=lambda L, v: [
            plain(
                L.reports_dir,
                ("persist", True),
                comment="kept while the stage runs: its provenance.json keeps the last full run's time",
            )
        ],
        observer_outputs=frozenset({"focalcse.provenance"}),  # the report prints each result's provenance
        code_folders=("src/focalcse/report",),  # its modules and published.yaml
        # the losses' SPECs (labels, colours, departures) and the frameworks' settings classes (notes,
        # official recipes): read or imported by name, so no import reaches them
        named_folders=("src/focalcse/core/losses", "src/focalcse/core/frameworks/settings"),
    ),
)
BY_NAME = {s.name: s for s in STAGES}
# The plots DVC shows besides the stages' own (dvc.yaml's top-level ``plots``), with their comment.
TOP_PLOTS = (
    line(
        Layout().figures_dir,
        above=(
            "`dvc plots show`: each run's loss / dev curve comes from the train stage's `plots:`; the report's",
            "figures add the runs overlaid per backbone, Figure 1, alignment-uniformity and the ablations.",
        ),
    ),
)


def stage(name: str) -> Stage:
    if name not in BY_NAME:
        raise ValueError(f"stage {name!r}: expected one of {', '.join(BY_NAME)}")
    return BY_NAME[name]


# ---------------------------------------------------------------- templates and items
@dataclass(frozen=True)
class Item:
    """One stage as DVC defines it for a parameter set: a plain stage or one matrix item."""

    stage: str
    name: str  # DVC's name: ``train@<backbone>-<loss>-<seed>``, ``check``
    values: dict[str, Any]  # the matrix axes' values ({} for a plain stage)
    cmd: str
    deps: tuple[Entry, ...]  # data deps, the check file first (code deps: focalcse.ops.dvc_yaml)
    params: tuple[Entry, ...]
    outs: tuple[Entry, ...]
    plots: tuple[Entry, ...]
    metrics: tuple[Entry, ...]

    @property
    def outputs(self) -> set[Path]:
        """Every path the item writes (outs, plots and metrics)."""
        return {Path(e.path) for e in (*self.outs, *self.plots, *self.metrics)}


def _item(st: Stage, layout: Layout, name: str, axes: dict[str, Any], values: Values) -> Item:
    check = [] if st.name == "check" else [line(layout.check_file, CHECK_DEP)]
    return Item(
        st.name,
        name,
        axes,
        st.cmd(values),
        (*check, *st.deps(layout, values)),
        tuple(st.params(values)),
        tuple(st.outs(layout, values)),
        tuple(st.plots(layout, values)),
        tuple(st.metrics(layout, values)),
    )


def stage_template(name: str, layout: Layout | None = None) -> Item:
    """The stage as ``dvc.yaml`` writes it: the values are DVC's placeholders (``${item.loss}``)."""
    st = stage(name)
    return _item(st, layout or Layout(), name, {}, _placeholders(st))


def dvc_str(value: Any) -> str:
    """A value as DVC writes it into a command, a path or an item name (``dvc.parsing.interpolate.to_str``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _param(params: Params, dotted: str) -> Any:
    return reduce(getattr, dotted.split("."), params)


def item_name(stage_name: str, values: Values) -> str:
    """DVC's name of a matrix item (``dvc.parsing.MatrixDefinition``): the values joined by ``-``."""
    return f"{stage_name}@{'-'.join(dvc_str(v) for v in values.values())}" if values else stage_name


def expand(params: Params, layout: Layout | None = None, stages: tuple[str, ...] | None = None) -> list[Item]:
    """Every stage and matrix item ``dvc.yaml`` defines for ``params``, in the table's order, with the
    paths ``layout`` gives (a backbone ``org/name`` is one path component there: ``org__name``)."""
    layout = layout or Layout()
    out = []
    for st in STAGES:
        if stages is not None and st.name not in stages:
            continue
        lists = [list(_param(params, key)) for _, key, _ in st.matrix]
        for combo in itertools.product(*lists):
            axes = dict(zip(st.axes, combo))
            values = {**axes, FIRST_SEED: params.sweep.seeds[0], REFERENCE: params.sweep.reference}
            out.append(_item(st, layout, item_name(st.name, axes), axes, values))
    return out


def matrix_items(params: Params) -> dict[str, dict[str, Any]]:
    """``{"train@tiny-infonce-1": {"backbone": "tiny", "loss": "infonce", "seed": 1}, ...}``: every
    matrix item's axis values."""
    return {it.name: it.values for it in expand(params) if it.values}
