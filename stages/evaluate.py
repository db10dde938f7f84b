"""DVC stage `evaluate@<framework>-<backbone>-<loss>-<seed>`: 7-task STS evaluation of one trained model."""

from __future__ import annotations

from _common import LAYOUT, matrix_args, params, transient_exit

from focalcse.layout import run_name
from focalcse.ops.tracking import check_tracking_uri, enabled, log_evaluation, sync, tracking_uri
from focalcse.steps import evaluate

if __name__ == "__main__":
    args = matrix_args(__doc__)
    p = params()
    item = (args.backbone, args.loss, args.seed)
    fw = args.framework
    with transient_exit():
        if enabled():
            check_tracking_uri(tracking_uri())  # fail before encoding anything
            sync()  # a train run queued while the server was down: complete it, so the scores join it
        result = evaluate.run(p, LAYOUT, *item, framework=fw)
        # The scores join the MLflow run that trained this model folder.
        log_evaluation(
            p, *item, LAYOUT.model_dir(*item, fw), result, LAYOUT.eval_metrics(*item, fw), framework=fw
        )
    print(f"{run_name(*item, fw)}: avg {result['avg']:.2f}")
