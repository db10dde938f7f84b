"""Step ``report``: Tables 2-5 (with Holm-adjusted p, published and derived rows, the ablations' seed
band), Figure 1, curves, hard negatives and the departures from the reference recipe as ``report.md``
+ ``index.html``."""

from __future__ import annotations

import os
from pathlib import Path

from focalcse.config import Params
from focalcse.layout import Layout
from focalcse.report import build_report


def run(params: Params, layout: Layout, params_file: str | os.PathLike = "params.yaml") -> dict[str, Path]:
    """Read every metrics file the layout names; write the report under ``layout.reports_dir``."""
    return build_report(params, layout, params_file=params_file)
