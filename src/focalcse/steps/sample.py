"""Step ``sample``: a seeded sample of training sentences from the corpus source or mirror."""

from __future__ import annotations

from typing import Any

from focalcse.atomic import atomic_write
from focalcse.config import Params
from focalcse.data.corpus import read_sentences, sample_sentences
from focalcse.data.sources import corpus_path
from focalcse.layout import Layout


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """``data.num_sentences`` corpus sentences (seed ``data.seed``) -> ``layout.corpus_file``, one a line."""
    source = corpus_path(params.data.mirror or None)
    sentences = sample_sentences(read_sentences(source), params.data.num_sentences, params.data.seed)
    if any("\n" in s for s in sentences):  # pragma: no cover - read_sentences splits on lines
        raise ValueError("sampled sentence contains a newline")
    atomic_write(layout.corpus_file, "\n".join(sentences) + "\n")
    return {"source": str(source), "num_sentences": len(sentences), "seed": params.data.seed}
