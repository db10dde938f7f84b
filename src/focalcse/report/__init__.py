"""The report: published numbers, the tables as an ordered list of sections, rendering, figures.

* :mod:`~focalcse.report.published` (+ ``published.yaml``): the published rows shown beside ours
  (SimCSE's, and the DiffCSE / PromptBERT rows of a sweep that trains those frameworks);
* :mod:`~focalcse.report.data`: the pipeline outputs it reads (:func:`load_report_data`);
* :mod:`~focalcse.report.labels`: loss labels / colours and task columns, from the registries, and
  the frameworks' display names;
* :mod:`~focalcse.report.recipe`: the departures from the reference recipe, computed from params;
* :mod:`~focalcse.report.sections`: the tables and figures, one function per section, in
  :data:`SECTIONS` order;
* :mod:`~focalcse.report.render`: the document model, Markdown and HTML;
* :mod:`~focalcse.report.figures`: the PNGs (matplotlib);
* :mod:`~focalcse.report.build`: :func:`build_report`, which writes it all atomically.

What reads these results outside the pipeline (the documents' numbers, ``focalcse reproduced``) is
:mod:`focalcse.evidence`.
"""

from __future__ import annotations

from focalcse.report.build import build_report
from focalcse.report.data import ReportData, load_report_data
from focalcse.report.published import PUBLISHED, PUBLISHED_FRAMEWORKS, PublishedRow
from focalcse.report.sections import SECTIONS

__all__ = [
    "PUBLISHED",
    "PUBLISHED_FRAMEWORKS",
    "SECTIONS",
    "PublishedRow",
    "ReportData",
    "build_report",
    "load_report_data",
]
