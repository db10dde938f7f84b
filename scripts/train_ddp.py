"""One `train` matrix item on several GPUs (or CPU processes): DDP with global-batch negatives.

The ``torchrun`` counterpart of ``stages/train.py``: same matrix key, same ``params.yaml`` (or
``FOCALCSE_PARAMS``), same outputs. ``train.batch_size`` is the **global** batch, split over the ranks,
and every rank's loss uses all of its negatives, so a run equals a single-process run with that batch
(up to dropout draws, which differ per rank). Rank 0 evaluates, saves, writes the metrics and owns
the MLflow run; the other ranks only train.

    torchrun --standalone --nproc_per_node=4 scripts/train_ddp.py all-MiniLM-L6-v2 focal_infonce 1

``train.device`` must be ``cuda`` for NCCL (each rank uses ``cuda:LOCAL_RANK``); with ``cpu`` the
ranks use gloo. Needs the ``parallel`` hook in ``focalcse.training.train`` and
``focalcse.pipeline.run_train``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch

from focalcse.config import ConfigError, load_params
from focalcse.distributed import cleanup, init_distributed
from focalcse.pipeline import TRAIN_FILES, run_name, run_train, train_item_paths


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backbone")
    parser.add_argument("loss")
    parser.add_argument("seed", type=int)
    args = parser.parse_args()
    try:
        params = load_params(os.environ.get("FOCALCSE_PARAMS", "params.yaml"))
        cfg = params.train_config(args.backbone, args.loss, args.seed)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    device = torch.device(cfg.device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: train.device = {cfg.device!r} but CUDA is not available", file=sys.stderr)
        return 2
    ctx = init_distributed(backend)
    name = run_name(args.backbone, args.loss, args.seed)
    paths = train_item_paths(args.backbone, args.loss, args.seed)
    try:
        if ctx.is_main:
            from focalcse.tracking import train_run

            tracking = train_run(params, args.backbone, args.loss, args.seed)
        else:
            tracking = contextlib.nullcontext(None)
        with tracking as run:
            metrics = run_train(
                params,
                args.backbone,
                args.loss,
                args.seed,
                log_metrics=run.log_metrics if run is not None else None,
                progress=ctx.is_main,
                parallel=ctx,
                **paths,
            )
            if run is not None:
                run.finish(metrics, paths["model_dir"], files=[paths[k] for k in TRAIN_FILES])
        if ctx.is_main:
            print(
                f"{name} ({ctx.world_size} ranks): best STS-B dev {metrics['stsb_dev_best']:.2f} "
                f"at step {metrics['best_step']}"
            )
    finally:
        cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
