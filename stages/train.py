"""DVC stage `train@<backbone>-<loss>-<seed>`: one SimCSE / Focal-InfoNCE training run."""

from __future__ import annotations

from _common import matrix_args, params, transient_exit

from focalcse.pipeline import TRAIN_FILES, run_name, run_train, train_item_paths
from focalcse.tracking import train_run

if __name__ == "__main__":
    args = matrix_args(__doc__)
    p = params()
    name = run_name(args.backbone, args.loss, args.seed)
    paths = train_item_paths(args.backbone, args.loss, args.seed)
    # MLflow run (server checked before training): per-step curves, then the model as an artifact.
    with transient_exit(), train_run(p, args.backbone, args.loss, args.seed) as run:
        metrics = run_train(p, args.backbone, args.loss, args.seed, log_metrics=run.log_metrics, **paths)
        run.finish(metrics, paths["model_dir"], files=[paths[k] for k in TRAIN_FILES])
    print(f"{name}: best STS-B dev {metrics['stsb_dev_best']:.2f} at step {metrics['best_step']}")
