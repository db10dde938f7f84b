"""``focalcse`` command line: evaluate a model folder on the STS tasks; print one item's config;
send queued MLflow records (``focalcse tracking sync``); run a work-pool worker (``focalcse worker``);
compare a rerun's results with the committed ones (``focalcse reproduced``).

Hyper-parameters never arrive through flags: training reads ``params.yaml`` (see ``stages/``);
``focalcse config`` shows what one train item of a parameter set will use; ``focalcse params use
<set>`` composes a set (``params/<set>.yaml``, an overlay) over ``params.yaml``; ``focalcse params
check`` validates a parameter set before DVC reads it.
"""

from __future__ import annotations

import argparse
import sys
import time

from focalcse.core.backbones import POOLERS
from focalcse.data.tasks import TASKS


def _evaluate(args: argparse.Namespace) -> int:
    import torch

    from focalcse.atomic import write_json
    from focalcse.core.model import SentenceEncoder
    from focalcse.data.sources import sts_data_dir
    from focalcse.eval.sts_eval import evaluate_sts
    from focalcse.provenance import provenance

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir = sts_data_dir(args.data_dir)
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(args.model, pooler=args.pooler, mlp_init="pretrained")
    encoder.to(args.device)
    result = evaluate_sts(
        encoder, str(data_dir), tasks=args.tasks, batch_size=args.batch_size, precision=args.precision
    )
    wall = time.perf_counter() - start
    result["meta"] = provenance(
        model=str(args.model),
        pooler=encoder.eval_pooler,
        data_dir=str(data_dir),
        precision=args.precision,
        setting="all (STS12-16 subsets pooled); wmean under 'wmean'",
        wall_time_s=wall,
    )
    write_json(args.output, result)
    cols = [*args.tasks, "avg"]
    print(" ".join(f"{c:>15}" for c in cols))
    print(" ".join(f"{result[c]:15.2f}" for c in cols))
    print(f"wall time {wall:.1f}s -> {args.output}")
    return 0


def _config(args: argparse.Namespace) -> int:
    import json
    import sys

    from focalcse.config import ConfigError, all_frameworks
    from focalcse.core.backbones import backbone_config
    from focalcse.paramsets import load_any

    try:
        params = load_any(args.params)  # a file under params/ is an overlay on params.yaml
    except ConfigError as err:
        raise ValueError(str(err)) from err
    sw = params.sweep
    if args.backbone not in sw.backbones:
        raise ValueError(
            f"--backbone {args.backbone!r}: expected one of {args.params}'s sweep.backbones ({', '.join(sw.backbones)})"
        )
    if args.loss not in sw.losses:
        raise ValueError(
            f"--loss {args.loss!r}: expected one of {args.params}'s sweep.losses ({', '.join(sw.losses)})"
        )
    if args.seed is not None and args.seed not in sw.seeds:
        raise ValueError(
            f"--seed {args.seed}: expected one of {args.params}'s sweep.seeds ({', '.join(map(str, sw.seeds))})"
        )
    args.framework = args.framework or sw.reference
    if args.framework not in all_frameworks():
        raise ValueError(f"--framework {args.framework!r}: expected one of {', '.join(all_frameworks())}")
    if args.framework not in sw.all_frameworks:
        print(
            f"note: {args.params} does not train {args.framework} (sweep.frameworks: {list(sw.frameworks)}); "
            "these are the settings it would use",
            file=sys.stderr,
        )
    # The same dict the train stage logs to MLflow as its params (focalcse.ops.tracking.train_run).
    effective = params.effective_config(args.backbone, args.loss, args.seed, args.framework)
    if effective["unpad"] and backbone_config(params.backbone_source(args.backbone)) is None:
        print(
            f"note: the config.json of backbone {args.backbone!r} cannot be read here (offline and not in the "
            "Hugging Face cache): unpad shows train.unpad; training pads if its architecture has no "
            "unpadded forward",
            file=sys.stderr,
        )
    print(json.dumps(effective, indent=2))
    return 0


def _tracking_sync(args: argparse.Namespace) -> int:
    from focalcse.errors import EX_TEMPFAIL
    from focalcse.ops.tracking import queue_dir, sync

    folder = args.queue or queue_dir()
    counts = sync(folder=folder)
    print(
        f"tracking sync: {counts['runs']} run(s) sent ({counts['metrics']} metrics), "
        f"{counts.get('killed', 0)} dead run(s) marked KILLED, {counts['left']} still queued in {folder}"
    )
    for run, why in (counts.get("reasons") or {}).items():
        print(f"  {run}: {why}")
    if counts["left"]:
        print(
            "  the queue is kept: start the store (or fix what is named above), then run `focalcse tracking "
            "sync` again; a run whose process is gone is ended KILLED once its records are sent"
        )
    return EX_TEMPFAIL if counts["left"] else 0


def _worker(args: argparse.Namespace) -> int:
    from focalcse.ops import worker

    return worker.run(args.pool, args.name, args.limit)


def _params_use(args: argparse.Namespace) -> int:
    from focalcse.config import ConfigError
    from focalcse.ops.dvc_yaml import write_set

    try:
        print(write_set(args.root, args.name))
    except ConfigError as err:
        raise ValueError(str(err)) from err
    return 0


