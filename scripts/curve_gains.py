"""How much each run's STS-B dev score still rose at the end of training, read against the learning rate.

For every dev curve in ``metrics/curves/dev`` (one JSON list of ``{"step", "stsb_dev_spearman"}`` per
run): the best and last step, the dev gain over the last ``--window`` steps, the gain over the window
before it, and the mean learning rate of the last window as a fraction of the peak (the schedule decays
linearly from the peak to 0 over the run, no warm-up, as ``core/training.py``). Prints a Markdown table.

    python scripts/curve_gains.py [--root .] [--window 128]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def gains(curve: list[dict], window: int) -> dict:
    """Best / last step and the dev gains over the last two windows of one curve."""
    by_step = {int(p["step"]): float(p["stsb_dev_spearman"]) for p in curve}
    steps = sorted(by_step)
    last = steps[-1]

    def at(step: int) -> float | None:
        return by_step.get(step)

    best = max((s for s in steps if s > 0), key=lambda s: by_step[s])
    lo, mid = last - window, last - 2 * window
    gain = None if at(lo) is None else by_step[last] - by_step[lo]
    before = None if at(lo) is None or at(mid) is None else by_step[lo] - by_step[mid]
    # linear decay lr(t) = peak * (1 - t / total): the mean over the steps (lo, last]
    total = last
    mean_lr = sum(1 - t / total for t in range(max(lo, 0), last)) / max(1, last - max(lo, 0))
    return {
        "best_step": best,
        "last_step": last,
        "best_is_last": best == last,
        "gain_last_window": gain,
        "gain_window_before": before,
        "mean_lr_fraction_last_window": mean_lr,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="a checkout that has run the pipeline")
    ap.add_argument("--window", type=int, default=128, help="steps per window (default 128)")
    args = ap.parse_args()
    files = sorted((Path(args.root) / "metrics" / "curves" / "dev").glob("*.json"))
    if not files:
        raise SystemExit(f"no dev curves under {Path(args.root) / 'metrics/curves/dev'}")
    w = args.window
    print(
        f"| run | best step | last step | dev gain, last {w} steps | dev gain, the {w} before | "
        f"mean lr over the last {w} (x peak) |"
    )
    print("|---|---:|---:|---:|---:|---:|")

    def fmt(x: float | None) -> str:
        return "–" if x is None else f"{x:+.2f}"

    for f in files:
        g = gains(json.loads(f.read_text()), w)
        print(
            f"| {f.stem} | {g['best_step']} | {g['last_step']} | {fmt(g['gain_last_window'])} | "
            f"{fmt(g['gain_window_before'])} | {g['mean_lr_fraction_last_window']:.3f} |"
        )


if __name__ == "__main__":
    main()
