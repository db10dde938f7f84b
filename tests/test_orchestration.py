"""The flows' planning and failure classification (pure functions; no DVC or Prefect run)."""

from __future__ import annotations

import pytest
import yaml

from focalcse.ops.orchestration import (
    DETERMINISTIC,
    EX_TEMPFAIL,
    TRANSIENT,
    ablation_experiments,
    classify_failure,
    exp_run_args,
    parse_dot,
    plan_stages,
    repo_matrix_items,
    select_param_set,
    topological_order,
)

DOT = """strict digraph {
"sample";
"prepare_sts";
"train@tiny-infonce-1";
"train@tiny-infonce-2";
"evaluate@tiny-infonce-1";
"evaluate@tiny-infonce-2";
"significance";
"ablate_tau@0.05";
"sample" -> "train@tiny-infonce-1";
"sample" -> "train@tiny-infonce-2";
"prepare_sts" -> "train@tiny-infonce-1";
"prepare_sts" -> "train@tiny-infonce-2";
"prepare_sts" -> "evaluate@tiny-infonce-1";
"train@tiny-infonce-1" -> "evaluate@tiny-infonce-1";
"train@tiny-infonce-2" -> "evaluate@tiny-infonce-2";
"evaluate@tiny-infonce-1" -> "significance";
"evaluate@tiny-infonce-2" -> "significance";
"sample" -> "ablate_tau@0.05";
}
"""


def test_parse_dot_gives_a_topological_order_and_edges() -> None:
    g = parse_dot(DOT)
    assert set(g.stages) == {
        "sample",
        "prepare_sts",
        "train@tiny-infonce-1",
        "train@tiny-infonce-2",
        "evaluate@tiny-infonce-1",
        "evaluate@tiny-infonce-2",
        "significance",
        "ablate_tau@0.05",
    }
    pos = {s: i for i, s in enumerate(g.stages)}
    for stage, ups in g.upstream.items():
        assert all(pos[u] < pos[stage] for u in ups)
    assert g.upstream["evaluate@tiny-infonce-1"] == {"prepare_sts", "train@tiny-infonce-1"}
    assert g.ancestors("significance") >= {"sample", "prepare_sts", "train@tiny-infonce-2"}
    assert g.stages[:2] == ["sample", "prepare_sts"]  # DVC's listing order among ready stages


def test_topological_order_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        topological_order(["a", "b"], {"a": {"b"}, "b": {"a"}})


def test_matrix_items_are_the_stage_tables_named_as_dvc_names_them(tmp_path) -> None:
    sweep = {"backbones": ["all-MiniLM-L6-v2", "tiny"], "losses": ["infonce"], "seeds": [1, 2]}
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump({"sweep": sweep, "ablation": {"loss": "infonce", "temperatures": [0.1], "ms": []}})
    )
    items = repo_matrix_items(tmp_path)
    # no sweep.frameworks: the default framework's items
    assert items["train@simcse-all-MiniLM-L6-v2-infonce-2"] == {
        "framework": "simcse",
        "backbone": "all-MiniLM-L6-v2",
        "loss": "infonce",
        "seed": 2,
    }
    assert items["ablate_tau@0.1"] == {"temperature": 0.1}
    assert not any(k.startswith("ablate_m@") for k in items) and "check" not in items  # not a matrix stage
    assert len([k for k in items if k.startswith("train@")]) == 4
    assert items["hard_negatives@tiny-infonce"] == {"backbone": "tiny", "loss": "infonce"}


def test_plan_filters_items_and_leaves_out_what_depends_on_them() -> None:
    g = parse_dot(DOT)
    items = {
        "train@tiny-infonce-1": {"backbone": "tiny", "loss": "infonce", "seed": 1},
        "train@tiny-infonce-2": {"backbone": "tiny", "loss": "infonce", "seed": 2},
        "evaluate@tiny-infonce-1": {"backbone": "tiny", "loss": "infonce", "seed": 1},
        "evaluate@tiny-infonce-2": {"backbone": "tiny", "loss": "infonce", "seed": 2},
    }
    plan = plan_stages(g, items, seeds=[1])
    assert "train@tiny-infonce-2" not in plan.stages and "evaluate@tiny-infonce-2" not in plan.stages
    assert "significance" not in plan.stages and "depends on left-out" in plan.skipped["significance"]
    assert "evaluate@tiny-infonce-1" in plan.stages and "ablate_tau@0.05" in plan.stages
    assert plan.upstream["evaluate@tiny-infonce-1"] == {"prepare_sts", "train@tiny-infonce-1"}


def test_plan_selects_stages_with_their_ancestors() -> None:
    g = parse_dot(DOT)
    plan = plan_stages(g, stages=["ablate_tau"])
    assert plan.stages == ["sample", "ablate_tau@0.05"]
    plan = plan_stages(g, stages=["evaluate"], with_ancestors=False)
    assert plan.stages == ["evaluate@tiny-infonce-1", "evaluate@tiny-infonce-2"]
    assert plan.upstream["evaluate@tiny-infonce-1"] == set()
    with pytest.raises(ValueError, match="no DVC stage named"):
        plan_stages(g, stages=["ablate_lr"])


