"""DVC stage `train@<backbone>-<loss>-<seed>`: one SimCSE / Focal-InfoNCE training run."""

from __future__ import annotations

from _common import matrix_args, params, transient_exit

from focalcse.pipeline import run_name, run_train
from focalcse.tracking import train_run
from focalcse.training import output_path

if __name__ == "__main__":
    args = matrix_args(__doc__)
    p = params()
    name = run_name(args.backbone, args.loss, args.seed)
    model_dir = output_path("models", args.backbone, args.loss, args.seed)
    files = {
        "metrics_file": f"metrics/train/{name}.json",
        "curve_file": f"metrics/curves/loss/{name}.json",
        "dev_file": f"metrics/curves/dev/{name}.json",
    }
    # MLflow run (server checked before training): per-step curves, then the model as an artifact.
    with transient_exit(), train_run(p, args.backbone, args.loss, args.seed) as run:
        metrics = run_train(
            p,
            args.backbone,
            args.loss,
            args.seed,
            corpus_file="data/corpus/train.txt",
            sts_dir="data/sts",
            model_dir=model_dir,
            log_metrics=run.log_metrics,
            **files,
        )
        run.finish(metrics, model_dir, files=list(files.values()))
    print(f"{name}: best STS-B dev {metrics['stsb_dev_best']:.2f} at step {metrics['best_step']}")
