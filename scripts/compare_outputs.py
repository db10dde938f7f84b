"""Compare two checkouts' pipeline outputs: are the models and every score the same?

    python scripts/compare_outputs.py BEFORE_CHECKOUT AFTER_CHECKOUT

Checks, after a ``dvc repro`` in each checkout:

* every ``outs`` md5 in ``dvc.lock`` (model folders, the corpus sample, the prepared STS data) and
  every ``metrics``/``plots`` file that both runs declare;
* every field of every metrics JSON under ``metrics/``, exactly (floats bit for bit), except the
  provenance block ``meta`` and wall-clock measurements (``TIMING_KEYS``).

``significance.json`` changed shape when significance learnt to test every loss against the baseline
(``ttest[key]`` became ``ttest[loss][key]``, ``paired_seeds`` became ``paired_seeds[loss]``, and the
``treatment`` key went); an old file is read in the new shape before comparing, by
:func:`normalise_significance`. Exits 1 and lists every difference if any.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

TIMING_KEYS = {"train_seconds", "wall_seconds", "sentences_per_second", "peak_memory_mb", "wall_time_s"}


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
            if key == "meta" or key in TIMING_KEYS:
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


def compare(before: Path, after: Path) -> tuple[list[str], int, int]:
    """Differences, number of dvc.lock outputs compared, number of JSON files compared."""
    problems: list[str] = []
    outs_a, outs_b = lock_outs(before), lock_outs(after)
    for path in sorted(set(outs_a) | set(outs_b)):
        if path not in outs_a or path not in outs_b:
            problems.append(f"dvc.lock {path}: only in {'after' if path in outs_b else 'before'}")
        elif outs_a[path] != outs_b[path] and not path.startswith(("metrics", "reports")):
            problems.append(f"dvc.lock {path}: md5 {outs_a[path]} vs {outs_b[path]}")
    files_a = {p.relative_to(before) for p in (before / "metrics").rglob("*.json")}
    files_b = {p.relative_to(after) for p in (after / "metrics").rglob("*.json")}
    for rel in sorted(files_a ^ files_b):
        problems.append(f"{rel}: only in {'after' if rel in files_b else 'before'}")
    for rel in sorted(files_a & files_b):
        a, b = (json.loads((root / rel).read_text()) for root in (before, after))
        if rel.name == "significance.json":
            a, b = normalise_significance(a), normalise_significance(b)
        problems += [f"{rel}{d}" for d in diff(a, b)]
    return problems, len(set(outs_a) & set(outs_b)), len(files_a & files_b)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    problems, n_outs, n_files = compare(args.before, args.after)
    for line in problems:
        print(line)
    verdict = "differ" if problems else "identical"
    print(
        f"{n_outs} dvc.lock outputs and {n_files} metrics files compared: {verdict} ({len(problems)} differences)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
