"""The bad-input probes of the reliability issue, on a real checkout whose pipeline has run.

Usage (in a checkout where ``dvc repro`` of the CPU default has finished; the data mirror given)::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/input_probes.py --out-json probes.json

Each probe changes one thing (a param, the mirror, the network), runs ``dvc repro`` and restores the
change. It records the wall time, the ``error:`` lines, whether a traceback was printed, which stages
ran, and whether ``git status --porcelain``, ``dvc status`` and the md5 of every file under
``models/``, ``metrics/``, ``data/`` and ``reports/`` are the same after as before. Probes:

- ``batch_size -1``, a typo key (``train.learning_rat``), ``max_steps`` beyond the sample
  (``train.max_steps: 1000`` where the sample gives 128 batches), a malformed STS-B score line and an
  empty corpus (a mirror copy each, in a temp folder), no mirror while offline;
- two ``dvc repro`` at once: a ``report.*`` edit makes the first rerun ``check`` and ``report``; the
  second starts 3 s later and must be refused while the first finishes.

Prints a Markdown table; exits 1 if any probe changed an output or did not stop as expected.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path.cwd()
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from focalcse.testing.project import bad_mirror  # noqa: E402 - the tests' defective mirror copies

WATCHED = ("models", "metrics", "data", "reports")


def snapshot(env: dict[str, str]) -> dict[str, Any]:
    """git status, dvc status and the md5 of every watched file."""
    files = {}
    for top in WATCHED:
        for path in sorted((ROOT / top).rglob("*")) if (ROOT / top).is_dir() else ():
            if path.is_file():
                files[path.relative_to(ROOT).as_posix()] = hashlib.md5(path.read_bytes()).hexdigest()
    git = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, env=env, capture_output=True, text=True)
    dvc = subprocess.run(["dvc", "status"], cwd=ROOT, env=env, capture_output=True, text=True)
    return {"git": git.stdout, "dvc": dvc.stdout, "files": files}


def edit_params(edit: Callable[[dict], None]) -> None:
    path = ROOT / "params.yaml"
    params = yaml.safe_load(path.read_text())
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def repro(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(["dvc", "repro"], cwd=ROOT, env=env, capture_output=True, text=True)
    return proc, time.perf_counter() - t0


def summarize(name: str, proc: subprocess.CompletedProcess, wall: float, same: bool) -> dict[str, Any]:
    out = proc.stdout + proc.stderr
    return {
        "probe": name,
        "returncode": proc.returncode,
        "wall_seconds": round(wall, 1),
        # the stage's own one-line errors, and DVC's wrapper lines (``ERROR: failed to reproduce ...``)
        "errors": [line for line in out.splitlines() if line.startswith("error:")],
        "dvc_errors": [line for line in out.splitlines() if line.startswith("ERROR:")],
        "traceback": "Traceback" in out,
        "stages_run": re.findall(r"Running stage '([^']+)'", out),
        "unchanged": same,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-json", type=Path, default=None)
    args = ap.parse_args()
    mirror = Path(os.environ.get("FOCALCSE_DATA_MIRROR", "")).resolve()
    if not (mirror / "senteval").is_dir():
        print(f"error: FOCALCSE_DATA_MIRROR={mirror}: expected the data mirror folder", file=sys.stderr)
        return 2
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    original = (ROOT / "params.yaml").read_text()
    tmp = Path(tempfile.mkdtemp(prefix="probes-"))
    offline = {k: v for k, v in env.items() if k != "FOCALCSE_DATA_MIRROR"}
    offline.update(  # an empty download cache, and a proxy that refuses at once if a network is there
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HTTPS_PROXY="http://127.0.0.1:9",
        FOCALCSE_CACHE=str(tmp / "cache"),
    )
    probes: list[tuple[str, Callable[[], None], dict[str, str]]] = [
        ("batch_size -1", lambda: edit_params(lambda d: d["train"].update(batch_size=-1)), env),
        ("typo key", lambda: edit_params(lambda d: d["train"].update(learning_rat=1e-5)), env),
        ("max_steps 1000", lambda: edit_params(lambda d: d["train"].update(max_steps=1000)), env),
        (
            "malformed STS line",
            lambda: None,
            {**env, "FOCALCSE_DATA_MIRROR": str(bad_mirror(tmp, mirror, "sts-score"))},
        ),
        (
            "empty corpus",
            lambda: None,
            {**env, "FOCALCSE_DATA_MIRROR": str(bad_mirror(tmp, mirror, "corpus"))},
        ),
        ("offline, no mirror", lambda: None, offline),
    ]
    results = []
    ok = True
    try:
        before = snapshot(env)
        for name, change, penv in probes:
            change()
            proc, wall = repro(penv)
            (ROOT / "params.yaml").write_text(original)
            after = snapshot(env)
            r = summarize(name, proc, wall, after == before)
            results.append(r)
            ok &= r["unchanged"] and r["returncode"] != 0 and len(r["errors"]) == 1 and not r["traceback"]
            ok &= r["stages_run"] == ["check"]
            print(json.dumps(r), flush=True)
        # two at once: the first reruns check + report (a report param), the second must be refused
        edit_params(lambda d: d["report"].update(figure1_ms=[*d["report"]["figure1_ms"], 0.7]))
        t0 = time.perf_counter()
        first = subprocess.Popen(
            ["dvc", "repro"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        time.sleep(3)
        second, wall2 = repro(env)
        out1, _ = first.communicate()
        wall1 = time.perf_counter() - t0
        (ROOT / "params.yaml").write_text(original)
        restore, _ = repro(env)  # back to the committed report
        after = snapshot(env)
        r = summarize("two dvc repro at once (the second)", second, wall2, after == before)
        r["first_returncode"] = first.returncode
        r["first_wall_seconds"] = round(wall1, 1)
        r["first_stages_run"] = re.findall(r"Running stage '([^']+)'", out1)
        r["restore_returncode"] = restore.returncode
        results.append(r)
        ok &= second.returncode != 0 and first.returncode == 0 and r["unchanged"]
        print(json.dumps(r), flush=True)
    finally:
        (ROOT / "params.yaml").write_text(original)
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| probe | exit | wall (s) | error line | traceback | stages run | outputs unchanged |")
    print("|---|---:|---:|---|---|---|---|")
    for r in results:
        err = ([*r["errors"], *r["dvc_errors"], "-"][0]).replace("|", "\\|")[:160]
        print(
            f"| {r['probe']} | {r['returncode']} | {r['wall_seconds']} | {err} | {r['traceback']} | "
            f"{', '.join(r['stages_run']) or '-'} | {r['unchanged']} |"
        )
    if args.out_json:
        args.out_json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
