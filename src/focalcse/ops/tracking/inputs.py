"""What a run read: the training sample and the STS data as MLflow dataset inputs, by content digest."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from focalcse.layout import Layout

# ---------------------------------------------------------------- what a run read
DATASET_CONTEXT_TAG = "mlflow.data.context"  # MLflow's input tag for a dataset's role


def _file_digests(path: Path) -> tuple[str, str, int, int]:
    """``(md5, sha256, bytes, lines)`` of a file's bytes, in one read."""
    md5, sha, size, lines = hashlib.md5(usedforsecurity=False), hashlib.sha256(), 0, 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            md5.update(chunk)
            sha.update(chunk)
            size += len(chunk)
            lines += chunk.count(b"\n")
    return md5.hexdigest(), sha.hexdigest(), size, lines


def dvc_md5(path: str | os.PathLike) -> str:
    """DVC's content hash of a file or folder, as ``dvc.lock`` records it: the md5 of a file's bytes;
    for a folder, the md5 of its listing (``[{"md5", "relpath"}]`` sorted by path, JSON with sorted
    keys) followed by ``.dir``."""
    path = Path(path)
    if path.is_file():
        return _file_digests(path)[0]
    return _dir_md5({f.relative_to(path).as_posix(): _file_digests(f)[0] for f in _files(path)})


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _dir_md5(md5s: dict[str, str]) -> str:
    """DVC's hash of a folder from its files' md5s (keyed by relative POSIX path)."""
    listing = [{"md5": md5s[rel], "relpath": rel} for rel in sorted(md5s)]
    blob = json.dumps(listing, sort_keys=True).encode("utf-8")
    return hashlib.md5(blob, usedforsecurity=False).hexdigest() + ".dir"


def _dataset(name: str, digest: str, source: Any, profile: dict[str, Any], context: str) -> dict[str, Any]:
    """One dataset input as a queue record's entry: an ``mlflow.data`` ``MetaDataset``'s fields, a
    JSON profile and the MLflow context tag."""
    from mlflow.data.meta_dataset import MetaDataset

    fields = MetaDataset(source, name=name, digest=digest).to_dict()
    return {**fields, "profile": json.dumps(profile, sort_keys=True), "context": context}


def _local_source(path: Path) -> Any:
    from mlflow.data.dataset_source_registry import get_dataset_source_from_json

    return get_dataset_source_from_json(json.dumps({"uri": str(path.resolve())}), source_type="local")


def input_datasets(layout: Layout) -> list[dict[str, Any]]:
    """The train item's inputs as MLflow datasets: the training sample (``layout.corpus_file``,
    context ``training``) and the prepared STS data (``layout.sts_dir``, context ``validation``: the
    STS-B dev split picks the best step). Each is named by its path in the checkout; its digest is
    DVC's md5 (MLflow caps digests at 36 characters, too short for a sha256), its profile holds the
    sha256 of every file. The corpus's source is the sample file; the STS data's is the URL it was
    downloaded from (its ``manifest.json``), or the folder when it came from a mirror. What is not
    there (no data yet) is left out."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource

    def rel(path: Path) -> str:
        try:
            return path.resolve().relative_to(Path(layout.root).resolve()).as_posix()
        except ValueError:
            return path.as_posix()

    out = []
    corpus = Path(layout.corpus_file)
    if corpus.is_file():
        md5, sha, size, lines = _file_digests(corpus)
        profile = {
            "sha256": sha,
            "md5": md5,
            "bytes": size,
            "sentences": lines,
            "made_by": "DVC stage sample",
        }
        out.append(_dataset(rel(corpus), md5, _local_source(corpus), profile, "training"))
    sts = Path(layout.sts_dir)
    if sts.is_dir():
        files = {}
        for f in _files(sts):
            md5, sha, size, _ = _file_digests(f)
            files[f.relative_to(sts).as_posix()] = {"sha256": sha, "md5": md5, "bytes": size}
        digest = _dir_md5({k: v["md5"] for k, v in files.items()})
        origin = ""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            origin = str(json.loads((sts / "manifest.json").read_text()).get("source") or "")
        if origin.startswith(("http://", "https://")):
            source = HTTPDatasetSource(origin)
        else:
            source = _local_source(sts)
        profile = {"files": files, "origin": origin or None, "made_by": "DVC stage prepare_sts"}
        out.append(_dataset(rel(sts), digest, source, profile, "validation"))
    return out


def _log_inputs(client: Any, run_id: str, datasets: list[dict[str, Any]]) -> None:
    """Log queued dataset entries as the run's inputs (MLflow keeps one per name and digest, so
    sending them again adds nothing)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = [
        DatasetInput(
            Dataset(
                name=d["name"],
                digest=d["digest"],
                source_type=d["source_type"],
                source=d["source"],
                schema=d.get("schema"),
                profile=d.get("profile"),
            ),
            tags=[InputTag(DATASET_CONTEXT_TAG, d["context"])] if d.get("context") else [],
        )
        for d in datasets
    ]
    if inputs:
        client.log_inputs(run_id, datasets=inputs)
