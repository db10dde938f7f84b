"""What the report calls things, from the registries: a loss's label and colour from its ``SPEC``
(:mod:`focalcse.core.losses`, read without torch), a task's column label from :mod:`focalcse.data.tasks`,
and each framework's display name from its ``SPEC`` (:mod:`focalcse.core.frameworks`).

A name no registry knows (e.g. a loss in an old metrics file) is shown as it is, in grey.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from focalcse.config import Params
from focalcse.core.frameworks import framework_label as registered_label
from focalcse.core.losses import loss_spec
from focalcse.data.tasks import PAPER_TASKS, TASKS, average_tasks, display_name

UNKNOWN_COLOR = "#7f7f7f"
AVG = "avg"
AVG_LABEL = "Avg."  # over the paper's 7 STS tasks, as the published averages are


def framework_label(framework: str) -> str:
    """A framework's display name (its SPEC's ``label``; ``SimCSE``), else the name itself."""
    try:
        return registered_label(framework)
    except ValueError:
        return framework


def run_label(framework: str, loss: str, baseline: str) -> str:
    """A (framework, loss) row as the paper's Table 3 names it: the framework alone for its own
    (``baseline``) loss, ``<framework> + <loss label>`` for another, e.g. ``DiffCSE + Focal-InfoNCE``."""
    name = framework_label(framework)
    return name if loss == baseline else f"{name} + {loss_label(loss)}"


def loss_label(loss: str) -> str:
    """The report label of loss ``loss`` (its SPEC's ``label``), else the name itself."""
    try:
        return loss_spec(loss).label
    except ValueError:
        return loss


def loss_color(loss: str) -> str:
    """The plot colour of loss ``loss`` (its SPEC's ``color``), else grey."""
    try:
        return loss_spec(loss).color
    except ValueError:
        return UNKNOWN_COLOR


def avg_is_the_papers(tasks: Iterable[str]) -> bool:
    """Whether ``avg`` over the evaluated ``tasks`` is the paper's 7-task average (only then does a
    published average belong in its column)."""
    return set(average_tasks(list(tasks))) == set(PAPER_TASKS)


def column_label(key: str, tasks: Iterable[str] = PAPER_TASKS) -> str:
    """A score column's label: a task's display name, other keys as they are, and for ``avg`` (the
    mean over the evaluated tasks of the paper's 7, :func:`focalcse.data.tasks.average_tasks`) ``Avg.``
    when all 7 were evaluated, else what it averages (e.g. ``Avg. (2 of the paper's 7)``), so no other
    average reads as the published 7-task one."""
    if key != AVG:
        return display_name(key)
    averaged = average_tasks(list(tasks))
    if avg_is_the_papers(averaged):
        return AVG_LABEL
    if set(averaged) <= set(PAPER_TASKS):
        return f"{AVG_LABEL} ({len(averaged)} of the paper's {len(PAPER_TASKS)})"
    n = len(averaged)
    return f"{AVG_LABEL} ({n} task{'s' if n != 1 else ''}, none of the paper's)"


def metric_keys(tasks: Iterable[str]) -> list[str]:
    """The registered tasks among ``tasks``, in registry order, then ``avg``."""
    wanted = set(tasks)
    return [*(t for t in TASKS if t in wanted), AVG]


def metric_columns(params: Params, significance: Mapping[str, Any]) -> list[str]:
    """Table 2's columns: the evaluated tasks (``eval.tasks``) in registry order, then ``avg``; only
    those some loss of ``significance`` has a summary of."""
    present = {k for e in significance["backbones"].values() for summ in e["losses"].values() for k in summ}
    return [k for k in metric_keys(params.eval.tasks) if k in present]
