"""DVC stage `report`: the paper's tables from the pipeline's metrics files."""

from __future__ import annotations

from _common import params

from focalcse.pipeline import run_report

if __name__ == "__main__":
    print(run_report(params(), "metrics/significance.json", "reports").read_text())
