"""DVC stage `pretrain_generator@<framework>-<backbone>`: the MLM generator of one framework item.

Trains a small MLM on the training corpus with the backbone's tokenizer when the framework needs a
generator (its ``SPEC``) and its settings name none (``generator: ""``); otherwise writes only
``generator.json`` saying why not (fast, no torch)::

    python stages/pretrain_generator.py diffcse all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import time

from _common import LAYOUT, params

from focalcse.steps import pretrain_generator

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("framework", help="a registered framework (sweep.frameworks)")
    parser.add_argument("backbone")
    args = parser.parse_args()
    start = time.perf_counter()
    record = pretrain_generator.run(params(), LAYOUT, args.framework, args.backbone)
    out = LAYOUT.generator_dir(args.framework, args.backbone)
    took = time.perf_counter() - start
    if record["pretrained"]:
        print(
            f"pretrain_generator {args.framework}-{args.backbone}: MLM trained {record['steps']} steps (final loss "
            f"{record['final_loss']:.3f}) -> {out} in {took:.0f}s"
        )
    else:
        print(
            f"pretrain_generator {args.framework}-{args.backbone}: {out / pretrain_generator.RECORD_FILE} ({record['reason']}) in {took:.1f}s"
        )
