"""DVC stage `report`: Tables 2-5, Figure 1, curves and hard negatives as reports/report.md + index.html."""

from __future__ import annotations

from _common import PARAMS_FILE, params

from focalcse.pipeline import run_report

if __name__ == "__main__":
    paths = run_report(params(), "metrics", "reports", params_file=PARAMS_FILE)
    print(f"wrote {paths['markdown']}, {paths['html']} and {len(paths) - 2} figures")
