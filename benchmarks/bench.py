"""Side-by-side speed benchmark: focalcse vs sentence-transformers on the same backbone and data.

Three measurements, each printed as medians and ratios and written to a JSON file and a Markdown table:

1. **Training throughput** (unsupervised SimCSE, batch 64, max_len 32, InfoNCE tau=0.05, lr 3e-5): ours
   (``focalcse.training.train``) at bf16 and fp32 autocast against sentence-transformers'
   ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss(scale=1/tau)`` on (sentence, sentence)
   pairs, same backbone, same pooler (CLS + fresh Linear/Tanh MLP in training, identical initial
   MLP weights; the CLS vector without the MLP at evaluation), same sentences, same number of steps. Each
   side runs in its own subprocess (so peak RSS is per side), sides alternate within every repetition.
   Step time = wall time between consecutive step-end callbacks (ours: ``log_metrics``; ST: a
   ``TrainerCallback``), so both include batch preparation (ST tokenises per step, ours pre-tokenises in
   the data stage, reported separately as ``tokenise_seconds``). After the steps, both models are
   scored on STS-B dev with the same evaluator (``focalcse.evaluation.stsb_dev_evaluator``, fp32).
2. **7-task STS evaluation wall time**: ST's ``encode`` + cosine + scipy Spearman over each task's pooled
   pairs ("all" setting), against ``focalcse.evaluation.evaluate_sts`` at bf16 (and fp32, the score
   reference) on the same fixed model (all-MiniLM-L6-v2, CLS pooler), same batch size, same truncation.
   One process, sides alternating, one warm-up encode per side first.
3. **Focal-InfoNCE vs InfoNCE step time**: our trainer, same batches (same seed), runs alternating,
   median step time per loss; the same step on two model copies alternating step by step on the same
   batch (the paired ratio, robust to other load on the machine); and the loss alone (forward + backward
   on (N, d) tensors).

sentence-transformers is an optional extra (``pip install -e ".[bench]"``), never a runtime dependency.
Benchmarks are not tests: nothing here asserts a time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench.py --preset smoke     # ~3 min: wiring check, few steps, 2 tasks
    .venv/bin/python benchmarks/bench.py --preset full      # ~15 min on a quiet 2-core machine

Timings need a quiet machine: on a shared one other processes' load moves step times by 2-10x (the
paired Focal/InfoNCE ratio and the score differences stay meaningful).

Any preset value can be overridden (``--train-steps``, ``--train-reps``, ``--eval-reps``, ``--eval-tasks``, ...);
``--only train,eval,loss`` picks measurements. Results: ``--out-json`` (default
``benchmarks/results.json``) and ``--out-md`` (default ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "all-MiniLM-L6-v2"
TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRAIN_SIDES = ("st-fp32", "ours-bf16", "st-bf16", "ours-fp32")
BASELINE_SIDE = "st-fp32"  # sentence-transformers' recipe at its default precision

# Sizes per preset; every key is also a CLI flag (``--train-steps`` ...).
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
    "train_speedup": 1.6,  # ours vs sentence-transformers, sentences/s
    "eval_speedup": 2.0,  # 7-task wall time, sentence-transformers / ours
    "eval_max_abs_diff": 0.1,  # every task within 0.1 Spearman x 100 of the fp32 reference
    "focal_step_ratio": 1.02,  # Focal-InfoNCE / InfoNCE median step time
}


# ====================================================================== helpers (pure)
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


# ====================================================================== workers (one subprocess each)
def _backbone_path() -> str:
    from focalcse.model import resolve_backbone

    return resolve_backbone(BACKBONE)


def _set_threads(spec: dict[str, Any]) -> None:
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))


def _dev_spearman(encoder: Any, sts_dir: str) -> float:
    from focalcse.evaluation import stsb_dev_evaluator

    return float(stsb_dev_evaluator(sts_dir, batch_size=128, precision="fp32")(encoder))


def worker_train_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """Our trainer on the sample: per-step times, throughput, peak RSS, STS-B dev after the steps."""
    import torch

    from focalcse.config import TrainConfig
    from focalcse.model import SentenceEncoder
    from focalcse.training import tokenize_corpus, train

    _set_threads(spec)
    t0 = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(
        BACKBONE,
        pooler="cls",
        mlp_only_train=True,
        max_seq_len=spec["max_len"],
        mlp_init="fresh",
        seed=spec["seed"],
    )
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    corpus = tokenize_corpus(spec["sample_file"], encoder.tokenizer, spec["max_len"])
    tokenise_s = time.perf_counter() - t0
    cfg = TrainConfig(
        loss=spec.get("loss", "infonce"),
        temperature=spec["temperature"],
        m=spec["m"],
        pooler="cls",
        mlp_only_train=True,
        batch_size=spec["batch_size"],
        lr=spec["lr"],
        max_steps=spec["steps"],
        max_seq_len=spec["max_len"],
        eval_steps=spec["steps"],  # no dev evaluation or checkpoint inside the timed steps
        eval_at_start=False,
        seed=spec["seed"],
        precision=spec["precision"],
        log_every=1,
        device="cpu",
    )
    stamps: list[float] = []
    cpu_stamps: list[float] = []
    losses: list[float] = []

    def on_step(metrics: dict[str, float], step: int) -> None:
        stamps.append(time.perf_counter())
        cpu_stamps.append(time.process_time())
        losses.append(float(metrics["loss"]))

    rss_before = current_rss_mb()
    torch.manual_seed(spec["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        result = train(
            encoder, corpus, cfg, Path(tmp) / "model", dev_evaluator=None, log_metrics=on_step, progress=False
        )
    steps = step_intervals(stamps, spec["warmup"])
    out = {
        "load_seconds": load_s,
        "tokenise_seconds": tokenise_s,
        "step_seconds": steps,
        "step_cpu_seconds": step_intervals(cpu_stamps, spec["warmup"]),
        "train_seconds": result.train_seconds,
        "sentences_per_second_total": result.sentences_per_second,
        "rss_before_train_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
    }
    if spec.get("dev"):
        out["stsb_dev_after"] = _dev_spearman(encoder, spec["sts_dir"])
    return out


def worker_train_st(spec: dict[str, Any]) -> dict[str, Any]:
    """sentence-transformers' trainer with MultipleNegativesRankingLoss on (s, s) pairs, mirroring ours."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from transformers import TrainerCallback

    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    except ImportError:  # pragma: no cover - sentence-transformers 3-5
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.models import Dense, Pooling, Transformer

    from focalcse.model import SentenceEncoder

    _set_threads(spec)
    t0 = time.perf_counter()
    path = _backbone_path()
    # The same fresh MLP our trainer starts from (same seed, same nn.Linear initialisation).
    torch.manual_seed(spec["seed"])
    transformer = Transformer(
        path, max_seq_length=spec["max_len"], model_kwargs={"attn_implementation": "sdpa"}
    )
    hidden = transformer.auto_model.config.hidden_size
    torch.manual_seed(spec["seed"])
    mlp = torch.nn.Linear(hidden, hidden)
    model = SentenceTransformer(
        modules=[
            transformer,
            Pooling(hidden, pooling_mode="cls"),
            Dense(
                hidden,
                hidden,
                activation_function=torch.nn.Tanh(),
                init_weight=mlp.weight.detach().clone(),
                init_bias=mlp.bias.detach().clone(),
            ),
        ],
        device="cpu",
    )
    sentences = Path(spec["sample_file"]).read_text(encoding="utf-8").splitlines()
    data = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / spec["temperature"])

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.begin: list[float] = []
            self.end: list[float] = []
            self.cpu_end: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.begin.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            self.end.append(time.perf_counter())
            self.cpu_end.append(time.process_time())

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=spec["batch_size"],
            learning_rate=spec["lr"],
            max_steps=spec["steps"],
            num_train_epochs=1,
            warmup_steps=0,
            lr_scheduler_type="linear",
            weight_decay=0.0,
            max_grad_norm=spec["st_max_grad_norm"],  # 0 = no clipping, as our trainer
            bf16=spec["precision"] == "bf16",
            seed=spec["seed"],
            logging_steps=spec["steps"] + 1,
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_drop_last=True,
            use_cpu=True,
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data, loss=loss, callbacks=[timer]
        )
        load_s = time.perf_counter() - t0
        rss_before = current_rss_mb()
        output = trainer.train()
    steps = step_intervals(timer.end, spec["warmup"])
    total = (timer.end[-1] - timer.begin[0]) if timer.end else float("nan")
    out = {
        "load_seconds": load_s,
        "tokenise_seconds": 0.0,  # tokenised inside every step by ST's data collator
        "step_seconds": steps,
        "step_cpu_seconds": step_intervals(timer.cpu_end, spec["warmup"]),
        "train_seconds": total,
        "sentences_per_second_total": len(timer.end) * spec["batch_size"] / total if total else 0.0,
        "rss_before_train_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
        "final_loss": float(output.training_loss),  # ST reports the mean training loss
        "optimizer": str(args.optim),
    }
    if spec.get("dev"):
        from transformers import AutoTokenizer

        # The CLS vector without the MLP, scored by our evaluator: the same metric as ours. A fresh
        # tokenizer: ST's carries model_max_length=32 from training, ours evaluates untruncated.
        encoder = SentenceEncoder(
            transformer.auto_model,
            AutoTokenizer.from_pretrained(path),
            "cls",
            True,
            spec["max_len"],
            source=path,
        )
        out["stsb_dev_after"] = _dev_spearman(encoder, spec["sts_dir"])
    return out


