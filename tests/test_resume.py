"""Resume after ``kill -9``: a killed training run, rerun, ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import tiny_pairs

from focalcse.testing.project import save_tiny_backbone

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    torch.set_num_threads(1)
    from focalcse.config import TrainConfig
    from focalcse.eval.sts_eval import stsb_dev_evaluator
    from focalcse.core.model import SentenceEncoder
    from focalcse.core.training import train

    backbone, sts, corpus_file, out, result_file = sys.argv[1:6]
    enc = SentenceEncoder.from_pretrained(backbone, pooler="cls", mlp_only_train=True, max_seq_len=16, seed=3)
    from transformers import AutoTokenizer
    corpus = [enc.tokenizer(line, truncation=True, max_length=16)["input_ids"] for line in open(corpus_file).read().splitlines()]
    cfg = TrainConfig(loss="focal_infonce", batch_size=16, lr=1e-3, max_steps=12, eval_steps=3, checkpoint_steps=2, seed=5)

    def log(metrics, step):
        if "loss" in metrics:
            print(f"STEP {step}", flush=True)

    r = train(enc, corpus, cfg, out, dev_evaluator=stsb_dev_evaluator(sts), log_metrics=log, progress=False)
    json.dump({k: v for k, v in r.to_dict().items() if k not in ("train_seconds", "sentences_per_second", "step_seconds_median", "peak_memory_mb")},
              open(result_file, "w"), sort_keys=True)
    """
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import random

    from focalcse.data.sts import StsSplit, write_prepared

    root = tmp_path_factory.mktemp("resume")
    backbone = save_tiny_backbone(root / "tiny", seed=1)
    rng = random.Random(0)
    pairs = tiny_pairs(rng, 40)
    split = StsSplit(
        "STSBenchmark",
        {"dev": ([a for a, _, _ in pairs], [b for _, b, _ in pairs], [y for _, _, y in pairs])},
    )
    write_prepared([("STSBenchmark-dev", split)], root / "sts", source="synthetic")
    corpus = root / "corpus.txt"
    corpus.write_text(
        "\n".join(f"sentence {i} " + " ".join(rng.choice("abcdefgh") for _ in range(6)) for i in range(200))
    )
    script = root / "run.py"
    script.write_text(SCRIPT)
    return root, backbone, corpus, script


def _cmd(setup, out: Path, result: Path) -> list[str]:
    root, backbone, corpus, script = setup
    return [sys.executable, str(script), str(backbone), str(root / "sts"), str(corpus), str(out), str(result)]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _run_and_kill_at(cmd: list[str], step: int) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env())
    try:
        for line in proc.stdout:
            if line.strip() == f"STEP {step}":
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, f"run ended before step {step} (rc {proc.returncode})"


@pytest.mark.slow
def test_kill_9_then_rerun_equals_uninterrupted(setup, tmp_path: Path) -> None:
    clean_out, clean_res = tmp_path / "clean" / "model", tmp_path / "clean.json"
    subprocess.run(_cmd(setup, clean_out, clean_res), check=True, env=_env(), capture_output=True)

    out, res = tmp_path / "killed" / "model", tmp_path / "killed.json"
    work = out.parent / ".model.work"
    _run_and_kill_at(_cmd(setup, out, res), 1)  # before any checkpoint
    assert not out.exists()
    _run_and_kill_at(_cmd(setup, out, res), 5)  # after the step-4 checkpoint, mid-way to the next
    assert (work / "last" / "state.pt").is_file() and not out.exists()
    _run_and_kill_at(_cmd(setup, out, res), 9)  # resumed at 4, killed after the step-8 checkpoint
    done = subprocess.run(_cmd(setup, out, res), check=True, env=_env(), capture_output=True, text=True)
    assert "STEP 1\n" not in done.stdout and "STEP 9" in done.stdout  # it resumed, not restarted

    clean, resumed = json.loads(clean_res.read_text()), json.loads(res.read_text())
    assert resumed == clean  # loss history, dev curve, best step and score, steps, sentences seen
    assert (out / "model.safetensors").read_bytes() == (clean_out / "model.safetensors").read_bytes()
    assert not work.exists()  # checkpoints are cleaned up after success


def test_checkpoint_of_other_settings_is_ignored(tmp_path: Path, tiny_encoder_factory) -> None:
    from focalcse.config import TrainConfig
    from focalcse.core.training import train

    corpus = [[101, 2000 + i, 2001 + i, 102] for i in range(64)]
    cfg = TrainConfig(batch_size=8, max_steps=4, checkpoint_steps=2, eval_at_start=False, lr=1e-3)
    work = tmp_path / "work"

    def crash(metrics, step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            tiny_encoder_factory(),
            corpus,
            cfg,
            tmp_path / "a",
            log_metrics=crash,
            progress=False,
            work_dir=work,
        )
    assert (work / "last" / "state.pt").is_file()
    other = TrainConfig(batch_size=8, max_steps=4, checkpoint_steps=2, eval_at_start=False, lr=2e-3)
    r_other = train(tiny_encoder_factory(), corpus, other, tmp_path / "b", progress=False, work_dir=work)
    fresh = train(
        tiny_encoder_factory(), corpus, other, tmp_path / "c", progress=False, work_dir=tmp_path / "w2"
    )
    assert r_other.history == fresh.history  # started from scratch, not from the lr=1e-3 checkpoint
