"""DVC stage `train@<framework>-<backbone>-<loss>-<seed>`: one training run, in one process or (a
framework whose SPEC does not refuse DDP: SimCSE) under torchrun.

DVC runs it as one process. For several GPUs (or CPU processes) launch the same script with
``torchrun``; ``train.batch_size`` is then the global batch, split over the ranks, and every rank's
loss uses the whole global batch's negatives. Rank 0 evaluates, saves, writes the metrics and owns
the MLflow run; the other ranks only train::

    torchrun --standalone --nproc_per_node=4 stages/train.py simcse all-MiniLM-L6-v2 focal_infonce 1

``train.device: cuda`` uses NCCL (each rank on ``cuda:LOCAL_RANK``); ``cpu`` uses gloo.
"""

from __future__ import annotations

import contextlib
import os
import sys

from _common import LAYOUT, item_lock, matrix_args, params, transient_exit

from focalcse.layout import run_name
from focalcse.ops.tracking import train_run
from focalcse.steps import train


def main() -> int:
    args = matrix_args(__doc__)
    p = params()
    item = (args.backbone, args.loss, args.seed)
    fw = args.framework
    cfg = p.train_config(*item, fw)  # a bad value stops here, before any work
    if os.environ.get("RANK", "0") != "0":  # torchrun's other ranks: rank 0 holds the item's lock
        return _train(p, item, fw, cfg)
    with item_lock(f"train@{fw}-{'-'.join(map(str, item))}"):
        return _train(p, item, fw, cfg)


def _train(p, item, fw, cfg) -> int:
    import torch

    from focalcse.core.distributed import cleanup, init_distributed

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: train.device = {cfg.device!r} but CUDA is not available", file=sys.stderr)
        return 2
    ctx = init_distributed("nccl" if cfg.device.startswith("cuda") else "gloo")  # one process unless torchrun
    try:
        # MLflow run (server checked before training): per-step curves, then the model as an artifact.
        # The run id is kept in the item's checkpoint folder: a resumed item continues its run.
        model_dir = LAYOUT.model_dir(*item, fw)
        work = model_dir.parent / f".{model_dir.name}.work"
        tracking = (
            train_run(p, *item, work_dir=work, framework=fw) if ctx.is_main else contextlib.nullcontext(None)
        )
        with transient_exit(), tracking as run:
            log = run.log_metrics if run is not None else None
            metrics = train.run(
                p, LAYOUT, *item, log_metrics=log, progress=ctx.is_main, parallel=ctx, framework=fw
            )
            if run is not None:
                paths = LAYOUT.train_item(*item, fw)
                run.finish(metrics, paths.model_dir, files=list(paths.json_outputs))
    finally:
        cleanup()
    if ctx.is_main:
        ranks = f" ({ctx.world_size} ranks)" if ctx.distributed else ""
        print(
            f"{run_name(*item, fw)}{ranks}: best STS-B dev {metrics['stsb_dev_best']:.2f} at step {metrics['best_step']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
