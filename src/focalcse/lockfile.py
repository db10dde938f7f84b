"""The one reader of ``dvc.lock``: its stage entries, and what they say about code and outputs.

A lock is parsed once per content version (its path, mtime and size: an edit re-reads it), with
libyaml's loader where PyYAML has it (a 240 kB lock takes ~1 s in pure Python).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CODE_STAGES = ("train", "evaluate")  # the stages whose code decides a model's bytes and its scores
CODE_ROOTS = ("src/", "stages/")


@functools.lru_cache(maxsize=16)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=loader) or {}


def lock_stages(path: str | Path) -> dict[str, Any] | None:
    """The ``stages`` entries of the ``dvc.lock`` at ``path`` (None when there is none); the cached
    parse itself, so callers only read it."""
    path = Path(path)
    if not path.is_file():
        return None
    st = path.stat()
    return _parsed(str(path.resolve()), st.st_mtime_ns, st.st_size).get("stages") or {}


def code_md5s(stages: dict[str, Any], names: Iterable[str] = CODE_STAGES) -> dict[str, str]:
    """Every code file the items of the stages ``names`` depend on, with the md5 the lock's ``stages``
    record (paths as from the repository root: a set folder's ``../../src/...`` is ``src/...``); a file
    recorded at two contents within one lock (items of two code versions) is ``"mixed"``."""
    names = tuple(names)
    md5s: dict[str, str] = {}
    for stage, entry in stages.items():
        if stage.split("@", 1)[0] not in names:
            continue
        for dep in entry.get("deps") or []:
            path = dep["path"]
            while path.startswith("../"):
                path = path[3:]
            if path.startswith(CODE_ROOTS):
                seen = md5s.setdefault(path, dep["md5"])
                if seen != dep["md5"]:
                    md5s[path] = "mixed"
    return md5s


def code_fingerprint(stages: dict[str, Any] | None) -> str | None:
    """One short hash of the train and evaluate code a lock records (its files and their md5s): equal
    fingerprints mean the same code decided the models and scores. None without a lock."""
    if stages is None:
        return None
    md5s = code_md5s(stages)
    if not md5s:
        return None
    text = "\n".join(f"{p} {m}" for p, m in sorted(md5s.items()))
    return hashlib.md5(text.encode()).hexdigest()[:12]


def model_md5s(stages: dict[str, Any]) -> dict[str, str]:
    """Each train item with the md5 of its model folder, as the lock's ``stages`` record it."""
    return {
        stage: out["md5"]
        for stage, entry in stages.items()
        if stage.startswith("train@")
        for out in entry.get("outs") or []
        if out["path"].startswith("models/")
    }


__all__ = ["CODE_ROOTS", "CODE_STAGES", "code_fingerprint", "code_md5s", "lock_stages", "model_md5s"]
