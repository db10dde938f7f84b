"""DVC stage `significance`: mean±std over seeds and paired t-tests, per backbone."""

from __future__ import annotations

from _common import params

from focalcse.pipeline import run_significance

if __name__ == "__main__":
    out = run_significance(params(), "metrics/eval", "metrics/significance.json")
    for backbone, entry in out["backbones"].items():
        t = entry["ttest"].get("avg")
        print(
            backbone,
            {k: round(v["avg"]["mean"], 2) for k, v in entry["losses"].items()},
            t and round(t["p_value"], 4),
        )