def _st_scores(
    model: Any, pairs: dict[str, tuple[list[str], list[str], list[float]]], batch_size: int
) -> dict:
    """sentence-transformers' way: encode each task's pooled pairs, cosine, scipy Spearman x 100."""
    import numpy as np
    import torch.nn.functional as F
    from scipy.stats import spearmanr

    scores = {}
    for task, (s1, s2, gold) in pairs.items():
        v = model.encode(s1 + s2, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
        sims = F.cosine_similarity(v[: len(s1)], v[len(s1) :], dim=-1).cpu().numpy()
        scores[task] = float(spearmanr(sims, np.asarray(gold)).statistic) * 100.0
    return scores


def worker_eval(spec: dict[str, Any]) -> dict[str, Any]:
    """7-task STS evaluation: ST encode + Spearman vs ``evaluate_sts`` (bf16, fp32), alternating."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # pragma: no cover - sentence-transformers 3-5
        from sentence_transformers.models import Pooling, Transformer

    from focalcse.evaluation import encode, evaluate_sts
    from focalcse.model import SentenceEncoder, eval_max_length
    from focalcse.sts import load_split

    _set_threads(spec)
    tasks, sts_dir, bs = spec["tasks"], spec["sts_dir"], spec["batch_size"]
    encoder = SentenceEncoder.from_pretrained(BACKBONE, pooler="cls_before_pooler")
    max_len = eval_max_length(encoder)
    transformer = Transformer(_backbone_path(), max_seq_length=max_len)
    st_model = SentenceTransformer(
        modules=[transformer, Pooling(transformer.auto_model.config.hidden_size, pooling_mode="cls")],
        device="cpu",
    )
    pairs = {}
    for task in tasks:
        split = load_split(sts_dir, task)
        s1 = [s for a, _, _ in split.subsets.values() for s in a]
        s2 = [s for _, b, _ in split.subsets.values() for s in b]
        gold = [g for _, _, y in split.subsets.values() for g in y]
        pairs[task] = (s1, s2, gold)
    n_sent = sum(2 * len(p[2]) for p in pairs.values())
    n_unique = len({s for p in pairs.values() for s in p[0] + p[1]})

    warm = [s for p in pairs.values() for s in p[0]][:256]
    for prec in ("fp32", "bf16"):  # one-off kernel set-up out of the timings
        encode(encoder, warm, batch_size=bs, precision=prec)
    st_model.encode(warm, batch_size=bs, show_progress_bar=False)

    def run_ours(prec: str) -> dict[str, float]:
        r = evaluate_sts(encoder, sts_dir, tasks=tasks, batch_size=bs, precision=prec, progress=False)
        return {k: float(r[k]) for k in tasks}

    def run_st() -> dict[str, float]:
        return _st_scores(st_model, pairs, bs)

    runs: dict[str, list[dict[str, Any]]] = {"st-fp32": [], "ours-bf16": [], "ours-fp32": []}
    plan: list[str] = []
    for rep in range(max(spec["reps"], spec["fp32_reps"])):
        timed = ["st-fp32", "ours-bf16"] if rep < spec["reps"] else []
        if rep < spec["fp32_reps"]:
            timed.append("ours-fp32")
        plan += timed if rep % 2 == 0 else timed[::-1]
    for side in plan:
        print(f"  eval {side} ...", flush=True)
        t, c = time.perf_counter(), time.process_time()
        scores = run_st() if side == "st-fp32" else run_ours(side.split("-")[1])
        seconds, cpu = time.perf_counter() - t, time.process_time() - c
        runs[side].append({"seconds": seconds, "cpu_seconds": cpu, "scores": scores})
        print(f"  eval {side}: {seconds:.1f} s", flush=True)
    out: dict[str, Any] = {
        "tasks": list(tasks),
        "sentences": n_sent,
        "unique_sentences": n_unique,
        "eval_max_length": max_len,
        "runs": runs,
    }
    if spec.get("dev_start"):
        out["stsb_dev_start"] = _dev_spearman(encoder, sts_dir)
    return out


def worker_loss(spec: dict[str, Any]) -> dict[str, Any]:
    """Focal-InfoNCE vs InfoNCE: our trainer, same batches, alternating runs; and the loss alone."""
    import torch

    from focalcse.config import TrainConfig
    from focalcse.evaluation import autocast_context
    from focalcse.losses import build_loss
    from focalcse.model import SentenceEncoder
    from focalcse.training import tokenize_corpus, train

    _set_threads(spec)
    base = SentenceEncoder.from_pretrained(
        BACKBONE, pooler="cls", mlp_only_train=True, max_seq_len=spec["max_len"], seed=spec["seed"]
    )
    corpus = tokenize_corpus(spec["sample_file"], base.tokenizer, spec["max_len"])
    steps: dict[str, list[float]] = {"infonce": [], "focal_infonce": []}
    cpu: dict[str, list[float]] = {"infonce": [], "focal_infonce": []}
    for rep in range(spec["reps"]):
        order = ["infonce", "focal_infonce"] if rep % 2 == 0 else ["focal_infonce", "infonce"]
        for loss in order:
            encoder = copy.deepcopy(base)
            cfg = TrainConfig(
                loss=loss,
                temperature=spec["temperature"],
                m=spec["m"],
                batch_size=spec["batch_size"],
                lr=spec["lr"],
                max_steps=spec["steps"],
                max_seq_len=spec["max_len"],
                eval_steps=spec["steps"],  # no checkpoint inside the timed steps
                eval_at_start=False,
                seed=spec["seed"],
                precision=spec["precision"],
                log_every=1,
            )
            stamps: list[tuple[float, float]] = []
            with tempfile.TemporaryDirectory() as tmp:
                train(
                    encoder,
                    corpus,
                    cfg,
                    Path(tmp) / "m",
                    log_metrics=lambda m, s, st=stamps: st.append((time.perf_counter(), time.process_time())),
                    progress=False,
                )
            steps[loss] += step_intervals([w for w, _ in stamps], spec["warmup"])
            cpu[loss] += step_intervals([c for _, c in stamps], spec["warmup"])
            print(f"  loss {loss} rep {rep + 1}: median step {median(steps[loss]) * 1e3:.0f} ms", flush=True)

    # Paired steps: the training step (2N forward, loss, backward, AdamW) on two model copies, one per
    # loss, alternating step by step on the same batch, so both see the same load; ratio per pair.
    from focalcse.evaluation import pad_batch

    ids_column = corpus["input_ids"]
    models = {name: copy.deepcopy(base).train() for name in steps}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=spec["lr"]) for name, m in models.items()}
    fns = {name: build_loss(name, spec["temperature"], spec["m"]) for name in steps}
    pair_ratios: list[float] = []
    n = spec["batch_size"]
    for k in range(spec["paired_steps"] + 2):
        rows = [list(ids_column[i]) for i in range((k % spec["steps"]) * n, (k % spec["steps"] + 1) * n)]
        ids, mask = pad_batch(rows, base.tokenizer.pad_token_id or 0)  # (N, L)
        ids2, mask2 = torch.cat([ids, ids]), torch.cat([mask, mask])  # (2N, L): two views
        took = {}
        for name in list(fns) if k % 2 == 0 else list(fns)[::-1]:
            t = time.perf_counter()
            with autocast_context(torch.device("cpu"), spec["precision"]):
                z = models[name](input_ids=ids2, attention_mask=mask2)  # (2N, d)
                loss = fns[name](z[:n].float(), z[n:].float())
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            took[name] = time.perf_counter() - t
        if k >= 2:  # first steps: one-off allocations
            pair_ratios.append(took["focal_infonce"] / took["infonce"])

    # The loss alone on (N, d) tensors, forward + backward, alternating, many iterations.
    gen = torch.Generator().manual_seed(0)
    d = base.backbone.config.hidden_size
    z1 = torch.randn(n, d, generator=gen, requires_grad=True)
    z2 = torch.randn(n, d, generator=gen, requires_grad=True)
    alone: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(400):
        for name in list(fns) if i % 2 == 0 else list(fns)[::-1]:
            t = time.perf_counter()
            fns[name](z1, z2).backward()
            alone[name].append(time.perf_counter() - t)
    return {
        "step_seconds": steps,
        "step_cpu_seconds": cpu,
        "paired_step_ratios": pair_ratios,
        "loss_alone_seconds": {k: v[50:] for k, v in alone.items()},
    }


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "train-ours": worker_train_ours,
    "train-st": worker_train_st,
    "eval": worker_eval,
    "loss": worker_loss,
}


def run_worker(kind: str, spec: dict[str, Any], work: Path, label: str) -> dict[str, Any]:
    """Run one worker in a fresh Python process; returns its JSON result (raises with its log tail)."""
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
            [sys.executable, str(Path(__file__).resolve()), "_worker", kind, str(spec_file), str(out_file)],
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


# ====================================================================== summaries
def summarise_train(runs: dict[str, list[dict[str, Any]]], batch_size: int) -> dict[str, Any]:
    """Per side: median over repetitions of (batch / median step time), peak RSS, STS-B dev after."""
    out: dict[str, Any] = {}
    for side, reps in runs.items():
        per_rep = [batch_size / median(r["step_seconds"]) for r in reps if r["step_seconds"]]
        out[side] = {
            "sentences_per_second": median(per_rep),
            "sentences_per_second_per_rep": per_rep,
            "sentences_per_second_total": median([r["sentences_per_second_total"] for r in reps]),
            "median_step_ms": median([median(r["step_seconds"]) * 1e3 for r in reps]),
            # CPU seconds of the process per step (all threads): less sensitive to other load than wall
            # time, though OpenMP spin-waits inflate it on a busy machine.
            "median_step_cpu_ms": median([median(r.get("step_cpu_seconds", [])) * 1e3 for r in reps]),
            "peak_rss_mb": median([r["peak_rss_mb"] for r in reps]),
            "train_rss_growth_mb": median([r["peak_rss_mb"] - r["rss_before_train_mb"] for r in reps]),
            "tokenise_seconds": median([r["tokenise_seconds"] for r in reps]),
            "stsb_dev_after": median([r["stsb_dev_after"] for r in reps if "stsb_dev_after" in r]),
        }
    base = out.get(BASELINE_SIDE)
    for s in out.values():
        s["speedup_vs_st_fp32"] = (
            ratio(s["sentences_per_second"], base["sentences_per_second"]) if base else float("nan")
        )
    for prec in ("fp32", "bf16"):  # like-for-like precision: what the other levers give on their own
        ours, st = out.get(f"ours-{prec}"), out.get(f"st-{prec}")
        if ours and st:
            ours[f"speedup_vs_st_{prec}"] = ratio(ours["sentences_per_second"], st["sentences_per_second"])
    return out


def summarise_quality(dev: dict[str, list[float]], seeds: list[int], steps: int) -> dict[str, Any]:
    """STS-B dev after ``steps`` per side and seed, and a paired t-test (first side - second side)."""
    from focalcse.stats import paired_ttest, summarize

    first, second = list(dev)
    return {
        "seeds": seeds,
        "steps": steps,
        "dev": dev,
        "summary": {side: summarize(v).to_dict() for side, v in dev.items()},
        "test": {"treatment": first, "baseline": second, **paired_ttest(dev[first], dev[second]).to_dict()},
    }


def summarise_eval(result: dict[str, Any]) -> dict[str, Any]:
    runs = result["runs"]
    ref_runs = runs.get("ours-fp32") or runs.get("st-fp32")
    ref = ref_runs[0]["scores"]
    sides: dict[str, Any] = {}
    for side, reps in runs.items():
        if not reps:
            continue
        scores = reps[0]["scores"]
        diffs = {t: scores[t] - ref[t] for t in ref}
        sides[side] = {
            "seconds": median([r["seconds"] for r in reps]),
            "seconds_per_rep": [r["seconds"] for r in reps],
            "cpu_seconds": median([r["cpu_seconds"] for r in reps]),
            "scores": scores,
            "avg": sum(scores.values()) / len(scores),
            "diff_vs_fp32_ref": diffs,
            "max_abs_diff": max(abs(v) for v in diffs.values()),
        }
    st = sides.get("st-fp32")
    for s in sides.values():
        s["speedup_vs_st_fp32"] = ratio(st["seconds"], s["seconds"]) if st else float("nan")
        s["cpu_speedup_vs_st_fp32"] = ratio(st["cpu_seconds"], s["cpu_seconds"]) if st else float("nan")
    return {
        "reference": "ours-fp32" if runs.get("ours-fp32") else "st-fp32",
        "sides": sides,
        **{k: result[k] for k in ("tasks", "sentences", "unique_sentences", "eval_max_length")},
        "stsb_dev_start": result.get("stsb_dev_start"),
    }


def summarise_loss(result: dict[str, Any]) -> dict[str, Any]:
    step = {k: median(v) for k, v in result["step_seconds"].items()}
    cpu = {k: median(v) for k, v in result.get("step_cpu_seconds", {}).items()}
    alone = {k: median(v) for k, v in result["loss_alone_seconds"].items()}
    return {
        "median_step_ms": {k: v * 1e3 for k, v in step.items()},
        "step_ratio_focal_over_infonce": ratio(step["focal_infonce"], step["infonce"]),
        "median_step_cpu_ms": {k: v * 1e3 for k, v in cpu.items()},
        "cpu_step_ratio_focal_over_infonce": ratio(cpu["focal_infonce"], cpu["infonce"]) if cpu else None,
        "paired_step_ratio": median(result.get("paired_step_ratios", [])),
        "n_paired_steps": len(result.get("paired_step_ratios", [])),
        "n_steps": {k: len(v) for k, v in result["step_seconds"].items()},
        "loss_alone_us": {k: v * 1e6 for k, v in alone.items()},
    }


def _mark(ok: bool | None) -> str:
    return "" if ok is None else (" ✓" if ok else " ✗")


def markdown(report: dict[str, Any]) -> str:
    """A short Markdown summary of ``report`` (what ``bench.py`` writes to RESULTS.md)."""
    cfg, mach = report["config"], report["machine"]
    lines = [
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
    tr = report.get("train")
    if tr:
        lines += [
            f"## Training: {BACKBONE}, batch {cfg['batch_size']}, max_len {cfg['max_len']}, InfoNCE tau={cfg['temperature']}, "
            f"lr {cfg['lr']}, {cfg['train_steps']} steps x {cfg['train_reps']} reps",
            "",
            "Pooler: CLS + fresh Linear/Tanh MLP in training (identical initial weights on both sides), CLS without "
            "the MLP for STS-B dev. Throughput = batch / median step time (first "
            f"{cfg['train_warmup']} steps dropped), median over repetitions; peak memory = the side's process peak RSS "
            "(its growth during training in brackets).",
            "",
            "| side | sentences/s | vs ST fp32 | median step ms (CPU ms) | peak RSS MB (train growth) | STS-B dev after |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for side, s in tr.items():
            sp = s["speedup_vs_st_fp32"]
            ok = sp >= TARGETS["train_speedup"] if side.startswith("ours") and sp == sp else None
            lines.append(
                f"| {side} | {s['sentences_per_second']:.1f} | {sp:.2f}x{_mark(ok)} | {s['median_step_ms']:.0f} "
                f"({s['median_step_cpu_ms']:.0f}) | "
                f"{s['peak_rss_mb']:.0f} ({s['train_rss_growth_mb']:+.0f}) | {s['stsb_dev_after']:.2f} |"
            )
        like = [
            f"{side}: {s[f'speedup_vs_st_{p}']:.2f}x vs st-{p}"
            for side, s in tr.items()
            for p in ("fp32", "bf16")
            if side == f"ours-{p}" and f"st-{p}" in tr
        ]
        start = (report.get("eval") or {}).get("stsb_dev_start")
        lines += [
            "",
            f"Target: ours >= {TARGETS['train_speedup']}x sentence-transformers (its default fp32 recipe) at the same or "
            "better STS-B dev."
            + (f" Like-for-like precision: {'; '.join(like)}." if like else "")
            + (f" STS-B dev before training: {start:.2f}." if start is not None else ""),
            "",
        ]
    qu = report.get("quality")
    if qu:
        t = qu["test"]
        lines += [
            f"## Quality: STS-B dev after {qu['steps']} steps, seeds {', '.join(map(str, qu['seeds']))}",
            "",
            f"Each seed draws its own {qu['steps'] * cfg['batch_size']}-sentence sample and trains both sides on it "
            f"(batch {cfg['batch_size']}, max_len {cfg['max_len']}, InfoNCE tau={cfg['temperature']}, lr {cfg['lr']}, "
            "the training benchmark's pooler; STS-B dev scored in fp32 with the same evaluator).",
            "",
            "| side | " + " | ".join(f"seed {x}" for x in qu["seeds"]) + " | mean ± std |",
            "|---|" + "---:|" * (len(qu["seeds"]) + 1),
        ]
        for side, values in qu["dev"].items():
            sm = qu["summary"][side]
            lines.append(
                f"| {side} | "
                + " | ".join(f"{v:.2f}" for v in values)
                + f" | {sm['mean']:.2f} ± {sm['std']:.2f} |"
            )
        lines += [
            "",
            f"{t['treatment']} - {t['baseline']}: {t['mean_diff']:+.2f} (95% CI {t['ci_low']:+.2f} to {t['ci_high']:+.2f}, "
            f"paired t-test p = {t['p_value']:.3g}, n = {t['n']}).",
            "",
        ]
    ev = report.get("eval")
    if ev:
        sides = ev["sides"]
        lines += [
            f"## STS evaluation: {len(ev['tasks'])} task(s), all setting, batch {cfg['eval_batch_size']}, "
            f"{ev['sentences']} sentences ({ev['unique_sentences']} unique), truncation {ev['eval_max_length']}",
            "",
            f"Same fixed model ({BACKBONE}, CLS pooler). ST = `encode` + cosine + scipy Spearman per task; ours = "
            f"`evaluate_sts`. Wall time = median over repetitions. Score reference: {ev['reference']}.",
            "",
            "| side | wall s (CPU s) | ST / side, wall (CPU) | avg | max abs diff vs fp32 |",
            "|---|---:|---:|---:|---:|",
        ]
        for side, s in sides.items():
            sp = s["speedup_vs_st_fp32"]
            ok = sp >= TARGETS["eval_speedup"] if side == "ours-bf16" and sp == sp else None
            dok = s["max_abs_diff"] <= TARGETS["eval_max_abs_diff"]
            lines.append(
                f"| {side} | {s['seconds']:.1f} ({s['cpu_seconds']:.1f}) | {sp:.2f}x{_mark(ok)} "
                f"({s['cpu_speedup_vs_st_fp32']:.2f}x) | "
                f"{s['avg']:.2f} | {s['max_abs_diff']:.3f}{_mark(dok)} |"
            )
        tasks = ev["tasks"]
        lines += ["", "| side | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
        for side, s in sides.items():
            lines.append(
                f"| {side} | "
                + " | ".join(f"{s['scores'][t]:.2f} ({s['diff_vs_fp32_ref'][t]:+.3f})" for t in tasks)
                + " |"
            )
        lines += [
            "",
            f"Targets: ours-bf16 >= {TARGETS['eval_speedup']}x faster than ST; every task within "
            f"{TARGETS['eval_max_abs_diff']} of the fp32 reference (differences in brackets).",
            "",
        ]
    lo = report.get("loss")
    if lo:
        r, pr = lo["step_ratio_focal_over_infonce"], lo["paired_step_ratio"]
        ms, us, cms = lo["median_step_ms"], lo["loss_alone_us"], lo.get("median_step_cpu_ms", {})
        lines += [
            f"## Focal-InfoNCE vs InfoNCE ({cfg['loss_precision']}, our trainer, same batches, alternating)",
            "",
            "| loss | median step ms (CPU ms) | steps timed | loss alone fwd+bwd us |",
            "|---|---:|---:|---:|",
            *(
                f"| {k} | {ms[k]:.0f} ({cms.get(k, float('nan')):.0f}) | {lo['n_steps'][k]} | {us[k]:.0f} |"
                for k in ("infonce", "focal_infonce")
            ),
            "",
            f"Paired step-time ratio focal / infonce (median over {lo['n_paired_steps']} adjacent step pairs, same batch, "
            f"the trainer's step mirrored on two model copies): {pr:.3f}{_mark(pr <= TARGETS['focal_step_ratio'])}. "
            f"Ratio of the trainer's median step times (alternating `train()` runs): {r:.3f}{_mark(r <= TARGETS['focal_step_ratio'])} "
            f"(target <= {TARGETS['focal_step_ratio']}; CPU-time ratio {lo.get('cpu_step_ratio_focal_over_infonce') or float('nan'):.3f}).",
            "",
        ]
    return "\n".join(lines)


def print_summary(report: dict[str, Any]) -> None:
    print()
    print(markdown(report))


# ====================================================================== main
def _sample_corpus(corpus: Path, n: int, seed: int, dest: Path) -> None:
    from focalcse.corpus import read_sentences, sample_sentences

    sentences = sample_sentences(read_sentences(corpus), n, seed)
    dest.write_text("\n".join(sentences) + "\n", encoding="utf-8")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--preset", choices=sorted(PRESETS), default="smoke", help="size defaults (default: smoke)"
    )
    p.add_argument(
        "--only",
        default="train,eval,loss",
        help="comma list of train, eval, loss, quality (quality: STS-B dev over seeds, opt-in)",
    )
    p.add_argument(
        "--data-mirror",
        default=os.environ.get("FOCALCSE_DATA_MIRROR") or str(REPO.parent / "shared" / "data"),
    )
    p.add_argument("--corpus", default=None, help="default: <mirror>/corpus/wiki1m_standin.txt.gz")
    p.add_argument("--sts-dir", default=None, help="default: <mirror>/senteval/downstream")
    p.add_argument("--seed", type=int, default=42, help="sample and training seed")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--m", type=float, default=0.3, help="Focal-InfoNCE margin")
    p.add_argument("--st-max-grad-norm", type=float, default=0.0, help="ST clipping (0 = none, as ours)")
    p.add_argument("--threads", type=int, default=0, help="torch threads in every worker (0 = torch default)")
    for key, value in PRESETS["full"].items():
        p.add_argument(
            f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"full preset: {value}"
        )
    p.add_argument("--eval-batch-size", type=int, default=128)
    p.add_argument("--loss-precision", choices=("fp32", "bf16"), default="bf16")
    p.add_argument("--out-json", default=str(REPO / "benchmarks" / "results.json"))
    p.add_argument("--out-md", default=str(REPO / "benchmarks" / "RESULTS.md"))
    p.add_argument("--note", default="", help="a remark printed in RESULTS.md (e.g. 'shared machine')")
    p.add_argument("--keep-work", action="store_true", help="keep the worker logs and specs")
    args = p.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    bad = only - {"train", "eval", "loss", "quality"}
    if bad:
        raise SystemExit(f"--only: unknown {sorted(bad)}; expected train, eval, loss, quality")
    quality_sides = [s.strip() for s in args.quality_sides.split(",") if s.strip()]
    if "quality" in only and (len(quality_sides) != 2 or any(s not in TRAIN_SIDES for s in quality_sides)):
        raise SystemExit(f"--quality-sides {args.quality_sides!r}: expected two of {', '.join(TRAIN_SIDES)}")
    mirror = Path(args.data_mirror)
    corpus = Path(args.corpus) if args.corpus else mirror / "corpus" / "wiki1m_standin.txt.gz"
    sts_dir = str(Path(args.sts_dir) if args.sts_dir else mirror / "senteval" / "downstream")
    train_sides = [s.strip() for s in args.train_sides.split(",") if s.strip()]
    unknown = [s for s in train_sides if s not in TRAIN_SIDES]
    if unknown:
        raise SystemExit(f"--train-sides: unknown {unknown}; expected some of {', '.join(TRAIN_SIDES)}")
    eval_tasks = [t.strip() for t in args.eval_tasks.split(",") if t.strip()]
    if any(t not in TASKS for t in eval_tasks):
        raise SystemExit(f"--eval-tasks: expected some of {', '.join(TASKS)}")
    if "train" in only and BASELINE_SIDE not in train_sides:
        print(f"note: {BASELINE_SIDE} not among --train-sides; no speed-up ratio will be computed")

    started = time.perf_counter()
    report: dict[str, Any] = {
        "preset": args.preset,
        "command": shlex.join(
            ["python", "benchmarks/bench.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "config": {k: v for k, v in vars(args).items() if k not in ("out_json", "out_md")},
        "machine": machine_info(),
        "load_start": load_average(),
        "targets": TARGETS,
        "json_name": Path(args.out_json).name,
        "note": args.note,
    }
    work = Path(tempfile.mkdtemp(prefix="focalcse-bench-"))
    common = {
        "batch_size": args.batch_size,
        "max_len": args.max_len,
        "lr": args.lr,
        "temperature": args.temperature,
        "m": args.m,
        "seed": args.seed,
        "sts_dir": sts_dir,
        "threads": args.threads,
    }
    try:
        if only & {"train", "loss"}:
            n = args.batch_size * max(
                args.train_steps if "train" in only else 0, args.loss_steps if "loss" in only else 0
            )
            sample = work / "sample.txt"
            print(f"sampling {n} sentences from {corpus} (seed {args.seed}) ...", flush=True)
            _sample_corpus(corpus, n, args.seed, sample)
            common["sample_file"] = str(sample)
        if "train" in only:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in train_sides}
            for rep in range(args.train_reps):
                k = rep % len(train_sides)  # rotate the order so no side always runs first
                for side in train_sides[k:] + train_sides[:k]:
                    who, prec = side.split("-")
                    spec = {
                        **common,
                        "precision": prec,
                        "steps": args.train_steps,
                        "warmup": args.train_warmup,
                        "dev": rep == 0,  # same seed and data every rep: score the first
                        "st_max_grad_norm": args.st_max_grad_norm,
                    }
                    print(f"train {side} rep {rep + 1}/{args.train_reps} ...", flush=True)
                    r = run_worker(f"train-{who}", spec, work, f"train-{side}-{rep}")
                    runs[side].append(r)
                    dev = f"{r['stsb_dev_after']:.2f}" if "stsb_dev_after" in r else "scored in rep 1 only"
                    print(
                        f"  {side}: {args.batch_size / median(r['step_seconds']):.1f} sent/s, "
                        f"peak RSS {r['peak_rss_mb']:.0f} MB, STS-B dev {dev}",
                        flush=True,
                    )
            report["train"] = summarise_train(runs, args.batch_size)
            report["train_raw"] = runs
        if "loss" in only:
            print("focal vs infonce ...", flush=True)
            spec = {
                **common,
                "precision": args.loss_precision,
                "steps": args.loss_steps,
                "warmup": 2,
                "reps": args.loss_reps,
                "paired_steps": args.loss_paired_steps,
            }
            raw = run_worker("loss", spec, work, "loss")
            report["loss"] = summarise_loss(raw)
            report["loss_raw"] = raw
        if "quality" in only:
            seeds = [int(x) for x in args.quality_seeds.split(",") if x.strip()]
            dev: dict[str, list[float]] = {side: [] for side in quality_sides}
            for i, seed in enumerate(seeds):
                sample = work / f"sample-seed{seed}.txt"
                _sample_corpus(corpus, args.batch_size * args.quality_steps, seed, sample)
                for side in quality_sides if i % 2 == 0 else quality_sides[::-1]:
                    who, prec = side.split("-")
                    spec = {
                        **common,
                        "seed": seed,
                        "sample_file": str(sample),
                        "precision": prec,
                        "steps": args.quality_steps,
                        "warmup": min(args.train_warmup, max(args.quality_steps - 2, 0)),
                        "dev": True,
                        "st_max_grad_norm": args.st_max_grad_norm,
                    }
                    print(f"quality {side} seed {seed} ({args.quality_steps} steps) ...", flush=True)
                    r = run_worker(f"train-{who}", spec, work, f"quality-{side}-{seed}")
                    dev[side].append(r["stsb_dev_after"])
                    print(f"  {side}: STS-B dev {r['stsb_dev_after']:.2f}", flush=True)
            report["quality"] = summarise_quality(dev, seeds, args.quality_steps)
        if "eval" in only:
            print(f"STS evaluation on {', '.join(eval_tasks)} ...", flush=True)
            spec = {
                **common,
                "tasks": eval_tasks,
                "batch_size": args.eval_batch_size,
                "reps": args.eval_reps,
                "fp32_reps": args.eval_fp32_reps,
                "dev_start": "train" in only,
            }
            raw = run_worker("eval", spec, work, "eval")
            report["eval"] = summarise_eval(raw)
            report["eval_raw"] = raw
    finally:
        if not args.keep_work:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"worker files kept in {work}")
    report["load_end"] = load_average()
    report["wall_seconds"] = time.perf_counter() - started
    report["finished"] = time.strftime("%Y-%m-%d %H:%M")
    Path(args.out_json).write_text(json.dumps(report, indent=2) + "\n")
    Path(args.out_md).write_text(markdown(report) + "\n")
    print_summary(report)
    print(f"\nwall {report['wall_seconds']:.0f} s; wrote {args.out_json} and {args.out_md}")
    return 0


def _worker_main(kind: str, spec_file: str, out_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    result = WORKERS[kind](spec)
    Path(out_file).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        sys.exit(_worker_main(*sys.argv[2:5]))
    sys.exit(main())
