"""Quality: STS-B dev after a short training run, two training sides over several seeds.

Each seed draws its own ``batch_size x quality_steps`` sample from the corpus and trains both sides
(``--quality-sides``, two of the training benchmark's sides, default ``ours-bf16,st-fp32``) on it with
the training benchmark's workers and settings; the side order alternates from seed to seed. Reports
each side's STS-B dev per seed, mean +- std, and a paired t-test (first side - second side).

With one side, no test: its per-seed scores are what ``quality_pair.py`` pairs with another code's
run of the same side and seeds (a change to our trainer cannot be a second side of one run).

Opt-in: ``bench.py --only quality`` (not in the default ``--only``).
"""

from __future__ import annotations

from typing import Any

from common import Bench, sample_corpus, split_list
from train_speed import run_side

NAME = "quality"


def run(bench: Bench, sides: list[str]) -> dict[str, Any]:
    """One run per side and seed (``--quality-seeds``), ``--quality-steps`` steps each, STS-B dev after."""
    args = bench.args
    seeds = [int(x) for x in split_list(args.quality_seeds)]
    dev: dict[str, list[float]] = {side: [] for side in sides}
    for i, seed in enumerate(seeds):
        sample = sample_corpus(
            bench.corpus, args.batch_size * args.quality_steps, seed, bench.work / f"sample-seed{seed}.txt"
        )
        for side in sides if i % 2 == 0 else sides[::-1]:
            print(f"quality {side} seed {seed} ({args.quality_steps} steps) ...", flush=True)
            r = run_side(
                bench,
                side,
                f"quality-{side}-{seed}",
                seed=seed,
                sample_file=str(sample),
                steps=args.quality_steps,
                warmup=min(args.train_warmup, max(args.quality_steps - 2, 0)),
                dev=True,
            )
            dev[side].append(r["stsb_dev_after"])
            print(f"  {side}: STS-B dev {r['stsb_dev_after']:.2f}", flush=True)
    return {"quality": summarise(dev, seeds, args.quality_steps)}


def summarise(dev: dict[str, list[float]], seeds: list[int], steps: int) -> dict[str, Any]:
    """STS-B dev after ``steps`` per side and seed, and a paired t-test (first side - second side;
    none with one side)."""
    from focalcse.eval.stats import paired_ttest, summarize

    out: dict[str, Any] = {
        "seeds": seeds,
        "steps": steps,
        "dev": dev,
        "summary": {side: summarize(v).to_dict() for side, v in dev.items()},
    }
    if len(dev) == 2:
        first, second = list(dev)
        out["test"] = {
            "treatment": first,
            "baseline": second,
            **paired_ttest(dev[first], dev[second]).to_dict(),
        }
    return out


def markdown(qu: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """RESULTS.md's (QUALITY.md's) quality section (``qu`` = ``report['quality']``)."""
    cfg = report["config"]
    t = qu.get("test")
    lines = [
        f"## Quality: STS-B dev after {qu['steps']} steps, seeds {', '.join(map(str, qu['seeds']))}",
        "",
        f"Each seed draws its own {qu['steps'] * cfg['batch_size']}-sentence sample and trains both sides on it "
        f"(batch {cfg['batch_size']}, max_len {cfg['max_len']}, InfoNCE tau={cfg['temperature']}, lr {cfg['lr']}, "
        "the training benchmark's pooler; STS-B dev scored in fp32 with the same evaluator).",
        "",
        "| side | " + " | ".join(f"seed {x}" for x in qu["seeds"]) + " | mean ± std |",
        "|---|" + "---:|" * (len(qu["seeds"]) + 1),
    ]
    for side, values in qu["dev"].items():
        sm = qu["summary"][side]
        lines.append(
            f"| {side} | "
            + " | ".join(f"{v:.2f}" for v in values)
            + f" | {sm['mean']:.2f} ± {sm['std']:.2f} |"
        )
    if t is None:
        return [*lines, ""]
    return lines + [
        "",
        f"{t['treatment']} - {t['baseline']}: {t['mean_diff']:+.2f} (95% CI {t['ci_low']:+.2f} to {t['ci_high']:+.2f}, "
        f"paired t-test p = {t['p_value']:.3g}, n = {t['n']}).",
        "",
    ]
