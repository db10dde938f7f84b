"""``dvc.yaml`` and :mod:`focalcse.layout` name the same paths, and every code dependency exists.

The stages' outputs, metrics, plots and data/model dependencies are rendered for one example matrix
item and compared, as sets, with what :class:`focalcse.layout.Layout` says; the ``src/`` and
``stages/`` dependencies must exist; ``train`` depends on its own loss module only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from focalcse.core.losses import loss_names, loss_spec
from focalcse.layout import Layout, companion_file

ROOT = Path(__file__).resolve().parents[1]
L = Layout()  # relative to the repository root, as dvc.yaml writes its paths

BACKBONE, LOSS, SEED, TAU, M = "all-MiniLM-L6-v2", "focal_infonce", 3, "0.05", "0.3"
ITEM = {"backbone": BACKBONE, "loss": LOSS, "seed": SEED, "temperature": TAU, "m": M, "framework": "diffcse"}
LOSSES_DIR = "src/focalcse/core/losses"
CODE = ("src/", "stages/")


@pytest.fixture(scope="module")
def dvc() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


def render(text: str, item: dict | None = None, extra: dict | None = None) -> str:
    """``text`` with ``${item.key}`` (and ``${name}`` from ``extra``) substituted; an unknown
    placeholder fails the test, so nothing is compared half-rendered."""
    values = {
        **{f"item.{k}": v for k, v in (item or ITEM).items()},
        "sweep.seeds[0]": FIRST_SEED,
        **(extra or {}),
    }

    def sub(match: re.Match) -> str:
        key = match.group(1)
        assert key in values, f"dvc.yaml placeholder ${{{key}}} in {text!r} has no example value"
        return str(values[key])

    return re.sub(r"\$\{([^}]+)\}", sub, text)


def paths(entries) -> list[str]:
    """The paths of a ``deps``/``outs``/``metrics``/``plots`` list (strings or ``{path: options}``)."""
    out = []
    for entry in entries or []:
        if isinstance(entry, dict):
            assert len(entry) == 1, entry
            out.append(next(iter(entry)))
        else:
            out.append(entry)
    return out


def outputs(stage: dict, item: dict | None = None) -> set[str]:
    return {render(p, item) for key in ("outs", "metrics", "plots") for p in paths(stage.get(key))}


def data_deps(stage: dict, item: dict | None = None) -> set[str]:
    return {render(p, item) for p in paths(stage.get("deps")) if not p.startswith(CODE)}


def s(*items: Path) -> set[str]:
    return {str(p) for p in items}


RUN = (BACKBONE, LOSS, SEED)
FIRST_SEED = 1  # ${sweep.seeds[0]} in the example (hard_negatives reads the first seed's models)


ABLATION_DATA = s(L.corpus_file, L.sts_dir)
DATA_DEPS = {  # stage -> the data and model deps besides the check file
    "sample": s(L.corpus_sources_file),  # the corpus's fingerprint, not its path
    "prepare_sts": s(L.sts_sources_file),
    "train": s(L.corpus_file, L.sts_dir),
    "evaluate": s(L.model_dir(*RUN), L.sts_dir),
    "pretrain_generator": s(L.corpus_file),
    "train_framework": s(L.corpus_file, L.sts_dir, L.generator_dir("diffcse", BACKBONE)),
    "evaluate_framework": s(L.model_dir(*RUN, "diffcse"), L.sts_dir),
    "significance": s(L.eval_dir),
    "ablate_tau": ABLATION_DATA,
    "ablate_m": ABLATION_DATA,
    "hard_negatives": s(L.sts_dir, L.model_dir(BACKBONE, LOSS, FIRST_SEED)),
    "report": s(
        L.summary_file,
        L.significance_file,
        companion_file(L.significance_file, "meta"),
        L.eval_dir,
        L.train_metrics_dir,
        L.curves_dir,
        L.ablation_dir,
        L.hard_negatives_dir,
    ),
}
# the example item each stage's dvc.yaml entry is rendered with (tiny: the matrix's first values)
ITEM_OF = {
    "train_framework": (*RUN, "diffcse"),
    "evaluate_framework": (*RUN, "diffcse"),
    "pretrain_generator": (BACKBONE, "", 0, "diffcse"),
    "hard_negatives": (BACKBONE, LOSS),
}


def layout_outputs(stage: str) -> set[str]:
    """The stage's outputs by the layout's one table (:meth:`Layout.stage_outputs`)."""
    if stage.startswith("ablate_"):
        return s(*L.stage_outputs(stage, value=TAU if stage == "ablate_tau" else M))
    return s(*L.stage_outputs(stage, *ITEM_OF.get(stage, RUN)))


# every stage but `check` depends on the check stage's output (checked before DVC deletes outputs)
EXPECTED = {"check": (layout_outputs("check"), set())} | {
    name: (layout_outputs(name), deps | s(L.check_file)) for name, deps in DATA_DEPS.items()
}


def test_the_output_table_and_dvc_yaml_name_the_same_stages(dvc) -> None:
    """Both ways: every dvc.yaml stage has a row in the layout's table and every row is a stage."""
    for name in dvc["stages"]:
        L.stage_outputs(name)  # raises for a stage the table lacks
    assert set(EXPECTED) == set(dvc["stages"])
    with pytest.raises(ValueError, match="stage 'nope'"):
        L.stage_outputs("nope")


