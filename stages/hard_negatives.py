"""DVC stage `hard_negatives`: §5.1's hardest STS-B train negatives, before and after training
(one matrix item per sweep backbone × loss)."""

from __future__ import annotations

import argparse

from _common import LAYOUT, params

from focalcse.steps import hard_negatives

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backbone")
    parser.add_argument("loss")
    args = parser.parse_args()
    out = hard_negatives.run(params(), LAYOUT, args.backbone, args.loss)
    print(
        args.backbone,
        args.loss,
        {k: round(v, 3) for k, v in out["mean_cos"].items()},
        "top:",
        out["pairs"][0]["cos"],
    )
