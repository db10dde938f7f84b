"""focalcse: a reproducible pipeline for Focal-InfoNCE vs SimCSE InfoNCE sentence embeddings."""

from __future__ import annotations

__version__ = "0.1.0"
