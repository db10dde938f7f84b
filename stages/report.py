"""DVC stage `report`: Tables 2-5, Figure 1, curves and hard negatives as reports/report.md + index.html."""

from __future__ import annotations

from _common import LAYOUT, PARAMS_FILE, params, transient_exit

from focalcse.ops.tracking import check_tracking_uri, enabled, log_summary_run, tracking_uri
from focalcse.steps import report

if __name__ == "__main__":
    p = params()
    with transient_exit():
        if enabled():
            check_tracking_uri(tracking_uri())  # fail before building anything
        paths = report.run(p, LAYOUT, params_file=PARAMS_FILE)
        # Tables, figures and the HTML page as artifacts of one MLflow `summary` run.
        log_summary_run(p, [LAYOUT.summary_file, LAYOUT.significance_file, LAYOUT.reports_dir])
    print(f"wrote {paths['markdown']}, {paths['html']} and {len(paths) - 2} figures")
