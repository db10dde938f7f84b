"""Pair two codes' quality runs seed by seed: STS-B dev of one side after a change against before it.

A change to our own trainer cannot be the second side of one ``bench.py --only quality`` run (both
sides run the same checkout), so each code runs the side on the same seeds (``--quality-sides
ours-bf16``; each seed draws the same sample whatever the code) and this script pairs them::

    python benchmarks/quality_pair.py \\
        --treatment benchmarks/quality_levers.json:ours-bf16 \\
        --baseline benchmarks/quality_unpad.json:ours-bf16 \\
        --baseline benchmarks/quality_unpad_6-10.json:ours-bf16 \\
        --baseline benchmarks/quality_unpad_11-20.json:ours-bf16 \\
        --what "after the step levers (363e1df) against before (45e09cc)" \\
        --out-json benchmarks/quality_levers_20.json

Each ``FILE:SIDE`` gives that file's per-seed scores of that side; several files of one role are
joined by seed (a seed in two of them is an error). The seeds both roles have are paired; the test is
scipy's paired t (``focalcse.eval.stats.paired_ttest``) with its 95 % confidence interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def scores(specs: Sequence[str]) -> tuple[dict[int, float], list[str]]:
    """Seed -> STS-B dev from ``FILE:SIDE`` specs; and the files read."""
    out: dict[int, float] = {}
    files = []
    for spec in specs:
        path, _, side = spec.rpartition(":")
        if not path or not side:
            raise SystemExit(f"{spec!r}: expected FILE:SIDE")
        quality = json.loads(Path(path).read_text())["quality"]
        if side not in quality["dev"]:
            raise SystemExit(f"{spec!r}: {path} has no side {side!r} (it has {', '.join(quality['dev'])})")
        for seed, value in zip(quality["seeds"], quality["dev"][side], strict=True):
            if seed in out:
                raise SystemExit(f"{spec!r}: seed {seed} is already given by another file")
            out[seed] = value
        files.append(Path(path).name)
    return out, files


def pair(treatment: Sequence[str], baseline: Sequence[str], what: str) -> dict[str, Any]:
    from focalcse.eval.stats import paired_ttest, summarize

    t, t_files = scores(treatment)
    b, b_files = scores(baseline)
    seeds = sorted(set(t) & set(b))
    if len(seeds) < 2:
        raise SystemExit(f"only {len(seeds)} seed(s) in both: {sorted(t)} against {sorted(b)}")
    dev = {"treatment": [t[s] for s in seeds], "baseline": [b[s] for s in seeds]}
    return {
        "what": what,
        "treatment": list(treatment),
        "baseline": list(baseline),
        "sources": t_files + b_files,
        "seeds": seeds,
        "dev": dev,
        "summary": {role: summarize(v).to_dict() for role, v in dev.items()},
        "test": {
            "treatment": "treatment",
            "baseline": "baseline",
            **paired_ttest(dev["treatment"], dev["baseline"]).to_dict(),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--treatment", action="append", required=True, metavar="FILE:SIDE")
    ap.add_argument("--baseline", action="append", required=True, metavar="FILE:SIDE")
    ap.add_argument("--what", required=True, help="what is compared (recorded)")
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args(argv)
    report = pair(args.treatment, args.baseline, args.what)
    text = json.dumps(report, indent=2) + "\n"
    if args.out_json:
        Path(args.out_json).write_text(text)
    t = report["test"]
    print(
        f"{args.what}: {t['mean_diff']:+.3f} (95 % CI {t['ci_low']:+.3f} to {t['ci_high']:+.3f}, "
        f"paired t p = {t['p_value']:.3g}, n = {t['n']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
