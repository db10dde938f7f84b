"""DVC stage `train@<backbone>-<loss>-<seed>`: one SimCSE / Focal-InfoNCE training run."""

from __future__ import annotations

from _common import matrix_args, params

from focalcse.pipeline import run_name, run_train
from focalcse.training import output_path

if __name__ == "__main__":
    args = matrix_args(__doc__)
    name = run_name(args.backbone, args.loss, args.seed)
    metrics = run_train(
        params(),
        args.backbone,
        args.loss,
        args.seed,
        corpus_file="data/corpus/train.txt",
        sts_dir="data/sts",
        model_dir=output_path("models", args.backbone, args.loss, args.seed),
        metrics_file=f"metrics/train/{name}.json",
        curve_file=f"metrics/curves/loss/{name}.json",
        dev_file=f"metrics/curves/dev/{name}.json",
    )
    print(f"{name}: best STS-B dev {metrics['stsb_dev_best']:.2f} at step {metrics['best_step']}")
