"""Compare two checkouts' pipeline outputs: are the models and every score the same?

    python scripts/compare_outputs.py BEFORE_CHECKOUT AFTER_CHECKOUT [--map 'REGEX=REPLACEMENT' ...]

Checks, after a ``dvc repro`` in each checkout:

* every ``outs`` md5 in ``dvc.lock`` (model folders, the corpus sample, the prepared STS data) and
  every ``metrics``/``plots`` file that both runs declare;
* every field of every metrics JSON under ``metrics/``, exactly (floats bit for bit), except the
  provenance block ``meta`` and wall-clock measurements (``TIMING_KEYS``).

Result documents are compared whole: a file's ``meta``/``subsets`` companions (``x.meta.json``,
``x.subsets.json``) are merged back into it first, and the per-item ``metrics/hard_negatives/`` files
are merged into one ``metrics/hard_negatives.json`` document, so outputs written before and after
the split into companion files compare field by field. Files only in AFTER (new outputs such as
``metrics/summary.json``) are listed, not counted as differences.

``significance.json`` changed shape when significance learnt to test every loss against the baseline
(``ttest[key]`` became ``ttest[loss][key]``, ``paired_seeds`` became ``paired_seeds[loss]``, and the
``treatment`` key went); an old file is read in the new shape before comparing, by
:func:`normalise_significance`.

``--map`` renames BEFORE's paths when a change moved outputs (``re.sub`` of each ``REGEX=REPLACEMENT``
in order, on every dvc.lock output path and metrics file path of BEFORE), e.g. SimCSE's items gaining
their framework component (docs/frameworks.md, "Moving a workspace")::

    --map '^models/(?!generators/)=models/simcse/' \
    --map '^(metrics/(train|eval|curves/loss|curves/dev)/)=\1simcse-'

Exits 1 and lists every difference if any.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from focalcse.layout import is_companion
from focalcse.report.data import merge_items
from focalcse.results import read_result

TIMING_KEYS = {
    "train_seconds",
    "wall_seconds",
    "sentences_per_second",
    "step_seconds_median",
    "peak_memory_mb",
    "wall_time_s",
}


def lock_outs(root: Path) -> dict[str, str]:
    """``{path: md5}`` of every output (outs, metrics, plots) that ``dvc.lock`` records."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    out: dict[str, str] = {}
    for stage in lock["stages"].values():
        for entry in stage.get("outs", []):
            out[entry["path"]] = entry["md5"]
    return out


def normalise_significance(data: dict[str, Any]) -> dict[str, Any]:
    """An old-shape significance document (one baseline/treatment pair) in the new shape."""
    treatment = data.pop("treatment", None)
    if treatment is None:
        return data
    for entry in data["backbones"].values():
        entry["ttest"] = {treatment: entry["ttest"]} if entry.get("ttest") else {}
        entry["paired_seeds"] = {treatment: entry["paired_seeds"]} if "paired_seeds" in entry else {}
    return data


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Every difference between two JSON values, ignoring ``meta`` and timing keys."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key in ("meta", "metas") or key in TIMING_KEYS:  # provenance, not results
                continue
            if key not in a or key not in b:
                out.append(f"{path}/{key}: only in {'after' if key in b else 'before'}")
            else:
                out += diff(a[key], b[key], f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)  # NaN == NaN
    return [] if same and type(a) is type(b) else [f"{path}: {a!r} vs {b!r}"]


def documents(root: Path) -> dict[Path, Any]:
    """Every JSON document under ``root/metrics`` by relative path, companions merged in and the
    hard-negative items merged into one ``metrics/hard_negatives.json``."""
    docs: dict[Path, Any] = {}
    for path in sorted((root / "metrics").rglob("*.json")):
        if is_companion(path):
            continue
        data = json.loads(path.read_text())
        docs[path.relative_to(root)] = read_result(path) if isinstance(data, dict) else data
    items = [docs.pop(rel) for rel in sorted(docs) if rel.parent == Path("metrics/hard_negatives")]
    if items:
        docs[Path("metrics/hard_negatives.json")] = merge_items(items)
    return docs


