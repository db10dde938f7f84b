"""DVC stage `sample`: a seeded sample of training sentences from the corpus source or mirror."""

from __future__ import annotations

from _common import LAYOUT, params

from focalcse.steps import sample

if __name__ == "__main__":
    info = sample.run(params(), LAYOUT)
    print(f"sampled {info['num_sentences']} sentences (seed {info['seed']}) from {info['source']}")
