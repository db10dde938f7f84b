"""Build the report: read the pipeline's outputs, run :data:`~focalcse.report.sections.SECTIONS` in
order into one :class:`~focalcse.report.render.Doc`, and write it as ``report.md`` and a
self-contained ``index.html`` (PNGs embedded as base64), with the figures under ``figures/``, and
``provenance.json``: what produced the run (commit, parameter set, CPU, command, wall time, date).

Every number shown is read from a pipeline output under ``metrics/`` (significance, per-run evaluation
and training metrics, curves, ablation items, hard negatives), except the published rows of Table 2,
which come from ``published.yaml`` with the source of each row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from focalcse.atomic import atomic_write, staged_dir
from focalcse.config import Params
from focalcse.layout import Layout
from focalcse.report import sections as report_sections
from focalcse.report.data import ReportData, load_report_data
from focalcse.report.provenance import PROVENANCE_FILE, run_record
from focalcse.report.render import Doc, to_html, to_markdown
from focalcse.report.sections import Context, Section
from focalcse.report.tables import TITLE


def build_report(
    params: Params,
    layout: Layout,
    params_file: str | os.PathLike = "params.yaml",
    commit: str | None = None,
    sections: Sequence[Section] | None = None,
) -> dict[str, Path]:
    """Write ``report.md``, ``index.html`` and ``figures/*.png`` under ``layout.reports_dir``.

    The folder is built beside it and swapped in whole, so a failure leaves the old report.
    ``sections`` defaults to :data:`~focalcse.report.sections.SECTIONS`.
    Returns the paths of ``markdown``, ``html`` and each figure.
    """
    from focalcse.provenance import git_commit

    data = load_report_data(params, layout)
    out = layout.reports_dir
    previous = _read_previous(out / PROVENANCE_FILE)  # its full run survives a partial rerun
    with staged_dir(out) as tmp:
        paths = write_report(
            params, data, tmp, str(params_file), commit or git_commit(), sections, previous=previous
        )
    return {k: out / p.relative_to(tmp) for k, p in paths.items()}


def _read_previous(path: Path) -> dict[str, Any] | None:
    """The provenance record the last report wrote (the stage's output persists), or None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def make_doc(ctx: Context, sections: Sequence[Section] | None = None) -> Doc:
    """Run each section on ``ctx``, in order (default: :data:`~focalcse.report.sections.SECTIONS`, as
    it is when called); returns ``ctx.doc``."""
    for section in report_sections.SECTIONS if sections is None else sections:
        section(ctx)
    return ctx.doc


def write_report(
    params: Params,
    data: ReportData,
    out: Path,
    params_file: str,
    commit: str,
    sections: Sequence[Section] | None = None,
    previous: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """The report in folder ``out``: figures, then ``report.md`` and ``index.html``; ``previous``: the
    last run's provenance record (:func:`~focalcse.report.provenance.run_record`)."""
    run = run_record(params, data, commit, previous=previous)
    ctx = Context(params, data, Doc(TITLE), out, params_file, commit, run=run)
    doc = make_doc(ctx, sections)
    paths = dict(ctx.paths)
    atomic_write(out / PROVENANCE_FILE, json.dumps(ctx.run, indent=2) + "\n")
    paths["markdown"] = atomic_write(out / "report.md", to_markdown(doc, out))
    paths["html"] = atomic_write(out / "index.html", to_html(doc))
    return paths
