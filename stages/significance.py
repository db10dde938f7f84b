"""DVC stage `significance`: mean±std over seeds and paired t-tests against the baseline loss."""

from __future__ import annotations

from _common import LAYOUT, params

from focalcse.steps import significance

if __name__ == "__main__":
    out = significance.run(params(), LAYOUT)
    for backbone, entry in out["backbones"].items():
        p = {loss: round(t["avg"]["p_value"], 4) for loss, t in entry["ttest"].items()}
        print(backbone, {k: round(v["avg"]["mean"], 2) for k, v in entry["losses"].items()}, "p(avg):", p)
