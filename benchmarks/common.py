"""Shared pieces of the benchmarks: constants and preset sizes, timing and memory helpers, the data
(corpus sample, STS tasks), the worker subprocess plumbing and the results files.

Every measurement module (``train_speed``, ``eval_speed``, ``focal_overhead``, ``quality``) imports
this module; ``bench.py`` drives them. Workers run in fresh Python processes started through this
file (``python benchmarks/common.py <module>:<function> <spec.json> <out.json>``), so each side's peak
RSS is its own.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.data.tasks import TASKS as TASK_REGISTRY

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "all-MiniLM-L6-v2"
TASKS = tuple(TASK_REGISTRY)  # every registered STS task (focalcse.data.tasks), in registry order
TRAIN_SIDES = ("st-fp32", "ours-bf16", "st-bf16", "ours-fp32")
# Opt-in sides (--train-sides / --quality-sides): our trainer with train.unpad false, the padded forward
PADDED_SIDES = ("ours-bf16-padded", "ours-fp32-padded")
# Opt-in sides: sentence-transformers' trainer with ``torch_compile=True`` (its best setting on CPU);
# the like-for-like ratio is then against the faster of its eager and compiled sides
COMPILED_SIDES = ("st-bf16-compiled", "st-fp32-compiled")
BASELINE_SIDE = "st-fp32"  # sentence-transformers' recipe at its default precision

# Sizes per preset; every key is also a CLI flag of bench.py (``--train-steps`` ...).
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {
        "train_steps": 6,
        "train_reps": 1,
        "train_warmup": 2,
        "train_sides": "ours-bf16,st-fp32",
        "eval_reps": 1,
        "eval_fp32_reps": 1,
        "eval_tasks": "STS16,STSBenchmark",
        "loss_reps": 1,
        "loss_steps": 5,
        "loss_paired_steps": 6,
        "quality_seeds": "1,2",
        "quality_steps": 4,
        "quality_sides": "ours-bf16,st-fp32",
    },
    # ~15 min on a quiet 2-core AVX512-BF16 machine (estimate), about half of it sentence-transformers
    # encoding the 37.7k STS sentences once; --eval-reps 2 --train-reps 3 gives medians over more runs (~25 min).
    "full": {
        "train_steps": 16,
        "train_reps": 2,
        "train_warmup": 3,
        "train_sides": ",".join(TRAIN_SIDES),
        "eval_reps": 1,
        "eval_fp32_reps": 1,
        "eval_tasks": ",".join(TASKS),
        "loss_reps": 2,
        "loss_steps": 8,
        "loss_paired_steps": 16,
        # --only quality (not in the default --only): STS-B dev after quality_steps, one run per side
        # and seed; ~5 min per seed at 64 steps here.
        "quality_seeds": "1,2,3",
        "quality_steps": 64,
        "quality_sides": "ours-bf16,st-fp32",
    },
}

TARGETS = {
    # ours vs sentence-transformers at the same precision (like for like), sentences/s
    "train_speedup_bf16": 1.2,
    "train_speedup_fp32": 1.15,
    "train_speedup": 1.6,  # our bf16 default vs sentence-transformers' fp32 default (different precisions)
    "eval_speedup": 2.0,  # 7-task wall time, sentence-transformers / ours
    "eval_max_abs_diff": 0.1,  # every task within 0.1 Spearman x 100 of the fp32 reference
    "focal_step_ratio": 1.02,  # Focal-InfoNCE / InfoNCE median step time
}


@dataclass
class Bench:
    """What every measurement's ``run`` gets from the driver."""

    args: Any  # bench.py's parsed arguments (preset values filled in)
    only: set[str]  # the measurements picked with --only
    work: Path  # scratch folder: samples, worker specs, results and logs
    corpus: Path  # the training corpus the samples are drawn from
    base: dict[str, Any] = field(default_factory=dict)  # settings every worker spec starts from


