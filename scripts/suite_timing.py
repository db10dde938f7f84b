"""Time the test suite as CI runs it and record the result for the docs.

Clones the current commit into a fresh folder, runs ``.ci/run`` there (the README's ``make test``:
a venv from scratch, then pytest), and writes what it saw to ``docs/test-suite.json``: the commit,
CPU kind, cores, date, the pass/skip/fail counts and pytest's own wall time (both parsed from
pytest's last line), the setup time and the total. docs/results.md renders its sentence from that
file (``docs_blocks.suite_sentence``). Run it on an otherwise idle machine::

    python scripts/suite_timing.py              # writes docs/test-suite.json
    python scripts/suite_timing.py --out F --keep

The log goes to ``<clone>/ci.log``; the clone is removed afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 25 * 60  # the suite's budget (README)
# pytest's last line: "=== 1231 passed, 1 skipped, 1 failed in 1014.22s (0:16:54) ===" or, with -q,
# "1231 passed, 1 skipped in 1014.22s (0:16:54)"
_SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<secs>[\d.]+)s\b.*$")


def parse_pytest_log(text: str) -> dict[str, object]:
    """Counts (passed, skipped, failed, error, ...) and pytest's wall seconds from the last summary
    line of a pytest run; ValueError when there is none (the run did not finish)."""
    for line in reversed(text.splitlines()):
        m = _SUMMARY.match(line.strip())
        if m:
            counts = {}
            for part in m["counts"].split(", "):
                n, word = part.split(" ", 1)
                word = {"errors": "error", "warnings": "warning"}.get(word, word)
                counts[word] = int(n)
            return {**counts, "pytest_seconds": round(float(m["secs"]))}
    raise ValueError("no pytest summary line ('N passed ... in S s') in the log: the run did not finish")


def failed_tests(text: str) -> list[str]:
    """The test ids of pytest's "FAILED <id>" / "ERROR <id>" summary lines (``-rfE``, pytest's default)."""
    return [m[1] for m in re.finditer(r"^(?:FAILED|ERROR) (\S+)", text, re.M)]


# The machine's speed at the time, besides the suite: the import a DVC stage process starts with
# (torch, then transformers' BERT modules; ~8 s of a tiny train item's ~13 s). On a shared VM the
# suite's wall time moves with the machine's speed; this figure, taken before and after, says how fast
# the machine was meanwhile.
REFERENCE = "import torch, transformers.models.bert.modeling_bert"


def reference_seconds(python: str, runs: int = 3) -> float:
    """The median wall seconds of a fresh ``python -c REFERENCE`` (``runs`` times)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", REFERENCE], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return round(sorted(times)[len(times) // 2], 2)


def cpu_kind(model: str) -> str:
    """The short name the docs give a CPU kind: "AMD EPYC", "Intel Xeon", else the model itself."""
    for kind, marks in (("AMD EPYC", ("EPYC",)), ("Intel Xeon", ("Xeon",))):
        if any(m in model for m in marks):
            return kind
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "test-suite.json")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(REPO / "src"))
    from focalcse.provenance import cpu_info

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    clone = Path(tempfile.mkdtemp(prefix="focalcse-suite-"))
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone / "repo")], check=True)
    # the clone sits where CI's checkout does: beside ../shared (the data mirror the tests read)
    if (REPO.parent / "shared").is_dir():
        (clone / "shared").symlink_to(REPO.parent / "shared")
    log = clone / "ci.log"
    print(f"suite_timing: {commit} in {clone / 'repo'}; log {log}", flush=True)
    before = reference_seconds(sys.executable)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.run(
            [str(clone / "repo" / ".ci" / "run")],
            cwd=clone / "repo",
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
        ).returncode
    total = round(time.perf_counter() - t0)
    after = reference_seconds(sys.executable)
    text = log.read_text(errors="replace")
    try:
        result = parse_pytest_log(text)
    except ValueError as exc:
        print(f"error: {exc}; exit {rc}, see {log}", file=sys.stderr)
        return 1
    # pytest -q does not print the worker count: it is make test's PYTEST_WORKERS (env, else the Makefile's)
    workers = (
        os.environ.get("PYTEST_WORKERS")
        or re.search(r"^PYTEST_WORKERS \?= (\d+)", (REPO / "Makefile").read_text(), re.M)[1]
    )
    cpu = cpu_info()
    rec = {
        "command": ".ci/run",
        "commit": commit,
        "setup": "the venv made from scratch by make setup",
        "cpu": cpu_kind(cpu["cpu_model"]),
        "cpu_model": cpu["cpu_model"],
        "matmul_flags": cpu["cpu_flags"],
        "cores": os.cpu_count(),
        "date": dt.date.today().isoformat(),
        **{k: result.get(k, 0) for k in ("passed", "skipped", "failed", "error")},
        "pytest_seconds": result["pytest_seconds"],
        "workers": int(workers),
        "total_seconds": total,
        "target_seconds": TARGET_SECONDS,
        "exit": rc,
        "failures": failed_tests(text),
        "reference": {"command": f"python -c '{REFERENCE}'", "before_s": before, "after_s": after},
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=2) + "\n")
    tmp.replace(args.out)
    print(json.dumps(rec, indent=2))
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)
    return 0 if rc == 0 else rc


if __name__ == "__main__":
    sys.exit(main())
