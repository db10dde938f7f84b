"""Step ``pretrain_generator``: DiffCSE's MLM generator for one backbone, or a record of why none is trained.

The generator is trained (:func:`focalcse.core.frameworks.generator.pretrain_mlm`) only when the sweep
trains DiffCSE and ``frameworks.diffcse.generator`` is ``""``. Otherwise the item's folder holds only
``generator.json`` saying so; that branch imports no torch, since the stage runs in every parameter set.
:func:`generator_source` is what DiffCSE training loads as its generator.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from focalcse.atomic import staged_dir, write_json
from focalcse.config import Params
from focalcse.layout import Layout
from focalcse.provenance import git_commit, versions

RECORD_FILE = "generator.json"  # = focalcse.core.frameworks.generator.RECORD_FILE (that module imports torch)


def needs_pretraining(params: Params) -> bool:
    """True when the sweep trains DiffCSE with the stage's own generator (``frameworks.diffcse.generator: ""``)."""
    return "diffcse" in params.sweep.frameworks and params.frameworks.diffcse.generator == ""


def run(params: Params, layout: Layout, backbone: str, progress: bool = True) -> dict[str, Any]:
    """Train ``backbone``'s generator into ``layout.generator_dir(backbone)``, or write there only a
    ``generator.json`` saying why none is trained (``pretrained: false``). Returns the record."""
    out_dir = layout.generator_dir(backbone)
    configured = params.frameworks.diffcse.generator
    if needs_pretraining(params):
        from focalcse.core.backbones import resolve_backbone
        from focalcse.core.frameworks.generator import pretrain_mlm
        from focalcse.provenance import provenance

        source = params.backbone_source(backbone)
        cfg = params.frameworks.diffcse.pretrain
        identity = {
            "backbone": backbone,
            "backbone_source": source,
        }  # the portable name, not the resolved path
        return pretrain_mlm(
            layout.corpus_file,
            resolve_backbone(source),
            cfg,
            out_dir,
            progress=progress,
            extra={**identity, "meta": provenance(**identity, generator_config=asdict(cfg))},
        )
    if "diffcse" not in params.sweep.frameworks:
        reason = "diffcse is not in sweep.frameworks, so no generator is needed"
    else:
        reason = f"frameworks.diffcse.generator names the generator ({configured}), so none is trained"
    record: dict[str, Any] = {
        "pretrained": False,
        "generator": configured,
        "reason": reason,
        "backbone": backbone,
        # provenance() without its hardware block, which imports torch (nothing was computed here)
        "meta": {"git_commit": git_commit(), "versions": versions()},
    }
    with staged_dir(out_dir) as tmp:  # the whole folder: a previously trained model does not linger
        write_json(tmp / RECORD_FILE, record)
    return record


def generator_source(params: Params, layout: Layout, backbone: str) -> str:
    """What DiffCSE training loads as ``backbone``'s generator (:func:`focalcse.core.frameworks.diffcse.generator_source`
    on this layout's ``pretrain_generator`` folder)."""
    from focalcse.core.frameworks.diffcse import generator_source as source_of

    return source_of(params.frameworks.diffcse, layout.generator_dir(backbone), backbone)


__all__ = ["RECORD_FILE", "generator_source", "needs_pretraining", "run"]