def test_the_output_table_is_what_check_expects() -> None:
    from focalcse.config import load_params
    from focalcse.steps.check import expected_outputs

    params = load_params(ROOT / "params.yaml")
    found = expected_outputs(params, L)
    sw = params.sweep
    assert L.model_dir(sw.backbones[0], sw.losses[0], sw.seeds[0]) in found
    assert companion_file(L.eval_metrics(sw.backbones[0], sw.losses[0], sw.seeds[0]), "subsets") in found
    n_items = len(params.framework_items())
    assert len(found) == n_items * (5 + 3) + len(sw.backbones) * len(sw.losses) * 2


def test_every_stage_is_declared(dvc) -> None:
    assert set(EXPECTED) <= set(dvc["stages"]), f"missing stage(s): {set(EXPECTED) - set(dvc['stages'])}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stage_outputs_match_layout(dvc, name: str) -> None:
    expected, _ = EXPECTED[name]
    assert outputs(dvc["stages"][name]) == expected


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stage_data_deps_match_layout(dvc, name: str) -> None:
    _, expected = EXPECTED[name]
    assert data_deps(dvc["stages"][name]) == expected


def test_render_refuses_an_unknown_placeholder() -> None:
    assert render("models/${item.backbone}/x") == f"models/{BACKBONE}/x"
    with pytest.raises(AssertionError, match="item.nope"):
        render("models/${item.nope}")


def test_layout_names_a_run_like_dvc_yaml() -> None:
    # dvc.yaml writes ${item.backbone}-${item.loss}-seed${item.seed}; an org/name backbone is made a
    # single path component by the layout (safe_name), which dvc.yaml cannot do: sweep names are plain
    assert str(L.train_metrics(*RUN)) == f"metrics/train/{BACKBONE}-{LOSS}-seed{SEED}.json"
    assert L.model_dir("org/name", "infonce", 1) == Path("models/org__name/infonce/seed1")
    with pytest.raises(ValueError, match="ablation kind"):
        L.ablation_metrics("lr", "0.1")


def test_top_level_plots_are_the_report_figures(dvc) -> None:
    assert paths(dvc.get("plots")) == [str(L.figures_dir)]


def _builtin_losses() -> list[str]:
    here = (ROOT / LOSSES_DIR).resolve()
    return [n for n in loss_names() if Path(loss_spec(n).source).resolve().parent == here]


def test_code_deps_exist(dvc, params) -> None:
    losses = _builtin_losses()
    assert {"infonce", "focal_infonce"} <= set(losses)
    ablation = {"ablation.loss": params["ablation"]["loss"]}
    missing = []
    for name, stage in dvc["stages"].items():
        for dep in paths(stage.get("deps")):
            if not dep.startswith(CODE):
                continue
            for loss in losses:
                path = render(dep, {**ITEM, "loss": loss}, ablation)
                if not (ROOT / path).exists():
                    missing.append(f"{name}: {path}")
    assert not missing, "dvc.yaml depends on missing file(s):\n" + "\n".join(missing)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_command_script_exists_and_is_a_dependency(dvc, name: str) -> None:
    stage = dvc["stages"][name]
    script = re.match(r"python (stages/\w+\.py)(\s|$)", stage["cmd"])
    assert script, f"{name}: cmd {stage['cmd']!r} does not run a stages/<x>.py script"
    assert (ROOT / script.group(1)).is_file(), f"{name}: {script.group(1)} does not exist"
    assert script.group(1) in paths(stage.get("deps")), f"{name}: {script.group(1)} is not in its deps"


def _loss_deps(stage: dict) -> list[str]:
    """The deps that are (or contain) loss modules; base.py and the registry (__init__.py, which
    finds loss modules by scanning the folder, so adding one leaves it unchanged) aside."""
    shared = (f"{LOSSES_DIR}/base.py", f"{LOSSES_DIR}/__init__.py")
    return [
        d
        for d in paths(stage.get("deps"))
        if d.rstrip("/") in ("src", "src/focalcse", "src/focalcse/core", LOSSES_DIR)
        or (d.startswith(LOSSES_DIR + "/") and d not in shared)
    ]


def test_train_depends_on_its_own_loss_only(dvc) -> None:
    stage = dvc["stages"]["train"]
    assert _loss_deps(stage) == [f"{LOSSES_DIR}/${{item.loss}}.py"], (
        "train must depend on src/focalcse/core/losses/${item.loss}.py and no other loss module "
        "(adding a loss must retrain nothing)"
    )
    assert f"{LOSSES_DIR}/base.py" in paths(stage["deps"])


@pytest.mark.parametrize("name", ["ablate_tau", "ablate_m"])
def test_ablation_depends_on_the_ablated_loss_only(dvc, name: str) -> None:
    assert _loss_deps(dvc["stages"][name]) == [f"{LOSSES_DIR}/${{ablation.loss}}.py"]


def test_loss_dep_check_can_fail() -> None:
    folder = {"deps": ["src/focalcse/core"]}
    other = {"deps": [f"{LOSSES_DIR}/base.py", f"{LOSSES_DIR}/${{item.loss}}.py", f"{LOSSES_DIR}/infonce.py"]}
    assert _loss_deps(folder) == ["src/focalcse/core"]
    assert _loss_deps(other) == [f"{LOSSES_DIR}/${{item.loss}}.py", f"{LOSSES_DIR}/infonce.py"]