def _params_check(args: argparse.Namespace) -> int:
    from focalcse.config import ConfigError
    from focalcse.paramsets import load_any

    try:
        load_any(args.params)
    except ConfigError as err:
        raise ValueError(str(err)) from err
    print(f"{args.params}: valid")
    return 0


def _reproduced(args: argparse.Namespace) -> int:
    from focalcse.atomic import write_json
    from focalcse.evidence.reproduced import lines, reproduced

    cmp = reproduced(args.root, args.against, args.of)
    print("\n".join(lines(cmp)))
    if args.json:
        write_json(args.json, cmp.to_dict())
    return 0 if cmp.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="focalcse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="7-task STS evaluation of a model folder or hub id")
    ev.add_argument("--model", required=True, help="model folder, hub id, or all-MiniLM-L6-v2")
    ev.add_argument(
        "--pooler",
        choices=POOLERS,
        default=None,
        help="pooler; a folder saved by focalcse records its own and refuses another",
    )
    ev.add_argument("--output", required=True, help="metrics JSON to write")
    ev.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ev.add_argument(
        "--data-dir",
        default=None,
        help="prepared STS folder, SentEval downstream folder, or mirror root "
        "(default: FOCALCSE_DATA_MIRROR, else SentEval's download)",
    )
    ev.add_argument("--batch-size", type=int, default=128)
    ev.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    ev.set_defaults(func=_evaluate)
    cf = sub.add_parser(
        "config",
        help="print one train item's effective config as JSON (train <- backbone overrides <- loss overrides "
        "<- framework train keys; a framework's own settings under 'framework')",
    )
    cf.add_argument(
        "--params",
        default="params.yaml",
        help="params.yaml, or a set params/<name>.yaml (an overlay: composed over params.yaml)",
    )
    cf.add_argument("--backbone", required=True, help="a sweep backbone of that set")
    cf.add_argument("--loss", required=True, help="a sweep loss of that set")
    cf.add_argument("--seed", type=int, default=None, help="a sweep seed (default: the first)")
    cf.add_argument(
        "--framework",
        default=None,
        help="a registered framework (default: the set's first, sweep.frameworks[0]): adds frameworks.<F>'s "
        "train keys and its own settings",
    )
    cf.set_defaults(func=_config)
    ps = sub.add_parser("params", help="parameter sets: params/<name>.yaml overlays on params.yaml")
    pss = ps.add_subparsers(dest="params_command", required=True)
    pu = pss.add_parser(
        "use",
        help="write sets/<name>/params.yaml = the default params.yaml with params/<name>.yaml merged in "
        "(validated first) and the set's own sets/<name>/dvc.yaml, where it runs apart from every other set",
    )
    pu.add_argument("name", help="a set under params/ (without .yaml)")
    pu.add_argument("--root", default=".", help="the checkout (default: the current folder)")
    pu.set_defaults(func=_params_use)
    pc = pss.add_parser(
        "check",
        help="validate params.yaml (or a set) as the check stage does, before DVC reads dvc.yaml: DVC "
        "refuses some bad sweep values (a backbone named like a path) with its own message first",
    )
    pc.add_argument(
        "--params",
        default="params.yaml",
        help="params.yaml, or a set params/<name>.yaml (an overlay: composed over params.yaml)",
    )
    pc.set_defaults(func=_params_check)
    tr = sub.add_parser(
        "tracking", help="MLflow tracking: send what a stage queued while the server was down"
    )
    trs = tr.add_subparsers(dest="tracking_command", required=True)
    sy = trs.add_parser(
        "sync",
        help="send every queued run's metrics, params, tags, artifacts and model; remove what was sent",
    )
    sy.add_argument(
        "--queue", default=None, help="queue folder (default: <repo root>/.focalcse/tracking-queue)"
    )
    sy.set_defaults(func=_tracking_sync)
    wk = sub.add_parser(
        "worker",
        help="a Prefect process worker on a work pool; stops on the first SIGINT or SIGTERM, even when "
        "started in the background of a script (which leaves SIGINT ignored)",
    )
    wk.add_argument("--pool", required=True, help="the work pool (`make pool-deploy` creates it)")
    wk.add_argument("--name", required=True, help="this worker's name (one per machine)")
    wk.add_argument("--limit", type=int, default=1, help="flow runs at a time (default 1)")
    wk.set_defaults(func=_worker)
    rp = sub.add_parser(
        "reproduced",
        help="did a rerun reproduce the committed results? Per report table: the largest difference "
        "against the committed (git) result files, its tolerance, and whether every verdict is the same; "
        "exit 0 when all pass, 1 otherwise",
    )
    rp.add_argument("--against", default="HEAD", help="the commit whose results count (default: HEAD)")
    rp.add_argument(
        "--of",
        default=None,
        help="compare this commit's results instead of the work tree's (e.g. to record a tolerance "
        "between two committed runs)",
    )
    rp.add_argument("--json", default=None, help="also write the comparison as JSON to this file")
    rp.add_argument("--root", default=".", help="a folder inside the git checkout (default: the current one)")
    rp.set_defaults(func=_reproduced)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"focalcse {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