def _loss_order(doc: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (merged hard negatives) with each backbone's losses in the order ``like`` has them."""
    for b, entry in doc.get("backbones", {}).items():
        order = list(like.get("backbones", {}).get(b, {}).get("mean_cos", entry["mean_cos"]))
        for key in ("mean_cos", "models"):
            entry[key] = {k: entry[key][k] for k in order if k in entry[key]}
        for pair in entry["pairs"]:
            pair["cos"] = {k: pair["cos"][k] for k in order if k in pair["cos"]}
    return doc


def parse_map(items: list[str]) -> list[tuple[re.Pattern[str], str]]:
    """``["REGEX=REPLACEMENT", ...]`` as compiled pairs (the first ``=`` splits)."""
    out = []
    for item in items:
        pattern, sep, repl = item.partition("=")
        if not sep or not pattern:
            raise SystemExit(f"--map {item!r}: expected REGEX=REPLACEMENT")
        out.append((re.compile(pattern), repl))
    return out


def moved(path: str, mapping: list[tuple[re.Pattern[str], str]]) -> str:
    for pattern, repl in mapping:
        path = pattern.sub(repl, path)
    return path


def compare(
    before: Path, after: Path, mapping: list[tuple[re.Pattern[str], str]] | None = None
) -> tuple[list[str], int, int, list[str]]:
    """Differences, number of dvc.lock outputs compared, number of JSON documents compared, and the
    documents / outputs only AFTER has. ``mapping`` renames BEFORE's paths (:func:`parse_map`)."""
    mapping = mapping or []
    problems: list[str] = []
    new: list[str] = []
    outs_a = {moved(p, mapping): md5 for p, md5 in lock_outs(before).items()}
    outs_b = lock_outs(after)
    for path in sorted(set(outs_a) | set(outs_b)):
        if path.startswith(("metrics", "reports")):
            continue  # compared by content below (their md5 holds the commit and timings)
        if path not in outs_b:
            problems.append(f"dvc.lock {path}: only in before")
        elif path not in outs_a:
            new.append(f"dvc.lock {path}")
        elif outs_a[path] != outs_b[path]:
            problems.append(f"dvc.lock {path}: md5 {outs_a[path]} vs {outs_b[path]}")
    docs_a = {Path(moved(rel.as_posix(), mapping)): doc for rel, doc in documents(before).items()}
    docs_b = documents(after)
    for rel in sorted(set(docs_a) - set(docs_b)):
        problems.append(f"{rel}: only in before")
    new += [str(rel) for rel in sorted(set(docs_b) - set(docs_a))]
    for rel in sorted(set(docs_a) & set(docs_b)):
        a, b = docs_a[rel], docs_b[rel]
        if rel.name == "significance.json":
            a, b = normalise_significance(a), normalise_significance(b)
        if rel == Path("metrics/hard_negatives.json"):
            b = _loss_order(b, a)
        problems += [f"{rel}{d}" for d in diff(a, b)]
    n_outs = len({p for p in set(outs_a) & set(outs_b) if not p.startswith(("metrics", "reports"))})
    return problems, n_outs, len(set(docs_a) & set(docs_b)), new


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument(
        "--map", action="append", default=[], metavar="REGEX=REPLACEMENT", help="rename BEFORE's paths"
    )
    args = parser.parse_args()
    problems, n_outs, n_files, new = compare(args.before, args.after, parse_map(args.map))
    for line in problems:
        print(line)
    for line in new:
        print(f"new in after (not a difference): {line}")
    verdict = "differ" if problems else "identical"
    print(
        f"{n_outs} dvc.lock model/data outputs and {n_files} metrics documents compared: {verdict} "
        f"({len(problems)} differences)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
