"""Side-by-side speed benchmark: focalcse vs sentence-transformers on the same backbone and data.

The driver of the measurements, one module each (their docstrings say exactly what is timed):

1. ``train`` (``train_speed.py``): training throughput, our trainer at bf16 and fp32 autocast against
   sentence-transformers' ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss``, same
   backbone, pooler, sentences and steps; peak RSS per side; STS-B dev after the steps.
2. ``eval`` (``eval_speed.py``): STS evaluation wall time over the registry's tasks, ST's ``encode`` +
   cosine + Spearman against ``evaluate_sts`` at bf16 (and fp32, the score reference).
3. ``loss`` (``focal_overhead.py``): Focal-InfoNCE vs InfoNCE step time in our trainer (alternating
   runs, paired steps on two model copies, and the loss alone).
4. ``quality`` (``quality.py``, opt-in): STS-B dev after a short run, one or two training sides over seeds,
   with a paired t-test.

Each is printed as medians and ratios and written to a JSON file and a Markdown table. Shared
helpers (presets, timing, data, worker subprocesses, results files) are in ``common.py``.

sentence-transformers is an optional extra (``pip install -e ".[bench]"``), never a runtime dependency.
Benchmarks are not tests: nothing here asserts a time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench.py --preset smoke     # ~3 min: wiring check, few steps, 2 tasks
    .venv/bin/python benchmarks/bench.py --preset full      # ~15 min on a quiet 2-core machine

Timings need a quiet machine: on a shared one other processes' load moves step times by 2-10x (the
paired Focal/InfoNCE ratio and the score differences stay meaningful).

Any preset value can be overridden (``--train-steps``, ``--train-reps``, ``--eval-reps``, ``--eval-tasks``, ...);
``--only train,eval,loss`` picks measurements. Results: ``--out-json`` (default
``benchmarks/results.json``) and ``--out-md`` (default ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import eval_speed
import focal_overhead
import quality
import train_speed
from common import (
    BASELINE_SIDE,
    COMPILED_SIDES,
    PADDED_SIDES,
    PRESETS,
    REPO,
    TARGETS,
    TASKS,
    TRAIN_SIDES,
    Bench,
    data_paths,
    load_average,
    machine_info,
    markdown_header,
    sample_corpus,
    split_list,
    write_results,
)

MEASUREMENTS = (train_speed, eval_speed, focal_overhead, quality)  # --only names: their NAME
SECTIONS = (train_speed, quality, eval_speed, focal_overhead)  # RESULTS.md's order


def markdown(report: dict[str, Any]) -> str:
    """A short Markdown summary of ``report`` (what ``bench.py`` writes to RESULTS.md)."""
    lines = markdown_header(report)
    for module in SECTIONS:
        if report.get(module.NAME):
            lines += module.markdown(report[module.NAME], report)
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--preset", choices=sorted(PRESETS), default="smoke", help="size defaults (default: smoke)"
    )
    p.add_argument(
        "--only",
        default="train,eval,loss",
        help="comma list of train, eval, loss, quality (quality: STS-B dev over seeds, opt-in)",
    )
    p.add_argument(
        "--data-mirror",
        default=os.environ.get("FOCALCSE_DATA_MIRROR") or str(REPO.parent / "shared" / "data"),
    )
    p.add_argument("--corpus", default=None, help="default: <mirror>/corpus/wiki1m_standin.txt.gz")
    p.add_argument("--sts-dir", default=None, help="default: <mirror>/senteval/downstream")
    p.add_argument("--seed", type=int, default=42, help="sample and training seed")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--m", type=float, default=0.3, help="Focal-InfoNCE margin")
    p.add_argument(
        "--st-max-grad-norm",
        type=float,
        default=1.0,
        help="ST clipping (1.0, as our train.max_grad_norm; 0 = none)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads in every worker (0 = torch default)")
    for key, value in PRESETS["full"].items():
        p.add_argument(
            f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"full preset: {value}"
        )
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--loss-precision", choices=("fp32", "bf16"), default="bf16")
    p.add_argument("--out-json", default=str(REPO / "benchmarks" / "results.json"))
    p.add_argument("--out-md", default=str(REPO / "benchmarks" / "RESULTS.md"))
    p.add_argument("--note", default="", help="a remark printed in RESULTS.md (e.g. 'shared machine')")
    p.add_argument("--keep-work", action="store_true", help="keep the worker logs and specs")
    args = p.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _sides(flag: str, value: str, counts: tuple[int, ...] | None = None) -> list[str]:
    """The training sides named by ``--<flag>`` (as many as one of ``counts``, if given); SystemExit
    otherwise."""
    sides, known = split_list(value), TRAIN_SIDES + PADDED_SIDES + COMPILED_SIDES
    if any(s not in known for s in sides) or (counts is not None and len(sides) not in counts):
        how_many = f"{' or '.join(map(str, counts))} of" if counts is not None else "some of"
        raise SystemExit(f"--{flag} {value!r}: expected {how_many} {', '.join(known)}")
    return sides


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = [m.NAME for m in MEASUREMENTS]
    only = set(split_list(args.only))
    bad = only - set(names)
    if bad:
        raise SystemExit(f"--only: unknown {sorted(bad)}; expected {', '.join(names)}")
    quality_sides = _sides("quality-sides", args.quality_sides, (1, 2)) if "quality" in only else []
    train_sides = _sides("train-sides", args.train_sides)
    eval_tasks = split_list(args.eval_tasks)
    if any(t not in TASKS for t in eval_tasks):
        raise SystemExit(f"--eval-tasks: expected some of {', '.join(TASKS)}")
    if "train" in only and BASELINE_SIDE not in train_sides:
        print(f"note: {BASELINE_SIDE} not among --train-sides; no speed-up ratio will be computed")
    corpus, sts_dir = data_paths(args.data_mirror, args.corpus, args.sts_dir)

    started = time.perf_counter()
    report: dict[str, Any] = {
        "preset": args.preset,
        "command": shlex.join(
            ["python", "benchmarks/bench.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "config": {k: v for k, v in vars(args).items() if k not in ("out_json", "out_md")},
        "machine": machine_info(),
        "load_start": load_average(),
        "targets": TARGETS,
        "json_name": Path(args.out_json).name,
        "note": args.note,
    }
    bench = Bench(args, only, Path(tempfile.mkdtemp(prefix="focalcse-bench-")), corpus)
    bench.base = {
        "batch_size": args.batch_size,
        "max_len": args.max_len,
        "lr": args.lr,
        "temperature": args.temperature,
        "m": args.m,
        "seed": args.seed,
        "sts_dir": sts_dir,
        "threads": args.threads,
    }
    try:
        if only & {"train", "loss"}:  # one sample for both, as long as the longer needs
            n = args.batch_size * max(
                args.train_steps if "train" in only else 0, args.loss_steps if "loss" in only else 0
            )
            print(f"sampling {n} sentences from {corpus} (seed {args.seed}) ...", flush=True)
            sample = sample_corpus(corpus, n, args.seed, bench.work / "sample.txt")
            bench.base["sample_file"] = str(sample)
        if "train" in only:
            report.update(train_speed.run(bench, train_sides))
        if "loss" in only:
            report.update(focal_overhead.run(bench))
        if "quality" in only:
            report.update(quality.run(bench, quality_sides))
        if "eval" in only:
            report.update(eval_speed.run(bench, eval_tasks))
    finally:
        if not args.keep_work:
            shutil.rmtree(bench.work, ignore_errors=True)
        else:
            print(f"worker files kept in {bench.work}")
    report["load_end"] = load_average()
    report["wall_seconds"] = time.perf_counter() - started
    report["finished"] = time.strftime("%Y-%m-%d %H:%M")
    text = markdown(report)
    write_results(report, text, args.out_json, args.out_md)
    print()
    print(text)
    print(f"\nwall {report['wall_seconds']:.0f} s; wrote {args.out_json} and {args.out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
