"""Every path of the stage table (and so of ``dvc.yaml``, its rendering) is :class:`focalcse.layout.Layout`'s.

The table is expanded for the paper's parameter set (every stage has items there) and checked: every
output and data dep comes from a layout (a layout at another root moves all of them), each item's
outputs are the layout's output table (:meth:`Layout.stage_outputs`) both ways, the train items'
outputs are what the train step writes, and every data dep is another item's output, so the graph
DVC builds from the paths is connected as the stages read and write.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from focalcse.config import load_params
from focalcse.layout import ABLATION_KINDS, Layout, companion_file
from focalcse.paramsets import load_set
from focalcse.stage_table import STAGES, expand, stage_template

ROOT = Path(__file__).resolve().parents[1]
L = Layout()  # relative to the repository root, as dvc.yaml writes its paths
PAPER = load_set(ROOT, "paper")
ITEMS = expand(PAPER)


def _stage_outputs(layout: Layout, stage: str, values: dict) -> set[Path]:
    """:meth:`Layout.stage_outputs` of one item, its matrix values passed by name."""
    kind = stage.removeprefix("ablate_")
    value = values.get(ABLATION_KINDS.get(kind, ""), "")
    named = {k: values[k] for k in ("backbone", "loss", "seed", "framework") if k in values}
    return layout.stage_outputs(stage, **named, value=str(value))


def test_every_stage_has_items_in_the_paper_set() -> None:
    assert {it.stage for it in ITEMS} == {st.name for st in STAGES}


def test_every_path_comes_from_the_layout() -> None:
    """At another root every output and data dep moves with it: none is spelled out in the table."""
    moved = Layout.at("/elsewhere")
    for it in expand(PAPER, moved):
        for e in (*it.deps, *it.outs, *it.plots, *it.metrics):
            assert e.path.startswith("/elsewhere/"), f"{it.name}: {e.path} is not a Layout path"
    for name in (st.name for st in STAGES):  # the templates too
        t = stage_template(name, moved)
        assert all(e.path.startswith("/elsewhere/") for e in (*t.deps, *t.outs, *t.plots, *t.metrics)), name


@pytest.mark.parametrize("name", [st.name for st in STAGES])
def test_each_items_outputs_are_the_layouts_output_table(name: str) -> None:
    items = [it for it in ITEMS if it.stage == name]
    assert items
    for it in items:
        assert it.outputs == _stage_outputs(L, name, it.values), it.name
    with pytest.raises(ValueError, match="stage 'nope'"):
        L.stage_outputs("nope")


def test_train_items_declare_what_the_train_step_writes() -> None:
    for it in (it for it in ITEMS if it.stage == "train"):
        v = it.values
        item = L.train_item(v["backbone"], v["loss"], v["seed"], v["framework"])
        assert it.outputs == {item.model_dir, *item.json_outputs}, it.name
        assert str(item.prepared_dir) in [e.path for e in it.deps]  # its own framework's generator item


def test_every_data_dep_is_another_items_output() -> None:
    """Each data dep is an item's output, a folder holding items' outputs (``metrics/eval``) or a file
    inside an item's output folder (a train item's STS-B dev split in ``data/sts``), and every stage
    but ``check`` depends on the check file first."""
    outputs = {(it.name, p) for it in ITEMS for p in it.outputs}
    for it in ITEMS:
        if it.stage != "check":
            assert it.deps[0].path == str(L.check_file), it.name
        for dep in (Path(e.path) for e in it.deps):
            makers = {n for n, p in outputs if p == dep or dep in p.parents or p in dep.parents}
            assert makers - {it.name}, f"{it.name}: no item writes its dep {dep}"


def test_hard_negatives_read_the_first_seeds_model_only() -> None:
    first = PAPER.sweep.seeds[0]
    for it in (it for it in ITEMS if it.stage == "hard_negatives"):
        models = [e.path for e in it.deps if e.path.startswith("models/")]
        ref = PAPER.sweep.reference
        assert models == [str(L.model_dir(it.values["backbone"], it.values["loss"], first, ref))]


def test_the_output_table_is_what_check_expects() -> None:
    from focalcse.steps.check import expected_outputs

    params = load_params(ROOT / "params.yaml")
    found = expected_outputs(params, L)
    sw = params.sweep
    first = (sw.backbones[0], sw.losses[0], sw.seeds[0], sw.reference)
    assert L.model_dir(*first) in found
    assert companion_file(L.eval_metrics(*first), "subsets") in found
    n_items = len(params.framework_items())
    n_ablation = len(params.ablation.temperatures) + len(params.ablation.ms)
    assert len(found) == n_items * (5 + 3) + len(sw.backbones) * len(sw.losses) * 2 + n_ablation * 2


def test_layout_names_a_run_like_dvc_yaml() -> None:
    # dvc.yaml writes ${item.framework}-${item.backbone}-${item.loss}-seed${item.seed}; an org/name
    # backbone is made a single path component by the layout (safe_name), which dvc.yaml cannot do:
    # sweep names are plain
    run = ("all-MiniLM-L6-v2", "focal_infonce", 3, "simcse")
    assert str(L.train_metrics(*run)) == "metrics/train/simcse-all-MiniLM-L6-v2-focal_infonce-seed3.json"
    assert L.model_dir("org/name", "infonce", 1, "diffcse") == Path("models/diffcse/org__name/infonce/seed1")
    with pytest.raises(ValueError, match="ablation kind"):
        L.ablation_metrics("lr", "0.1")


@pytest.mark.parametrize("name", [st.name for st in STAGES])
def test_command_script_exists(name: str) -> None:
    script = stage_template(name).cmd.split()[1]
    assert stage_template(name).cmd.startswith("python stages/") and (ROOT / script).is_file(), script


def test_train_items_read_only_the_dev_split_of_the_sts_data() -> None:
    """A train item's dev check reads the manifest and STS-B dev, so an edit to a test split reruns
    evaluation, not training; the items that score the test splits depend on the whole folder."""
    for it in ITEMS:
        sts = {e.path for e in it.deps if e.path.startswith(str(L.sts_dir))}
        if it.stage == "train":
            assert sts == {str(L.sts_manifest), str(L.sts_split("STSBenchmark-dev"))}, it.name
        elif it.stage == "evaluate":
            assert sts == {str(L.sts_dir)}, it.name
