"""A throw-away copy of this repository with a tiny config, for end-to-end runs of the real pipeline.

The copy has the repo's tracked and untracked (not ignored) files, a fresh git history, DVC
initialised, and a ``params.yaml`` that trains a tiny random BERT (MiniLM tokenizer) on a few hundred
corpus sentences. Used by the DVC, Prefect and MLflow end-to-end tests, ``scripts/probe.py`` and
``scripts/pool_demo.py``.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]  # src/focalcse/testing/project.py
SKIP = {
    ".git",
    ".venv",
    ".dvc/cache",
    ".dvc/tmp",
    "data",
    "models",
    "metrics",
    "reports",
    "sets",  # each parameter set's own folder (its outputs and dvc.lock)
    "mlflow.db",
    "mlartifacts",
}

TINY_PARAMS: dict[str, Any] = {
    "data": {"num_sentences": 192, "seed": 7, "mirror": ""},
    "train": {"batch_size": 32, "eval_steps": 3, "precision": "fp32", "log_every": 1, "max_seq_len": 24},
    "backbone_overrides": {"tiny": {"source": None}},  # filled with the tiny model folder
    "eval": {
        "tasks": ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"],
        "batch_size": 256,
        "precision": "fp32",  # pinned: the tiny runs must not follow params.yaml's CPU-speed choice
    },
    "sweep": {"backbones": ["tiny"], "losses": ["infonce", "focal_infonce"], "seeds": [1, 2]},
    "ablation": {"temperatures": [0.1], "ms": [0.2]},  # besides the default point (main sweep, seed 1)
    "report": {"hard_negatives": 3, "hard_negative_max_gold": 1.0},
    "tracking": {"experiment": "tiny"},
}


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [f for f in out.splitlines() if f and (REPO / f).is_file()]


def save_tiny_backbone(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) with the MiniLM tokenizer, saved as an HF folder.

    Initialised with std 0.5 (BERT's 0.02 gives [CLS] vectors whose STS cosines all lie within 1e-4 of
    1, so float32 rounding, not the model, would order them and the tests could not tell two models
    or two scorers apart)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from focalcse.core.model import resolve_backbone, tiny_config

    tok = AutoTokenizer.from_pretrained(resolve_backbone("all-MiniLM-L6-v2"))
    torch.manual_seed(seed)
    config = tiny_config(tok.vocab_size)
    config.initializer_range = 0.5
    model = AutoModel.from_config(config)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def copy_repo(dest: Path) -> None:
    """The repo's tracked and untracked (not ignored) files under ``dest``, without the pipeline's
    outputs and stores (:data:`SKIP`)."""
    for rel in _tracked_files():
        if rel.split("/")[0] in SKIP:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)


def make_tiny_project(
    dest: Path, mirror: Path, tiny_model: Path, **section_overrides: dict[str, Any]
) -> Path:
    """Copy the repo to ``dest`` and write the tiny params.yaml (merged over the committed one)."""
    copy_repo(dest)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    tiny = copy.deepcopy(TINY_PARAMS)
    tiny["backbone_overrides"]["tiny"]["source"] = str(tiny_model)
    tiny["data"]["mirror"] = str(mirror)
    for section, values in {**tiny, **section_overrides}.items():
        if (
            isinstance(values, dict)
            and isinstance(params.get(section), dict)
            and section != "backbone_overrides"
        ):
            params[section] = {**params[section], **values}
        else:
            params[section] = values
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for stale in ("dvc.lock",):
        (dest / stale).unlink(missing_ok=True)
    env = project_env(dest)
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"],
    ):
        subprocess.run(cmd, cwd=dest, check=True, env=env)
    return dest


# For the end-to-end runs that check no MLflow record: tracking costs a tiny train item ~5 s and an
# evaluate item ~3 s of a ~12 s process (the mlflow import, the store, the logged model), and
# tests/test_tracking_outputs.py shows the outputs are the same with it off.
NO_TRACKING = {"FOCALCSE_TRACKING": "off"}


def project_env(dest: Path, **extra: str) -> dict[str, str]:
    """Environment for commands in the copy: this venv's tools first on PATH, offline, no analytics."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        {
            "DVC_NO_ANALYTICS": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "MLFLOW_TRACKING_URI": f"sqlite:///{dest / 'mlflow.db'}",
            **extra,
        }
    )
    env.pop("FOCALCSE_DATA_MIRROR", None)  # the tiny params name the mirror
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def changed_stages(status: str) -> set[str]:
    """The stage names ``dvc status`` lists (unindented ``name:`` lines); ``check`` is always among them
    (``always_changed``: it fingerprints the sources on every repro), so a clean project gives
    ``{"check"}`` or nothing."""
    return {
        line.rstrip().rstrip(":") for line in status.splitlines() if line.strip() and not line[0].isspace()
    } - {"Data and pipelines are up to date."}


def bad_mirror(tmp: Path, mirror: Path, what: str) -> Path:
    """A copy of the data ``mirror`` under ``tmp`` with one defect: ``sts-score`` (a malformed STS-B
    test score on line 8: ``4.x``) or ``corpus`` (an empty corpus); the rest is linked, not copied."""
    import gzip

    bad = tmp / f"mirror-{what}"
    if what == "sts-score":
        shutil.copytree(mirror / "senteval", bad / "senteval")
        (bad / "corpus").symlink_to(mirror / "corpus")
        csv = bad / "senteval/downstream/STS/STSBenchmark/sts-test.csv"
        lines = csv.read_text(encoding="utf-8").split("\n")
        cols = lines[7].split("\t")
        cols[4] = "4.x"  # the score column
        lines[7] = "\t".join(cols)
        csv.write_text("\n".join(lines), encoding="utf-8")
    elif what == "corpus":
        (bad / "corpus").mkdir(parents=True)
        (bad / "senteval").symlink_to(mirror / "senteval")
        for f in (mirror / "corpus").iterdir():
            (bad / "corpus" / f.name).write_bytes(gzip.compress(b"") if f.suffix == ".gz" else b"")
    else:
        raise ValueError(f"bad_mirror: {what!r}: expected 'sts-score' or 'corpus'")
    return bad
