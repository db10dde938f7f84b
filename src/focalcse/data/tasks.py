"""The task registry: every STS task the pipeline evaluates, with its reader, counts and label.

Each :class:`Task` says how to read its evaluation split from SentEval's ``downstream`` layout, how
many gold-scored pairs each subset must have (SentEval's counts; method.md), and how the report
labels it. Every task list in the project derives from :data:`TASKS`: the CLI's choices, MLflow's
metric names, the report's columns, the benchmarks and the tests' mirror. The ``eval.tasks`` default
and every average are the paper's 7 (:data:`PAPER_TASKS`). Adding a task is one entry here (plus its
reader in :mod:`focalcse.data.sts` if its layout is new); a parameter set evaluates it by listing it
in ``eval.tasks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from focalcse.data.sts import (
    SICK_COUNTS,
    STSB_COUNTS,
    StsSplit,
    is_prepared,
    read_prepared,
    read_sick,
    read_sts_year,
    read_stsb,
)

Reader = Callable[[str | os.PathLike, bool], StsSplit]  # (downstream folder, check_counts) -> split


@dataclass(frozen=True)
class Task:
    """One evaluation task.

    Attributes:
        name: the key in params (``eval.tasks``), metrics files and MLflow.
        display: the report's column label.
        subsets: expected gold-scored pairs per subset of the evaluation split.
        read: reads the evaluation split from a SentEval ``downstream`` folder.
        pooled: several subsets pooled into one Spearman ("all" setting); per-subset scores are kept.
    """

    name: str
    display: str
    subsets: Mapping[str, int]
    read: Reader
    pooled: bool = False

    @property
    def pairs(self) -> int:
        return sum(self.subsets.values())


def _year(name: str, subsets: dict[str, int]) -> Task:
    return Task(name, name, subsets, lambda root, check=True: read_sts_year(root, name, subsets, check), True)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        _year(
            "STS12",
            {"MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750, "surprise.SMTnews": 399},
        ),
        _year("STS13", {"FNWN": 189, "headlines": 750, "OnWN": 561}),
        _year(
            "STS14",
            {"deft-forum": 450, "deft-news": 300, "headlines": 750, "images": 750, "OnWN": 750, "tweet-news": 750},
        ),
        _year(
            "STS15",
            {"answers-forums": 375, "answers-students": 750, "belief": 375, "headlines": 750, "images": 750},
        ),
        _year(
            "STS16",
            {"answer-answer": 254, "headlines": 249, "plagiarism": 230, "postediting": 244, "question-question": 209},
        ),
        Task("STSBenchmark", "STS-B", {"test": STSB_COUNTS["test"]}, lambda root, check=True: read_stsb(root, "test", check)),
        Task("SICKRelatedness", "SICK-R", {"test": SICK_COUNTS["test"]}, lambda root, check=True: read_sick(root, "test", check)),
    )
}

# The paper's 7 STS tasks (SimCSE's "transfer" setting of STS12-16, STS-B, SICK-R): the ``eval.tasks``
# default, and the tasks of every "Avg." the report prints beside published numbers. A task added to
# TASKS is evaluated (and its data asked for) only where a parameter set lists it in ``eval.tasks``;
# it gets its own column, never a place in the average.
PAPER_TASKS: tuple[str, ...] = (
    "STS12",
    "STS13",
    "STS14",
    "STS15",
    "STS16",
    "STSBenchmark",
    "SICKRelatedness",
)
assert all(t in TASKS for t in PAPER_TASKS)


def average_tasks(tasks: Sequence[str]) -> list[str]:
    """The tasks among ``tasks`` that an ``avg`` averages: the paper's, in the order given (all of
    ``tasks`` when none of them is the paper's)."""
    return [t for t in tasks if t in PAPER_TASKS] or list(tasks)


def prepared_keys(tasks: Sequence[str]) -> list[str]:
    """The splits the check and prepare_sts stages read for evaluating ``tasks``: those tasks in
    registry order, then every :data:`EXTRA_SPLITS` (model selection and the hard-negative pool)."""
    wanted = set(tasks)
    return [*(t for t in TASKS if t in wanted), *EXTRA_SPLITS]


# Extra splits the prepare_sts stage writes next to the tasks: model selection (STS-B dev) and the
# §5.1 hard-negative pool (STS-B train), plus SICK train for completeness.
EXTRA_SPLITS: dict[str, Reader] = {
    "STSBenchmark-dev": lambda root, check=True: read_stsb(root, "dev", check),
    "STSBenchmark-train": lambda root, check=True: read_stsb(root, "train", check),
    "SICKRelatedness-train": lambda root, check=True: read_sick(root, "train", check),
}


def task(name: str) -> Task:
    """The task ``name``; ValueError naming the registered tasks if unknown."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[name]


def display_name(key: str) -> str:
    """The report label of a task key (other keys, e.g. ``avg``, pass through)."""
    return TASKS[key].display if key in TASKS else key


def read_task(root: str | os.PathLike, name: str, check_counts: bool = True) -> StsSplit:
    """The evaluation split of task ``name`` from a SentEval ``downstream`` folder."""
    return task(name).read(root, check_counts)


def read_split(root: str | os.PathLike, key: str, check_counts: bool = True) -> StsSplit:
    """A task's evaluation split or one of :data:`EXTRA_SPLITS` from a SentEval folder."""
    if key in EXTRA_SPLITS:
        return EXTRA_SPLITS[key](root, check_counts)
    return read_task(root, key, check_counts)


def load_split(folder: str | os.PathLike, key: str, check_counts: bool = True) -> StsSplit:
    """``key`` (a task name or an :data:`EXTRA_SPLITS` key) from a prepared folder (the
    ``prepare_sts`` stage's output) or a SentEval ``downstream`` folder."""
    if is_prepared(folder):
        return read_prepared(folder, key)
    return read_split(Path(folder), key, check_counts)
