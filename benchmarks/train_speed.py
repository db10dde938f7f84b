"""Training throughput: our trainer against sentence-transformers' on the same backbone and data.

Unsupervised SimCSE, batch 64, max_len 32, InfoNCE tau=0.05, lr 3e-5: ours
(``focalcse.core.training.train``) at bf16 and fp32 autocast against sentence-transformers'
``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss(scale=1/tau)`` on (sentence, sentence)
pairs, same backbone, same pooler (CLS + fresh Linear/Tanh MLP in training, identical initial MLP
weights; the CLS vector without the MLP at evaluation), same sentences, same number of steps. Each side
runs in its own subprocess (so peak RSS is per side), sides alternate within every repetition. Step
time = wall time between consecutive step-end callbacks (ours: ``log_metrics``; ST: a
``TrainerCallback``), so both include batch preparation (ST tokenises per step, ours pre-tokenises in
the data stage, reported separately as ``tokenise_seconds``). After the steps, both models are scored
on STS-B dev with the same evaluator (``focalcse.eval.sts_eval.stsb_dev_evaluator``, fp32).

``bench.py --only train``; the workers also serve ``quality``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    BACKBONE,
    BASELINE_SIDE,
    TARGETS,
    Bench,
    backbone_path,
    current_rss_mb,
    dev_spearman,
    mark,
    median,
    peak_rss_mb,
    ratio,
    run_worker,
    set_threads,
    step_intervals,
    train_config,
)

NAME = "train"


# ====================================================================== workers
ITEM_STEPS = 128  # one CPU-default train item (params.yaml: 8192 sentences / batch 64)


def worker_train_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """Our trainer on the sample: per-step times, throughput, peak RSS, STS-B dev after the steps."""
    import torch

    from focalcse.core.model import SentenceEncoder
    from focalcse.core.training import tokenize_corpus, train

    set_threads(spec)
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
    cfg = train_config(spec, spec.get("loss", "infonce"))
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
    out = {
        "load_seconds": load_s,
        "tokenise_seconds": tokenise_s,
        "step_seconds": step_intervals(stamps, spec["warmup"]),
        "step_cpu_seconds": step_intervals(cpu_stamps, spec["warmup"]),
        "train_seconds": result.train_seconds,
        "sentences_per_second_total": result.sentences_per_second,
        "rss_before_train_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "steps_run": len(stamps),
    }
    if spec.get("dev"):
        out["stsb_dev_after"] = dev_spearman(encoder, spec["sts_dir"])
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

    from focalcse.core.model import SentenceEncoder

    set_threads(spec)
    t0 = time.perf_counter()
    path = backbone_path()
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
            max_grad_norm=spec["st_max_grad_norm"],  # 1.0 by default, as our train.max_grad_norm
            bf16=spec["precision"] == "bf16",
            seed=spec["seed"],
            logging_steps=spec["steps"] + 1,
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_drop_last=True,
            use_cpu=True,
            # the compiled side: transformers compiles the model with inductor (CPU code generation);
            # its compile time falls in the first steps, so it is in train_seconds, not in the median
            torch_compile=bool(spec.get("compile")),
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data, loss=loss, callbacks=[timer]
        )
        load_s = time.perf_counter() - t0
        rss_before = current_rss_mb()
        output = trainer.train()
    total = (timer.end[-1] - timer.begin[0]) if timer.end else float("nan")
    out = {
        "load_seconds": load_s,
        "tokenise_seconds": 0.0,  # tokenised inside every step by ST's data collator
        "step_seconds": step_intervals(timer.end, spec["warmup"]),
        "step_cpu_seconds": step_intervals(timer.cpu_end, spec["warmup"]),
        "train_seconds": total,
        "sentences_per_second_total": len(timer.end) * spec["batch_size"] / total if total else 0.0,
        "rss_before_train_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "torch_threads": torch.get_num_threads(),
        "final_loss": float(output.training_loss),  # ST reports the mean training loss
        "optimizer": str(args.optim),
        "steps_run": len(timer.end),
        "compiled": bool(spec.get("compile")),
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
        out["stsb_dev_after"] = dev_spearman(encoder, spec["sts_dir"])
    return out


WORKERS = {"ours": worker_train_ours, "st": worker_train_st}


def run_side(bench: Bench, side: str, label: str, **spec: Any) -> dict[str, Any]:
    """One training run of ``side`` (``ours-bf16``, ``st-fp32``, ``ours-bf16-padded`` ...) in its own
    process: the bench's base spec, the side's precision (and ``-padded``: ``train.unpad`` false), ST's
    clipping (``-compiled``: its ``torch_compile``), then ``spec`` (steps, warmup, dev, ...)."""
    who, precision, *variant = side.split("-")
    full = {
        **bench.base,
        "precision": precision,
        "unpad": variant != ["padded"],
        "compile": variant == ["compiled"],
        "st_max_grad_norm": bench.args.st_max_grad_norm,
        **spec,
    }
    return run_worker(WORKERS[who], full, bench.work, label)


# ====================================================================== measurement
def run(bench: Bench, sides: list[str]) -> dict[str, Any]:
    """``--train-reps`` repetitions of every side, the order rotated each repetition."""
    args = bench.args
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for rep in range(args.train_reps):
        k = rep % len(sides)  # rotate the order so no side always runs first
        for side in sides[k:] + sides[:k]:
            print(f"train {side} rep {rep + 1}/{args.train_reps} ...", flush=True)
            r = run_side(
                bench,
                side,
                f"train-{side}-{rep}",
                steps=args.train_steps,
                warmup=args.train_warmup,
                dev=rep == 0,  # same seed and data every rep: score the first
            )
            runs[side].append(r)
            dev = f"{r['stsb_dev_after']:.2f}" if "stsb_dev_after" in r else "scored in rep 1 only"
            print(
                f"  {side}: {args.batch_size / median(r['step_seconds']):.1f} sent/s, "
                f"peak RSS {r['peak_rss_mb']:.0f} MB, STS-B dev {dev}",
                flush=True,
            )
    return {"train": summarise(runs, args.batch_size), "train_raw": runs}


def summarise(runs: dict[str, list[dict[str, Any]]], batch_size: int) -> dict[str, Any]:
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
        if all("steps_run" in r for r in reps):  # recorded since the compiled sides (older runs: no)
            # time beyond the steady state: the whole run less its steps at the median step time, i.e.
            # the warm-up steps' excess (compilation, for a compiled side); and what one CPU-default
            # item (ITEM_STEPS steps) would take at that rate, that excess included
            excess = [r["train_seconds"] - r["steps_run"] * median(r["step_seconds"]) for r in reps]
            out[side]["startup_excess_seconds"] = median(excess)
            out[side]["startup_excess_seconds_per_rep"] = excess
            out[side]["item_steps"] = ITEM_STEPS
            out[side]["item_seconds"] = median(
                [e + ITEM_STEPS * median(r["step_seconds"]) for e, r in zip(excess, reps)]
            )
    base = out.get(BASELINE_SIDE)
    for s in out.values():
        s["speedup_vs_st_fp32"] = (
            ratio(s["sentences_per_second"], base["sentences_per_second"]) if base else float("nan")
        )
    for prec in ("fp32", "bf16"):  # like-for-like precision: what the other levers give on their own
        st = out.get(f"st-{prec}")
        compiled = out.get(f"st-{prec}-compiled")
        if compiled is not None:  # sentence-transformers at its best: the faster of eager and compiled
            best_name, best = max(
                ((n, s) for n, s in ((f"st-{prec}", st), (f"st-{prec}-compiled", compiled)) if s),
                key=lambda ns: ns[1]["sentences_per_second"],
            )
            for side, ours in out.items():
                if side.startswith(f"ours-{prec}"):
                    ours[f"speedup_vs_st_{prec}_best"] = ratio(
                        ours["sentences_per_second"], best["sentences_per_second"]
                    )
                    ours[f"st_{prec}_best_side"] = best_name
        for side, ours in out.items():
            if st and side.startswith(f"ours-{prec}"):
                ours[f"speedup_vs_st_{prec}"] = ratio(
                    ours["sentences_per_second"], st["sentences_per_second"]
                )
                # repetition i of each side against repetition i of the other (same order position)
                ours[f"speedup_vs_st_{prec}_per_rep"] = [
                    ratio(a, b)
                    for a, b in zip(ours["sentences_per_second_per_rep"], st["sentences_per_second_per_rep"])
                ]
    return out


def markdown(tr: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """RESULTS.md's training section (``tr`` = ``report['train']``)."""
    cfg = report["config"]
    lines = [
        f"## Training: {BACKBONE}, batch {cfg['batch_size']}, max_len {cfg['max_len']}, InfoNCE tau={cfg['temperature']}, "
        f"lr {cfg['lr']}, {cfg['train_steps']} steps x {cfg['train_reps']} reps",
        "",
        "Pooler: CLS + fresh Linear/Tanh MLP in training (identical initial weights on both sides), CLS without "
        "the MLP for STS-B dev. Throughput = batch / median step time (first "
        f"{cfg['train_warmup']} steps dropped), median over repetitions; peak memory = the side's process peak RSS "
        "(its growth during training in brackets).",
        "",
        "| side | sentences/s | vs ST at the same precision (per rep) | vs ST fp32, its default | median step ms "
        "(CPU ms) | peak RSS MB (train growth) | STS-B dev after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side, s in tr.items():
        who, prec = side.split("-")[:2]
        like = s.get(f"speedup_vs_st_{prec}")
        if who == "ours" and like is not None:
            ok = like >= TARGETS[f"train_speedup_{prec}"]
            reps = ", ".join(f"{r:.2f}" for r in s[f"speedup_vs_st_{prec}_per_rep"])
            like_cell = f"**{like:.2f}x**{mark(ok)} ({reps})"
        elif side.endswith("-compiled") and tr.get(f"st-{prec}"):
            like_cell = (
                f"{ratio(s['sentences_per_second'], tr[f'st-{prec}']['sentences_per_second']):.2f}x of eager"
            )
        else:
            like_cell = "1.00x" if who == "st" else "–"
        sp = s["speedup_vs_st_fp32"]
        lines.append(
            f"| {side} | {s['sentences_per_second']:.1f} | {like_cell} | {sp:.2f}x | {s['median_step_ms']:.0f} "
            f"({s['median_step_cpu_ms']:.0f}) | "
            f"{s['peak_rss_mb']:.0f} ({s['train_rss_growth_mb']:+.0f}) | {s['stsb_dev_after']:.2f} |"
        )
    best = [
        f"ours-{prec} {s[f'speedup_vs_st_{prec}_best']:.2f}x{mark(s[f'speedup_vs_st_{prec}_best'] >= TARGETS[f'train_speedup_{prec}'])} "
        f"(against {s[f'st_{prec}_best_side']})"
        for prec in ("bf16", "fp32")
        for side, s in tr.items()
        if side == f"ours-{prec}" and f"speedup_vs_st_{prec}_best" in s
    ]
    if best:
        lines += [
            "",
            "Against sentence-transformers at its best, the faster of its eager and `torch_compile` sides at the "
            f"same precision: {'; '.join(best)}.",
        ]
    timed = [(side, s) for side, s in tr.items() if "item_seconds" in s]
    if timed:
        lines += [
            "",
            f"Start-up beyond the steady state (the run less its steps at the median step time: the warm-up "
            f"steps' excess, compilation included) and one CPU-default item ({ITEM_STEPS} steps) at that rate: "
            + "; ".join(
                f"{side} {s['startup_excess_seconds']:.1f} s, item {s['item_seconds']:.0f} s"
                for side, s in timed
            )
            + ".",
        ]
    start = (report.get("eval") or {}).get("stsb_dev_start")
    return lines + [
        "",
        f"Targets, like for like: ours >= {TARGETS['train_speedup_bf16']}x sentence-transformers in bf16 and >= "
        f"{TARGETS['train_speedup_fp32']}x in fp32, the same precision on both sides (ours-*-padded: our trainer with "
        "`train.unpad: false`). Second, and a different comparison: our bf16 default against sentence-transformers' "
        f"fp32 default (the 'vs ST fp32' column; its old target {TARGETS['train_speedup']}x), which is mostly bf16 "
        "autocast, a setting sentence-transformers has too."
        + (f" STS-B dev before training: {start:.2f}." if start is not None else ""),
        "",
    ]
