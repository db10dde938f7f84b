"""Step ``check``: everything checkable before work, checked before DVC removes any output.

DVC deletes a stage's outputs just before it runs the stage's command, so a stage that validates its
own inputs has already lost its previous outputs when it refuses them. ``check`` is the first stage
and every other stage depends on its output: a bad params value (any section, the sweep, the
ablations), an unreadable or malformed source (the corpus, every STS task and split) or an offline
machine without a mirror stops ``dvc repro`` here, before any other stage is touched. Its output is
``persist``-ed (DVC never deletes it) and its content is constant, so a passing check leaves the hash
the other stages depend on unchanged: editing a ``report.*`` param reruns ``check`` (a few seconds)
and ``report``, nothing else.
"""

from __future__ import annotations

from typing import Any

from focalcse.atomic import write_json
from focalcse.config import Params
from focalcse.data.corpus import read_sentences, sample_sentences
from focalcse.data.sources import corpus_path, senteval_dir
from focalcse.data.tasks import EXTRA_SPLITS, TASKS, read_split
from focalcse.layout import Layout

# The check file's whole content: the same on every machine and for every params value.
CHECKED = {
    "checked_by": "the check stage (focalcse.steps.check)",
    "what": "params (every section, the sweep, the ablations) and the corpus and STS sources",
    "note": "constant content: a passing check changes no downstream dependency",
}


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Check the sources ``params`` names (``params`` itself was validated when loaded): the corpus is
    readable and has ``data.num_sentences`` sentences, every STS task and extra split parses with its
    expected counts. Raises the data layer's one-line errors; writes :data:`CHECKED` on success."""
    mirror = params.data.mirror or None
    corpus = corpus_path(mirror)  # downloads once without a mirror; one line when that fails
    sentences = read_sentences(corpus)
    # the sample step's own draw, so its "corpus has only N sentences" check is the one applied here
    sample_sentences(sentences, params.data.num_sentences, params.data.seed)
    root = senteval_dir(mirror)
    splits = {key: len(read_split(root, key)) for key in (*TASKS, *EXTRA_SPLITS)}
    write_json(layout.check_file, CHECKED)
    return {"corpus_sentences": len(sentences), "sts_pairs": splits}