# ====================================================================== helpers (pure)
def script_command(script: str, argv: Sequence[str] | None) -> str:
    """How a benchmark script was run, for its JSON: ``python benchmarks/<script> <args>``."""
    import shlex

    return f"python benchmarks/{script} " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )


def short_commit() -> str | None:
    """The checkout's short commit (None outside git)."""
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or None


def emit_report(report: dict[str, Any], out_json: str | None) -> int:
    """Print a script's JSON report and write it to ``out_json`` if given; exit status 0."""
    text = json.dumps(report, indent=2) + "\n"
    if out_json:
        Path(out_json).write_text(text)
    print(text, end="")
    return 0


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def step_intervals(stamps: Sequence[float], warmup: int) -> list[float]:
    """Durations between consecutive step-end timestamps, dropping the first ``warmup`` steps.

    ``stamps[k]`` is the end of step k+1; the interval ``stamps[k] - stamps[k-1]`` is step k+1's time.
    """
    gaps = [b - a for a, b in zip(stamps[:-1], stamps[1:])]  # step 2 .. n
    return gaps[max(0, warmup - 1) :]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def split_list(text: str) -> list[str]:
    """A comma-separated CLI value as a list, blanks dropped."""
    return [x.strip() for x in text.split(",") if x.strip()]


def mark(ok: bool | None) -> str:
    return "" if ok is None else (" ✓" if ok else " ✗")


# ====================================================================== machine, time, memory
def peak_rss_mb() -> float:
    """Peak resident set of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        model = next(
            (ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), ""
        )
        flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
        info["cpu_model"] = model
        info["cpu_bf16"] = sorted(f for f in flags if f in ("avx512_bf16", "amx_bf16", "amx_tile"))
    with contextlib.suppress(Exception):
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    for pkg in ("transformers", "sentence_transformers", "accelerate", "datasets"):
        with contextlib.suppress(ImportError):
            info[pkg] = __import__(pkg).__version__
    return info


def load_average() -> list[float]:
    with contextlib.suppress(OSError):
        return [round(x, 2) for x in os.getloadavg()]
    return []


# ====================================================================== models and data (in workers)
def backbone_path() -> str:
    from focalcse.core.backbones import resolve_backbone

    return resolve_backbone(BACKBONE)


def train_batch_lengths(
    tokenizer: Any, sentences: Sequence[str], batch_size: int, max_len: int, order_seed: int
) -> tuple[list[int], list[list[int]]]:
    """Each sentence's token count as the trainer tokenises it (special tokens, truncated at
    ``max_len``) and the trainer's batches of one epoch (indices, ``focalcse.core.batching``)."""
    from focalcse.core.batching import batch_order

    ids = tokenizer(list(sentences), truncation=True, max_length=max_len)["input_ids"]
    return [len(x) for x in ids], batch_order(len(sentences), batch_size, 1, order_seed)


def set_threads(spec: dict[str, Any]) -> None:
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))


def dev_spearman(encoder: Any, sts_dir: str) -> float:
    """STS-B dev Spearman x 100 with the pipeline's evaluator, fp32 (the score every side reports)."""
    from focalcse.eval.sts_eval import stsb_dev_evaluator

    return float(stsb_dev_evaluator(sts_dir, batch_size=128, precision="fp32")(encoder))


def train_config(spec: dict[str, Any], loss: str) -> Any:
    """Our trainer's config for a worker ``spec``: ``spec['steps']`` steps of ``loss``, a log callback
    every step, no dev evaluation or checkpoint inside the timed steps."""
    from focalcse.config import TrainConfig

    return TrainConfig.from_mapping(
        "train (benchmark)",
        {
            "loss": loss,
            "temperature": spec["temperature"],
            "m": spec["m"],
            "pooler": "cls",
            "mlp_only_train": True,
            "batch_size": spec["batch_size"],
            "lr": spec["lr"],
            "max_steps": spec["steps"],
            "max_seq_len": spec["max_len"],
            "eval_steps": spec["steps"],
            "eval_at_start": False,
            "seed": spec["seed"],
            "precision": spec["precision"],
            "log_every": 1,
            "device": "cpu",
            "unpad": spec.get("unpad", True),
        },
    )


