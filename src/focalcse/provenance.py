"""What produced a result: code version, library versions, hardware. Attached to every output."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# Git-tracked pipeline outputs (DVC's lock and its `cache: false` metrics and report, every parameter
# set's own folder under sets/, which `focalcse params use` renders and its run fills, and the
# .gitignore files DVC writes beside each cached output and stages): rewriting them is what a run
# does, so they never make the code "dirty". Code or params edits do.
PIPELINE_OUTPUTS = ("dvc.lock", "metrics", "reports", "sets")
DVC_IGNORE_FILES = "**/.gitignore"
# CPU flags that decide which matmul kernels (and so which last bits) a bf16 or fp32 run gets.
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """HEAD commit, with ``-dirty`` if tracked code or params have uncommitted changes (pipeline
    outputs aside, see :data:`PIPELINE_OUTPUTS`), or ``unknown`` outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."]
            + [f":(exclude){p}" for p in PIPELINE_OUTPUTS]
            + [f":(exclude,glob){DVC_IGNORE_FILES}"],
            cwd=top,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_info(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU model and its matmul-relevant flags (Linux ``/proc/cpuinfo``; ``platform`` elsewhere)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and value.strip():
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu_model": model, "cpu_flags": [f for f in MATMUL_FLAGS if f in flags]}


def torch_build() -> dict[str, Any]:
    """The torch build's kernel libraries: oneDNN (MKL-DNN) version, the CPU capability torch
    dispatches to, CUDA/cuDNN versions."""
    import re

    import torch

    config = torch.__config__.show()
    onednn = re.search(r"MKL-DNN v([\w.]+)", config)
    info: dict[str, Any] = {
        "torch_git": torch.version.git_version,
        "onednn": onednn.group(1) if onednn else None,
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def hardware() -> dict[str, Any]:
    """Where a result was computed: CPU model and matmul flags, core and thread counts, device,
    torch's kernel build. Runs on different CPU kinds may differ in the last bits (bf16 kernels).
    A step that never imported torch (significance) computed nothing with it: its record
    says so instead of paying torch's import (~2 s a process) to describe an unused library."""
    info: dict[str, Any] = {"platform": platform.platform(), **cpu_info(), "cpu_count": os.cpu_count()}
    if "torch" not in sys.modules:
        return {**info, "torch_used": False}
    import torch

    info = {
        **info,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "device": f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu",
        "torch_build": torch_build(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("focalcse", "torch", "transformers", "datasets", "scipy", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# set by `make reproduce` around `dvc repro` (epoch seconds): each item's meta records it, so the report
# can tell a full run (every item ran in this invocation) from a rerun that skipped up-to-date items
RUN_STARTED_ENV = "FOCALCSE_RUN_STARTED"


def provenance(**extra: Any) -> dict[str, Any]:
    """A ``meta`` block: commit, versions, hardware, plus the caller's fields (params, data, ...);
    ``run_started`` when the step runs inside ``make reproduce`` (:data:`RUN_STARTED_ENV`)."""
    meta = {"git_commit": git_commit(), "versions": versions(), "hardware": hardware(), **extra}
    if started := os.environ.get(RUN_STARTED_ENV):
        meta["run_started"] = started
    return meta
