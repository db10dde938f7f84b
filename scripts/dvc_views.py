"""DVC's own views of the pipeline on the tests' tiny config: ``dvc metrics show``, two experiments in
``dvc exp show --only-changed`` (at a given terminal width), and ``dvc metrics diff`` after a params
change. Prints each view as DVC prints it, and the widest line of ``exp show``.

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python scripts/dvc_views.py [--columns 200] [--keep DIR]

It copies the repository with the tiny params (``tests/tiny_project.py``: a random 2-layer BERT, 192
sentences, 2 losses x 2 seeds), runs ``dvc repro``, then ``dvc exp run -S train.m=0.4`` and
``dvc exp run -S train.temperature=0.07`` (the ablation flow's two kinds of experiment). A few
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from focalcse.testing.project import make_tiny_project, project_env, run, save_tiny_backbone  # noqa: E402

DROP_DEPS = ".*/.*"  # `make exp-show`: the dependency-hash columns (named by paths) dropped
EXPERIMENTS = (("m-0.4", "train.m=0.4"), ("tau-0.07", "train.temperature=0.07"))  # off the ablation lists


def views(dest: Path, columns: int) -> dict[str, str]:
    """Run the tiny pipeline and two experiments in ``dest``; DVC's views as printed."""
    env = project_env(dest, COLUMNS=str(columns), LINES="200")
    out: dict[str, str] = {}
    start = time.perf_counter()
    run(["dvc", "repro"], dest, env, timeout=1800)
    out["repro_seconds"] = f"{time.perf_counter() - start:.0f}"
    # the baseline the experiments branch from: the repro's dvc.lock and metrics, committed
    run(["git", "add", "-A"], dest, env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny baseline"], dest, env)
    out["metrics show"] = run(["dvc", "metrics", "show"], dest, env).stdout
    # a params change in the workspace, then DVC's diff against the committed baseline; then back
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["train"]["m"] = 0.5
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["dvc", "repro"], dest, env, timeout=1800)
    out["metrics diff (after train.m 0.3 -> 0.5)"] = run(["dvc", "metrics", "diff"], dest, env).stdout
    run(["git", "reset", "-q", "--hard"], dest, env)
    run(["dvc", "checkout", "--force"], dest, env)
    # both queued from the baseline (as the ablation flow queues them), then run
    for name, setting in EXPERIMENTS:
        run(["dvc", "exp", "run", "--queue", "-n", name, "-S", setting], dest, env)
    run(["dvc", "exp", "run", "--run-all", "--jobs", "1"], dest, env, timeout=3600)
    show = ["dvc", "exp", "show", "--only-changed", "--no-pager"]
    out["exp show --only-changed"] = run(show, dest, env).stdout
    # DVC adds a column per changed dependency (the hashes of intermediate outputs such as
    # metrics/eval); every such column is named by a path, no metric or param key has a "/"
    out[f"exp show --only-changed --drop '{DROP_DEPS}'"] = run([*show, "--drop", DROP_DEPS], dest, env).stdout
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--columns", type=int, default=200, help="terminal width DVC renders for")
    parser.add_argument("--keep", type=Path, help="build the tiny project here and keep it")
    args = parser.parse_args()
    mirror = os.environ.get("FOCALCSE_DATA_MIRROR")
    if not mirror:
        sys.exit("error: set FOCALCSE_DATA_MIRROR to the data mirror (laid out like shared/data)")
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        tiny = save_tiny_backbone(base / "tiny-backbone")
        dest = make_tiny_project(base / "repo", Path(mirror), tiny)
        result = views(dest, args.columns)
    for title, text in result.items():
        if title == "repro_seconds":
            print(f"tiny dvc repro: {text} s")
            continue
        print(f"$ dvc {title}")
        print(text.rstrip("\n"))
        print()
    plain = result["exp show --only-changed"]
    lean = result[f"exp show --only-changed --drop '{DROP_DEPS}'"]
    width = max(len(line) for line in lean.splitlines())
    header = next(line for line in lean.splitlines() if "Experiment" in line).split()
    missing = [h for h in header if h not in plain]
    print(
        f"exp show --only-changed: every metric/param column of the dropped view present: {not missing}; ",
        end="",
    )
    print(f"collapsed columns (…): {'…' in plain} (dependency hashes)")
    print(
        f"exp show --only-changed --drop '{DROP_DEPS}': widest line {width} columns (terminal {args.columns}), ",
        end="",
    )
    print("some columns collapsed (…)" if "…" in lean else "every column shown")
    return 0 if width <= args.columns and "…" not in lean and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