def sample_corpus(corpus: Path, n: int, seed: int, dest: Path) -> Path:
    """``n`` sentences of ``corpus`` drawn with ``seed`` (the pipeline's sampler), one a line in ``dest``."""
    from focalcse.data.corpus import read_sentences, sample_sentences

    sentences = sample_sentences(read_sentences(corpus), n, seed)
    dest.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return dest


def data_paths(mirror: str, corpus: str | None, sts_dir: str | None) -> tuple[Path, str]:
    """(corpus file, SentEval ``downstream`` folder): the flags if given, else the mirror's."""
    root = Path(mirror)
    return (
        Path(corpus) if corpus else root / "corpus" / "wiki1m_standin.txt.gz",
        str(Path(sts_dir) if sts_dir else root / "senteval" / "downstream"),
    )


# ====================================================================== workers (one subprocess each)
def run_worker(
    worker: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any], work: Path, label: str
) -> dict[str, Any]:
    """Run ``worker(spec)`` in a fresh Python process; returns its JSON result (raises with its log tail).

    ``worker`` is a module-level function of a benchmark module; the child imports it by name.
    """
    target = f"{worker.__module__}:{worker.__name__}"
    spec_file, out_file, log_file = (work / f"{label}.{ext}" for ext in ("spec.json", "out.json", "log"))
    spec_file.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    t = time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), target, str(spec_file), str(out_file)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    if proc.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(
            f"worker {label} failed (exit {proc.returncode}); log {log_file}:\n" + "\n".join(tail)
        )
    result = json.loads(out_file.read_text())
    result["process_seconds"] = time.perf_counter() - t
    return result


def worker_main(target: str, spec_file: str, out_file: str) -> int:
    """The child side of :func:`run_worker`: import ``module:function``, run it on the spec, write JSON."""
    module, name = target.split(":")
    spec = json.loads(Path(spec_file).read_text())
    result = getattr(importlib.import_module(module), name)(spec)
    Path(out_file).write_text(json.dumps(result))
    return 0


# ====================================================================== results files
def markdown_header(report: dict[str, Any]) -> list[str]:
    """RESULTS.md's title, provenance and machine lines."""
    mach = report["machine"]
    return [
        "# Benchmark: focalcse vs sentence-transformers",
        "",
        f"Written by `benchmarks/bench.py` ({report['preset']} preset) on {report['finished']}; "
        f"raw numbers in `{report['json_name']}`. Rerun: `{report['command']}`.",
        "",
        f"Machine: {mach.get('cpu_model', '?')}, {mach.get('cpu_count')} cores, torch {mach.get('torch')} "
        f"({mach.get('torch_threads')} threads, bf16 flags: {', '.join(mach.get('cpu_bf16', [])) or 'none'}), "
        f"transformers {mach.get('transformers')}, sentence-transformers {mach.get('sentence_transformers')}. "
        f"Load average at start / end: {report['load_start']} / {report['load_end']}"
        + (f". **{report['note']}**" if report.get("note") else "."),
        "",
    ]


def write_results(report: dict[str, Any], markdown: str, out_json: str, out_md: str) -> None:
    """``report`` as indented JSON to ``out_json`` and ``markdown`` to ``out_md``."""
    Path(out_json).write_text(json.dumps(report, indent=2) + "\n")
    Path(out_md).write_text(markdown + "\n")


if __name__ == "__main__":
    sys.modules.setdefault("common", sys.modules["__main__"])  # workers' `import common` reuses this one
    sys.exit(worker_main(*sys.argv[1:4]))