@pytest.mark.parametrize(
    ("code", "output", "kind"),
    [
        (
            255,
            f"ERROR: failed to reproduce 'train@x': failed to run: python stages/train.py, exited with {EX_TEMPFAIL}",
            TRANSIENT,
        ),
        (255, "ERROR: failed to reproduce 'train@x': failed to run: python s.py, exited with -9", TRANSIENT),
        (137, "", TRANSIENT),
        (255, "ERROR: Unable to acquire lock. Most likely another DVC process is running", TRANSIENT),
        (
            255,
            "ERROR: failed to reproduce 'sample': 'data/s.txt' is busy, it is being blocked by:\n"
            "  (PID 8424): dvc repro train@1",
            TRANSIENT,
        ),
        (1, "requests.exceptions.ConnectionError: ... Connection refused", TRANSIENT),
        (1, "sqlite3.OperationalError: database is locked", TRANSIENT),
        (
            255,
            "error: params train.lr = -1: expected a number > 0\nERROR: failed ... exited with 1",
            DETERMINISTIC,
        ),
        (
            255,
            "Traceback (most recent call last):\nValueError: train.max_steps=9 but ...\nexited with 1",
            DETERMINISTIC,
        ),
        (
            255,
            "ConnectionError: retrying\nTraceback:\nfocalcse.core.training.NonFiniteLossError: loss is nan\nexited with 1",
            DETERMINISTIC,
        ),
        (2, "ERROR: unrecognized arguments: --bogus", DETERMINISTIC),
        (1, "something unexpected", DETERMINISTIC),
    ],
)
def test_classify_failure(code: int, output: str, kind: str) -> None:
    assert classify_failure(code, output) == kind


def test_experiment_arguments() -> None:
    exps = ablation_experiments([0.05, 0.1], [0.3])
    assert exps == [
        ("tau-0.05", {"train.temperature": 0.05}),
        ("tau-0.1", {"train.temperature": 0.1}),
        ("m-0.3", {"train.m": 0.3}),
    ]
    assert exp_run_args({"train.temperature": 0.05, "train.mlp_only_train": True}, "tau-0.05") == [
        "exp",
        "run",
        "--queue",
        "--name",
        "tau-0.05",
        "-S",
        "train.temperature=0.05",
        "-S",
        "train.mlp_only_train=true",
    ]


def test_select_param_set(tmp_path) -> None:
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "params").mkdir()
    (tmp_path / "params.yaml").write_text((repo / "params.yaml").read_text())
    (tmp_path / "params" / "paper.yaml").write_text((repo / "params" / "paper.yaml").read_text())
    current, here = select_param_set(tmp_path, None)
    assert here == tmp_path and select_param_set(tmp_path, current) == (current, tmp_path)
    assert (tmp_path / "params.yaml").read_text() == (repo / "params.yaml").read_text()
    with pytest.raises(ValueError, match="available"):
        select_param_set(tmp_path, "nope")
    assert select_param_set(tmp_path, "paper") == ("paper", tmp_path / "sets" / "paper")
    from focalcse.config import load_params
    from focalcse.paramsets import load_set

    # the composed set and its dvc.yaml, in the set's own folder; the default's params.yaml untouched
    assert load_params(tmp_path / "sets/paper/params.yaml").raw == load_set(repo, "paper").raw
    assert (tmp_path / "sets/paper/dvc.yaml").is_file()
    assert (tmp_path / "params.yaml").read_text() == (repo / "params.yaml").read_text()


def test_queue_status_is_parsed_per_experiment() -> None:
    from focalcse.ops.orchestration import parse_queue_status

    text = (
        "Task     Name                  Created    Status\n"
        "c11975a  tau-0.07-1129-142226  02:22 PM   Failed\n"
        "fedae0e  m-0.4-1129-142226     02:22 PM   Success\n"
        "\nWorker status: 0 active, 0 idle\n"
    )
    assert parse_queue_status(text) == {"tau-0.07-1129-142226": "Failed", "m-0.4-1129-142226": "Success"}
    assert parse_queue_status("") == {}


def test_graph_knows_matrix_stages_by_their_base_name() -> None:
    g = parse_dot(DOT)
    assert g.has("train") and g.has("train@tiny-infonce-1") and g.has("significance")
    assert not g.has("ablate_m") and not g.has("tiny")


def test_progress_bar_refreshes_are_recognised() -> None:
    from focalcse.ops.orchestration import is_progress_line

    assert is_progress_line("train infonce seed 1:  17%|█▋        | 1/6 [00:00<00:00, 24.54it/s, loss=3.76]")
    assert is_progress_line("tokenise: 100%|██████████| 192/192 [00:00<00:00, 5369.21 examples/s]")
    assert is_progress_line("Loading weights:   0%|          | 0/39 [00:00<?, ?it/s]")
    assert not is_progress_line("error: loss is nan at step 2 (loss=infonce, lr=1e+30)")
    assert not is_progress_line("ValueError: 50%|x| of the batch is empty")


def test_the_flows_validate_the_kept_params_before_dvc_reads_them(tmp_path) -> None:
    """A flow keeping params.yaml as it is still validates it before ``dvc dag``: a backbone named like
    a path gets the check stage's line, not DVC's overlapping-output advice."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(
        text.replace("backbones: [all-MiniLM-L6-v2]", "backbones: [../../etc/evil]")
    )
    with pytest.raises(
        ValueError, match=r"^params sweep.backbones = '../../etc/evil': expected names of letters"
    ):
        select_param_set(tmp_path, None)
