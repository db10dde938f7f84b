"""The unlabeled training corpus: read with checks, sample with a seed."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from focalcse.errors import CorpusError  # re-exported: importers find it here


def read_sentences(path: str | os.PathLike) -> list[str]:
    """Non-blank lines of a ``.txt`` or ``.txt.gz`` corpus, one sentence a line.

    Raises :class:`CorpusError` for a missing or empty file, invalid UTF-8 (naming the line) or a file
    with no non-blank line.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: corpus file not found")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise CorpusError(f"{path}: cannot read ({err})") from err
    sentences = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            raise CorpusError(f"{path}:{lineno}: invalid UTF-8 ({err.reason} at byte {err.start})") from err
        if text:
            sentences.append(text)
    if not sentences:
        raise CorpusError(f"{path}: no non-blank sentence (empty or all blank)")
    return sentences


def check_sample_size(available: int, n: int) -> None:
    """The sample's refusals: ``n`` must be in ``[1, available]`` (the corpus's non-blank sentences).
    :func:`sample_sentences` and the check stage (on the recorded count) both apply it."""
    if n > available:
        raise CorpusError(f"data.num_sentences={n} but the corpus has only {available} non-blank sentences")
    if n < 1:
        raise CorpusError(f"data.num_sentences={n}: expected >= 1")


def sample_sentences(sentences: list[str], n: int, seed: int) -> list[str]:
    """``n`` sentences drawn without replacement with ``numpy.random.default_rng(seed)``, kept in corpus
    order (training shuffles per epoch with its own seed)."""
    check_sample_size(len(sentences), n)
    idx = np.sort(np.random.default_rng(seed).choice(len(sentences), size=n, replace=False))
    return [sentences[i] for i in idx]
