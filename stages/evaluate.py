"""DVC stage `evaluate@<backbone>-<loss>-<seed>`: 7-task STS evaluation of one trained model."""

from __future__ import annotations

from _common import matrix_args, params, transient_exit

from focalcse.pipeline import run_evaluate, run_name
from focalcse.tracking import check_tracking_uri, enabled, log_evaluation, tracking_uri
from focalcse.training import output_path

if __name__ == "__main__":
    args = matrix_args(__doc__)
    p = params()
    name = run_name(args.backbone, args.loss, args.seed)
    model_dir = output_path("models", args.backbone, args.loss, args.seed)
    out_file = f"metrics/eval/{name}.json"
    with transient_exit():
        if enabled():
            check_tracking_uri(tracking_uri())  # fail before encoding anything
        result = run_evaluate(
            p, args.backbone, args.loss, args.seed, model_dir=model_dir, sts_dir="data/sts", out_file=out_file
        )
        # The 7 scores join the MLflow run that trained this model folder.
        log_evaluation(p, args.backbone, args.loss, args.seed, model_dir, result, out_file)
    print(f"{name}: avg {result['avg']:.2f}")
