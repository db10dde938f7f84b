"""DVC stage `hard_negatives`: §5.1's hardest STS-B train negatives, before and after training."""

from __future__ import annotations

from _common import params

from focalcse.pipeline import run_hard_negatives

if __name__ == "__main__":
    out = run_hard_negatives(params(), "data/sts", "models", "metrics/hard_negatives.json")
    for backbone, entry in out["backbones"].items():
        print(
            backbone, {k: round(v, 3) for k, v in entry["mean_cos"].items()}, "top:", entry["pairs"][0]["cos"]
        )
