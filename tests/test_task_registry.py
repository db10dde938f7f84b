"""The STS-task recipe (docs/extending.md): a task added to the registry is evaluated, and its data
asked for, only where ``eval.tasks`` lists it; every ``avg`` stays the mean over the paper's 7 tasks,
and the report's label says what an average covers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from focalcse.config import EvalConfig, Params
from focalcse.data.sts import STSB_COUNTS, StsDataError, read_stsb
from focalcse.data.tasks import PAPER_TASKS, TASKS, Task, average_tasks, prepared_keys
from focalcse.eval.sts_eval import evaluate_sts
from focalcse.layout import Layout
from focalcse.report.labels import column_label

NEW = "MyTask"


def _absent(root, check=True):
    raise StsDataError(f"{root}: no {NEW} files")


@pytest.fixture
def new_task(monkeypatch):
    """A registered task beyond the paper's 7 (STS-B dev read as a task of its own)."""
    task = Task(
        NEW, "My task", {"dev": STSB_COUNTS["dev"]}, lambda root, check=True: read_stsb(root, "dev", check)
    )
    monkeypatch.setitem(TASKS, NEW, task)
    return task


def test_paper_tasks_are_the_default_and_the_average(new_task) -> None:
    assert len(PAPER_TASKS) == 7 and NEW in TASKS
    assert EvalConfig().tasks == PAPER_TASKS  # registering a task does not evaluate it
    assert NEW not in prepared_keys(PAPER_TASKS) and NEW in prepared_keys([*PAPER_TASKS, NEW])
    assert prepared_keys([NEW, "STS12"])[:2] == ["STS12", NEW]  # registry order, whatever the list's
    assert average_tasks([*PAPER_TASKS, NEW]) == list(PAPER_TASKS)
    assert average_tasks([NEW]) == [NEW]  # nothing of the paper's: the average of what there is


def test_an_added_task_is_a_column_but_not_in_the_average(
    new_task, tiny_encoder_factory, tiny_sts_dir
) -> None:
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    r = evaluate_sts(enc, str(tiny_sts_dir), tasks=[*PAPER_TASKS, NEW], check_counts=False, progress=False)
    assert NEW in r and NEW in r["wmean"]
    seven = float(np.mean([r[t] for t in PAPER_TASKS]))  # independent: numpy over the 7 scores
    eight = float(np.mean([r[t] for t in (*PAPER_TASKS, NEW)]))
    assert r["avg"] == pytest.approx(seven, abs=1e-12) and abs(seven - eight) > 1e-9
    assert r["wmean"]["avg"] == pytest.approx(float(np.mean([r["wmean"][t] for t in PAPER_TASKS])), abs=1e-12)


def test_the_average_label_says_what_it_averages(new_task) -> None:
    assert column_label("avg", PAPER_TASKS) == "Avg."
    assert column_label("avg", [*PAPER_TASKS, NEW]) == "Avg."  # the added task is not in it
    assert column_label("avg", ["STS12", "STSBenchmark"]) == "Avg. (2 of the paper's 7)"
    assert column_label("avg", [NEW]) == "Avg. (1 task, none of the paper's)"
    assert column_label(NEW) == "My task"


def test_an_unlisted_task_asks_for_no_data(monkeypatch, data_mirror: Path, tmp_path: Path) -> None:
    """A registered task whose files the mirror lacks: check and prepare_sts pass while no
    ``eval.tasks`` lists it, and stop with its reader's error once one does."""
    from focalcse.steps import check, prepare_sts

    monkeypatch.setitem(TASKS, NEW, Task(NEW, "My task", {"test": 10}, _absent))
    monkeypatch.delenv("FOCALCSE_DATA_MIRROR", raising=False)
    layout = Layout.at(tmp_path)
    base = Params(data=Params().data.__class__(mirror=str(data_mirror)))
    manifest = prepare_sts.run(base, layout)
    assert NEW not in str(manifest) and (layout.sts_dir).is_dir()
    listed = Params(data=base.data, eval=EvalConfig(tasks=(*PAPER_TASKS, NEW)))
    with pytest.raises(StsDataError, match=f"no {NEW} files"):
        prepare_sts.run(listed, Layout.at(tmp_path / "other"))
    # the check stage reads the listed tasks only (its source record counts their pairs)
    check.run(base, layout)
    assert NEW not in layout.sts_sources_file.read_text()
    with pytest.raises(StsDataError, match=f"no {NEW} files"):
        check.run(listed, layout)
