"""Step ``check``: everything checkable before work, checked before DVC removes any output.

DVC deletes a stage's outputs just before it runs the stage's command, so a stage that validates its
own inputs has already lost its previous outputs when it refuses them. ``check`` is the first stage
and every other stage depends on its output: a bad params value (any section, the sweep, the
ablations), an unreadable or malformed source (the corpus, every STS task and split) or an offline
machine without a mirror stops ``dvc repro`` here, before any other stage is touched. Its output is
``persist``-ed (DVC never deletes it) and its content is constant, so a passing check leaves the hash
the other stages depend on unchanged: editing a ``report.*`` param reruns ``check`` (a few seconds)
and ``report``, nothing else.

After the checks pass, ``check`` also removes the outputs of items a params edit took out of the
sweep or the ablation lists (models, their work folders, metrics and curves): DVC forgets a matrix
item that leaves ``dvc.yaml`` but not its files, and the ``significance`` and ``report`` stages depend
on whole ``metrics/`` folders, which must hold the current items only. The metrics files are in git
and the models in DVC's cache, so a removed item can be brought back from there.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

from focalcse.atomic import write_json
from focalcse.config import BASE_FRAMEWORK, FRAMEWORKS, Params
from focalcse.data.corpus import read_sentences, sample_sentences
from focalcse.data.sources import corpus_path, senteval_dir
from focalcse.data.tasks import EXTRA_SPLITS, TASKS, read_split
from focalcse.layout import ABLATION_KINDS, COMPANION_KEYS, Layout, companion_file, safe_name

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
    removed = prune_stale(params, layout)
    write_json(layout.check_file, CHECKED)
    return {"corpus_sentences": len(sentences), "sts_pairs": splits, "removed": [str(p) for p in removed]}


def expected_outputs(params: Params, layout: Layout) -> set[Path]:
    """Every per-item output path of the current sweep and ablation lists (with companions)."""
    sw, out = params.sweep, set()
    for fw, b, loss, seed in params.framework_items():
        it = layout.train_item(b, loss, seed, fw)
        ev = layout.eval_metrics(b, loss, seed, fw)
        out |= {it.model_dir, *it.json_outputs, ev, *(companion_file(ev, k) for k in COMPANION_KEYS)}
    for b in sw.backbones:
        for loss in sw.losses:
            hn = layout.hard_negatives_file(b, loss)
            out |= {hn, companion_file(hn, "meta")}
    return out


_SEED_ENTRY = re.compile(r"^\.?seed(\d+)(\..+)?$")  # seed3, .seed3.work, .seed3.old, ...


def _stale_models(params: Params, layout: Layout) -> list[Path]:
    """Model folders (and their ``.seedN.*`` work / aside folders) of items outside the sweep:
    ``models/<backbone>/<loss>/seed<k>`` (SimCSE) and ``models/<framework>/<backbone>/<loss>/seed<k>``."""
    wanted = {(fw, safe_name(b), loss, seed) for fw, b, loss, seed in params.framework_items()}
    others = [f for f in FRAMEWORKS if f != BASE_FRAMEWORK]
    stale = []
    if not layout.models_dir.is_dir():
        return stale
    entries = [(BASE_FRAMEWORK, e) for e in layout.models_dir.glob("*/*/*") if e.parts[-3] not in others]
    entries += [(fw, e) for fw in others for e in (layout.models_dir / fw).glob("*/*/*")]
    for fw, entry in sorted(entries):
        match = _SEED_ENTRY.match(entry.name)
        if (
            match
            and entry.is_dir()
            and (fw, entry.parent.parent.name, entry.parent.name, int(match[1])) not in wanted
        ):
            stale.append(entry)
    return stale


def _stale_ablation(params: Params, layout: Layout) -> list[Path]:
    """Ablation files (``<kind>-<value>[.<companion>].json``) of values no longer listed."""
    stale = []
    for path in sorted(layout.ablation_dir.glob("*.json")) if layout.ablation_dir.is_dir() else ():
        kind, _, rest = path.name.partition("-")
        value = rest.split(".json")[0]
        for key in COMPANION_KEYS:
            value = value.removesuffix(f".{key}")
        try:
            listed = kind in ABLATION_KINDS and any(
                math.isclose(float(value), v) for v in params.ablation_values(kind)
            )
        except ValueError:
            listed = False
        if not listed:
            stale.append(path)
    return stale


def prune_stale(params: Params, layout: Layout) -> list[Path]:
    """Remove the outputs of items outside the current sweep / ablation lists; returns what went.

    Only files and folders named the way the stages name their outputs are touched: model folders
    ``models/<backbone>/<loss>/seed<k>`` (and ``.seed<k>.*``), the JSON files of ``metrics/train``,
    ``metrics/eval``, ``metrics/curves/{loss,dev}``, ``metrics/hard_negatives`` and ``metrics/ablation``.
    """
    expected = expected_outputs(params, layout)
    folders = [
        layout.train_metrics_dir,
        layout.eval_dir,
        layout.curves_dir / "loss",
        layout.curves_dir / "dev",
        layout.hard_negatives_dir,
    ]
    stale = [p for d in folders if d.is_dir() for p in sorted(d.glob("*.json")) if p not in expected]
    stale += _stale_ablation(params, layout) + _stale_models(params, layout)
    for path in stale:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for folder in {p.parent for p in stale if layout.models_dir in p.parents}:
        for empty in (folder, folder.parent):  # models/[<framework>/]<b>/<loss>, then <b>, once empty
            if empty.is_dir() and not any(p for p in empty.iterdir() if p.name != ".gitignore"):
                shutil.rmtree(empty)
    if stale:
        names = ", ".join(str(p) for p in stale[:6]) + (
            f" and {len(stale) - 6} more" if len(stale) > 6 else ""
        )
        print(f"check: removed {len(stale)} output(s) of items no longer in the sweep: {names}")
    return stale
