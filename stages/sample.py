"""DVC stage `sample`: a seeded sample of training sentences from the corpus source or mirror."""

from __future__ import annotations

from _common import params

from focalcse.pipeline import run_sample

if __name__ == "__main__":
    info = run_sample(params(), "data/corpus/train.txt")
    print(f"sampled {info['num_sentences']} sentences (seed {info['seed']}) from {info['source']}")
