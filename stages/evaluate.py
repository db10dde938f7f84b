"""DVC stage `evaluate@<backbone>-<loss>-<seed>`: 7-task STS evaluation of one trained model."""

from __future__ import annotations

from _common import matrix_args, params

from focalcse.pipeline import run_evaluate, run_name
from focalcse.training import output_path

if __name__ == "__main__":
    args = matrix_args(__doc__)
    name = run_name(args.backbone, args.loss, args.seed)
    result = run_evaluate(
        params(),
        args.backbone,
        args.loss,
        args.seed,
        model_dir=output_path("models", args.backbone, args.loss, args.seed),
        sts_dir="data/sts",
        out_file=f"metrics/eval/{name}.json",
    )
    print(f"{name}: avg {result['avg']:.2f}")
