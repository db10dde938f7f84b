"""Step ``pretrain_generator``: the MLM generator of one (framework, backbone) item, or a record of why
none is trained.

A framework whose registry ``SPEC`` lists ``"generator"`` in ``needs`` (DiffCSE) gets a generator
trained here (:func:`focalcse.core.generator.pretrain_mlm`, on the framework's ``pretrain`` settings) when its
settings' ``generator`` is ``""``. Every other item's folder holds only ``generator.json`` saying why none is
trained; that branch imports no torch. Each framework's items depend on their own item only
(``models/generators/<framework>/<backbone>``), so a framework that needs no generator never waits for
or reruns after another's. That folder holds only what the inputs decide (a rerun leaves it
byte-identical); the commit, versions, hardware and timings go to the item's ``.meta.json`` under
``metrics/generators/``, which nothing depends on. :func:`generator_source` is what training loads as
the generator.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from focalcse.atomic import staged_dir, write_json
from focalcse.config import Params
from focalcse.core.frameworks import framework_module, framework_spec
from focalcse.layout import GENERATOR_RECORD, Layout
from focalcse.provenance import git_commit, versions

RECORD_FILE = GENERATOR_RECORD


def needs_pretraining(params: Params, framework: str) -> bool:
    """True when ``framework`` needs a generator and its settings name none (``generator: ""``)."""
    settings = params.frameworks.settings(framework)
    return "generator" in framework_spec(framework).needs and settings.generator == ""


def run(
    params: Params, layout: Layout, framework: str, backbone: str, progress: bool = True
) -> dict[str, Any]:
    """Train the generator of ``framework`` for ``backbone`` into ``layout.generator_dir(framework,
    backbone)``, or write there only a ``generator.json`` saying why none is trained (``pretrained:
    false``), and its provenance to ``layout.generator_meta_file``. Returns the record with ``meta``
    (and, when trained, ``train_seconds`` / ``wall_seconds``) added: what the two files hold together."""
    out_dir = layout.generator_dir(framework, backbone)
    meta_file = layout.generator_meta_file(framework, backbone)
    settings = params.frameworks.settings(framework)
    if needs_pretraining(params, framework):
        from focalcse.core.backbones import resolve_backbone
        from focalcse.core.generator import pretrain_mlm
        from focalcse.provenance import provenance

        source = params.backbone_source(backbone)
        cfg = settings.pretrain
        identity = {
            "backbone": backbone,
            "backbone_source": source,
        }  # the portable name, not the resolved path
        record = pretrain_mlm(
            layout.corpus_file, resolve_backbone(source), cfg, out_dir, progress=progress, extra=identity
        )
        meta = {
            "meta": provenance(**identity, generator_config=asdict(cfg)),
            "train_seconds": record["train_seconds"],
            "wall_seconds": record["wall_seconds"],
        }
        write_json(meta_file, meta)
        return {**record, **meta}
    if "generator" not in framework_spec(framework).needs:
        configured, reason = "", f"{framework} needs no generator"
    else:
        configured = settings.generator
        reason = f"frameworks.{framework}.generator names the generator ({configured}), so none is trained"
    record: dict[str, Any] = {
        "pretrained": False,
        "generator": configured,
        "reason": reason,
        "framework": framework,
        "backbone": backbone,
    }
    with staged_dir(out_dir) as tmp:  # the whole folder: a previously trained model does not linger
        write_json(tmp / RECORD_FILE, record)
    # provenance() without its hardware block, which imports torch (nothing was computed here)
    meta = {"meta": {"git_commit": git_commit(), "versions": versions()}}
    write_json(meta_file, meta)
    return {**record, **meta}


def generator_source(params: Params, layout: Layout, framework: str, backbone: str) -> str:
    """What ``framework``'s training loads as ``backbone``'s generator (its module's
    ``generator_source`` on this layout's ``pretrain_generator`` folder)."""
    source_of = framework_module(framework).generator_source
    return source_of(
        params.frameworks.settings(framework), layout.generator_dir(framework, backbone), backbone
    )


__all__ = ["RECORD_FILE", "generator_source", "needs_pretraining", "run"]
