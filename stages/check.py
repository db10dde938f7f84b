"""DVC stage `check`: params and sources checked before any stage that could lose its outputs runs."""

from __future__ import annotations

from _common import LAYOUT, params

from focalcse.steps import check

if __name__ == "__main__":
    info = check.run(params(), LAYOUT)
    pairs = sum(info["sts_pairs"].values())
    for name, where in info["backbones"].items():
        print(f"check: backbone {name}: {where}")
    print(
        f"check: params valid; corpus {info['corpus_sentences']} sentences; STS {pairs} pairs in {len(info['sts_pairs'])} splits"
    )
