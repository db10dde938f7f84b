"""DVC stages `ablate_tau@<τ>` / `ablate_m@<m>`: one Table 4 / Table 5 item (train, score STS-B test)."""

from __future__ import annotations

import argparse

from _common import LAYOUT, item_lock, params

from focalcse.layout import ABLATION_KINDS
from focalcse.steps import ablate

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=sorted(ABLATION_KINDS))
    parser.add_argument("value", help="the swept value, as dvc.yaml renders it (names the output file)")
    args = parser.parse_args()
    with item_lock(f"ablate_{args.kind}@{args.value}"):
        out = ablate.run(params(), LAYOUT, args.kind, args.value)
    print(
        f"{args.kind}={args.value}: STS-B test {out['STSBenchmark']:.2f} (best dev {out['stsb_dev_best']:.2f})"
    )
