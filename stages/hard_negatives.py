"""DVC stage `hard_negatives`: §5.1's hardest STS-B train negatives, before and after training."""

from __future__ import annotations

from _common import LAYOUT, params

from focalcse.steps import hard_negatives

if __name__ == "__main__":
    out = hard_negatives.run(params(), LAYOUT)
    for backbone, entry in out["backbones"].items():
        print(
            backbone, {k: round(v, 3) for k, v in entry["mean_cos"].items()}, "top:", entry["pairs"][0]["cos"]
        )
