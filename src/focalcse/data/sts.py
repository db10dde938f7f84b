"""STS data: readers for SentEval's layout, known counts, and the normalised TSV the pipeline writes.

SentEval layout (``data/downstream/`` of SentEval, what SimCSE's ``senteval.tar`` unpacks to)::

    STS/STS12-en-test/STS.input.<subset>.txt  STS.gs.<subset>.txt   (blank gold line = unscored pair)
    STS/STSBenchmark/sts-{train,dev,test}.csv   tab-separated: score col 5, sentences cols 6-7
    SICK/SICK_{train,trial,test_annotated}.txt  tab-separated with header: relatedness col 4

Every reader checks what it reads and raises :class:`StsDataError` naming the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from focalcse.errors import StsDataError  # re-exported: importers find it here
from focalcse.layout import STS_MANIFEST

STSB_COUNTS = {"train": 5749, "dev": 1500, "test": 1379}
SICK_COUNTS = {"train": 4500, "trial": 500, "test": 4927}
SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
# Score ranges: STS 0-5, SICK relatedness 1-5.
STS_RANGE = (0.0, 5.0)
SICK_RANGE = (1.0, 5.0)


@dataclass
class StsSplit:
    """Sentence pairs with gold scores, grouped by subset (a single subset for STS-B / SICK)."""

    name: str
    subsets: dict[str, tuple[list[str], list[str], list[float]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(v[2]) for v in self.subsets.values())

    def sentences(self) -> list[str]:
        out: list[str] = []
        for s1, s2, _ in self.subsets.values():
            out.extend(s1)
            out.extend(s2)
        return out


def _norm(sentence: str) -> str:
    # SentEval splits on whitespace and the SimCSE batcher re-joins with single spaces.
    return " ".join(sentence.split())


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise StsDataError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise StsDataError(f"{path}: not valid UTF-8 ({err})") from err
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise StsDataError(f"{path}: file is empty")
    return lines


def _score(raw: str, path: Path, lineno: int, lo: float, hi: float) -> float:
    try:
        value = float(raw)
    except ValueError as err:
        raise StsDataError(f"{path}:{lineno}: score {raw!r} is not a number") from err
    if not (lo <= value <= hi) or math.isnan(value):
        raise StsDataError(f"{path}:{lineno}: score {value} outside [{lo}, {hi}]")
    return value


def _check_count(what: str, got: int, expected: int | None, check: bool) -> None:
    if check and expected is not None and got != expected:
        raise StsDataError(f"{what}: {got} scored pairs, expected {expected}")


def read_sts_year(
    root: str | os.PathLike, task: str, subsets: dict[str, int], check_counts: bool = True
) -> StsSplit:
    """One STS12-16 task: every subset (``{name: expected scored pairs}``), pairs with a blank gold
    line skipped."""
    folder = Path(root) / "STS" / f"{task}-en-test"
    split = StsSplit(task)
    for subset, expected in subsets.items():
        inp, gs = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
        in_lines, gs_lines = _read_lines(inp), _read_lines(gs)
        if len(in_lines) != len(gs_lines):
            raise StsDataError(
                f"{inp}: {len(in_lines)} lines but {gs} has {len(gs_lines)}; they must match line by line"
            )
        s1, s2, scores = [], [], []
        for lineno, (pair, gold) in enumerate(zip(in_lines, gs_lines), start=1):
            if not gold.strip():
                continue  # unscored pair
            cols = pair.split("\t")
            if len(cols) < 2:
                raise StsDataError(
                    f"{inp}:{lineno}: expected two tab-separated sentences, got {len(cols)} column(s)"
                )
            s1.append(_norm(cols[0]))
            s2.append(_norm(cols[1]))
            scores.append(_score(gold.strip(), gs, lineno, *STS_RANGE))
        _check_count(f"{task}/{subset}", len(scores), expected, check_counts)
        split.subsets[subset] = (s1, s2, scores)
    return split


def read_stsb(root: str | os.PathLike, split: str = "test", check_counts: bool = True) -> StsSplit:
    """STS-Benchmark ``sts-<split>.csv`` (score col 5, sentences cols 6 and 7, tab-separated)."""
    if split not in STSB_COUNTS:
        raise ValueError(f"unknown STS-B split {split!r}; expected one of {', '.join(STSB_COUNTS)}")
    path = Path(root) / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    s1, s2, scores = [], [], []
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise StsDataError(f"{path}:{lineno}: expected at least 7 tab-separated columns, got {len(cols)}")
        scores.append(_score(cols[4], path, lineno, *STS_RANGE))
        s1.append(_norm(cols[5]))
        s2.append(_norm(cols[6]))
    _check_count(f"STSBenchmark/{split}", len(scores), STSB_COUNTS[split], check_counts)
    return StsSplit("STSBenchmark", {split: (s1, s2, scores)})


def read_sick(root: str | os.PathLike, split: str = "test", check_counts: bool = True) -> StsSplit:
    """SICK relatedness (tab-separated with a header; relatedness in column 4)."""
    if split not in SICK_FILES:
        raise ValueError(f"unknown SICK split {split!r}; expected one of {', '.join(SICK_FILES)}")
    path = Path(root) / "SICK" / SICK_FILES[split]
    lines = _read_lines(path)
    header = lines[0].split("\t")
    if len(header) < 4 or header[3] != "relatedness_score":
        raise StsDataError(
            f"{path}:1: expected a header with relatedness_score in column 4, got {lines[0][:80]!r}"
        )
    s1, s2, scores = [], [], []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 4:
            raise StsDataError(f"{path}:{lineno}: expected at least 4 tab-separated columns, got {len(cols)}")
        s1.append(_norm(cols[1]))
        s2.append(_norm(cols[2]))
        scores.append(_score(cols[3], path, lineno, *SICK_RANGE))
    _check_count(f"SICKRelatedness/{split}", len(scores), SICK_COUNTS[split], check_counts)
    return StsSplit("SICKRelatedness", {split: (s1, s2, scores)})


# ---------------------------------------------------------------- normalised files
# The prepare_sts stage writes one TSV per task/split: subset \t score \t sentence1 \t sentence2,
# plus manifest.json with the counts. Readers of a prepared folder need no SentEval parsing.
MANIFEST = STS_MANIFEST


def write_prepared(splits: Iterable[tuple[str, StsSplit]], out_dir: str | os.PathLike, source: str) -> dict:
    """Write ``<key>.tsv`` for each (key, split) and ``manifest.json``; returns the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"source": source, "files": {}}
    for key, split in splits:
        rows = []
        for subset, (s1, s2, scores) in split.subsets.items():
            for a, b, y in zip(s1, s2, scores):
                if "\t" in a or "\t" in b or "\n" in a or "\n" in b:
                    raise StsDataError(
                        f"{key}/{subset}: sentence contains a tab or newline after normalisation"
                    )
                rows.append(f"{subset}\t{y!r}\t{a}\t{b}")
        (out / f"{key}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        manifest["files"][key] = {
            "task": split.name,
            "pairs": len(split),
            "subsets": {k: len(v[2]) for k, v in split.subsets.items()},
        }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_prepared(folder: str | os.PathLike, key: str) -> StsSplit:
    """One split written by :func:`write_prepared` (``key`` e.g. ``STS12`` or ``STSBenchmark-dev``)."""
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    if key not in manifest["files"]:
        raise StsDataError(f"{folder / MANIFEST}: no split {key!r}; has {', '.join(manifest['files'])}")
    entry = manifest["files"][key]
    path = folder / f"{key}.tsv"
    split = StsSplit(entry["task"])
    for lineno, line in enumerate(_read_lines(path), start=1):
        cols = line.split("\t")
        if len(cols) != 4:
            raise StsDataError(f"{path}:{lineno}: expected 4 tab-separated columns, got {len(cols)}")
        subset, score, a, b = cols
        s1, s2, scores = split.subsets.setdefault(subset, ([], [], []))
        s1.append(a)
        s2.append(b)
        scores.append(_score(score, path, lineno, *STS_RANGE))
    if len(split) != entry["pairs"]:
        raise StsDataError(f"{path}: {len(split)} pairs, manifest says {entry['pairs']}")
    return split


def is_prepared(folder: str | os.PathLike) -> bool:
    return (Path(folder) / MANIFEST).is_file()
