"""STS evaluation wall time: sentence-transformers' encode + Spearman against ``evaluate_sts``.

ST's ``encode`` + cosine + scipy Spearman over each task's pooled pairs ("all" setting), against
``focalcse.eval.sts_eval.evaluate_sts`` at bf16 (and fp32, the score reference) on the same fixed model
(all-MiniLM-L6-v2, CLS pooler), same batch size, same truncation. One process, sides alternating, one
warm-up encode per side first. The tasks are ``--eval-tasks``, some of the registry's
(``focalcse.data.tasks.TASKS``; all seven in the full preset).

``bench.py --only eval``.
"""

from __future__ import annotations

import time
from typing import Any

from common import (
    BACKBONE,
    TARGETS,
    Bench,
    backbone_path,
    dev_spearman,
    mark,
    median,
    ratio,
    run_worker,
    set_threads,
)

NAME = "eval"


def _st_scores(
    model: Any, pairs: dict[str, tuple[list[str], list[str], list[float]]], batch_size: int
) -> dict[str, float]:
    """sentence-transformers' way: encode each task's pooled pairs, cosine, scipy Spearman x 100."""
    from focalcse.eval.sts_eval import cosine_spearman

    scores = {}
    for task, (s1, s2, gold) in pairs.items():
        v = model.encode(
            s1 + s2, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False
        ).cpu()
        scores[task] = cosine_spearman(v[: len(s1)], v[len(s1) :], gold)
    return scores


def _pooled_pairs(sts_dir: str, tasks: list[str]) -> dict[str, tuple[list[str], list[str], list[float]]]:
    """Per task: (first sentences, second sentences, gold scores), every subset pooled."""
    from focalcse.data.tasks import load_split

    pairs = {}
    for task in tasks:
        subsets = load_split(sts_dir, task).subsets.values()
        pairs[task] = (
            [s for a, _, _ in subsets for s in a],
            [s for _, b, _ in subsets for s in b],
            [g for _, _, y in subsets for g in y],
        )
    return pairs


def worker_eval(spec: dict[str, Any]) -> dict[str, Any]:
    """STS evaluation: ST encode + Spearman vs ``evaluate_sts`` (bf16, fp32), alternating."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # pragma: no cover - sentence-transformers 3-5
        from sentence_transformers.models import Pooling, Transformer

    from focalcse.core.encode import encode
    from focalcse.core.model import SentenceEncoder, eval_max_length
    from focalcse.eval.sts_eval import evaluate_sts

    set_threads(spec)
    tasks, sts_dir, bs = spec["tasks"], spec["sts_dir"], spec["batch_size"]
    encoder = SentenceEncoder.from_pretrained(BACKBONE, pooler="cls_before_pooler")
    max_len = eval_max_length(encoder)
    transformer = Transformer(backbone_path(), max_seq_length=max_len)
    st_model = SentenceTransformer(
        modules=[transformer, Pooling(transformer.auto_model.config.hidden_size, pooling_mode="cls")],
        device="cpu",
    )
    pairs = _pooled_pairs(sts_dir, tasks)
    n_sent = sum(2 * len(p[2]) for p in pairs.values())
    n_unique = len({s for p in pairs.values() for s in p[0] + p[1]})

    warm = [s for p in pairs.values() for s in p[0]][:256]
    for prec in ("fp32", "bf16"):  # one-off kernel set-up out of the timings
        encode(encoder, warm, batch_size=bs, precision=prec)
    st_model.encode(warm, batch_size=bs, show_progress_bar=False)

    def run_side(side: str) -> dict[str, float]:
        if side == "st-fp32":
            return _st_scores(st_model, pairs, bs)
        prec = side.split("-")[1]
        r = evaluate_sts(encoder, sts_dir, tasks=tasks, batch_size=bs, precision=prec, progress=False)
        return {k: float(r[k]) for k in tasks}

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
        scores = run_side(side)
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
        out["stsb_dev_start"] = dev_spearman(encoder, sts_dir)
    return out


def run(bench: Bench, tasks: list[str]) -> dict[str, Any]:
    """The evaluation worker on ``tasks``; scores STS-B dev of the untrained model too when training
    is measured (the training section's "before" figure)."""
    args = bench.args
    print(f"STS evaluation on {', '.join(tasks)} ...", flush=True)
    spec = {
        **bench.base,
        "tasks": tasks,
        "batch_size": args.eval_batch_size,
        "reps": args.eval_reps,
        "fp32_reps": args.eval_fp32_reps,
        "dev_start": "train" in bench.only,
    }
    raw = run_worker(worker_eval, spec, bench.work, "eval")
    return {"eval": summarise(raw), "eval_raw": raw}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
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


def markdown(ev: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """RESULTS.md's evaluation section (``ev`` = ``report['eval']``)."""
    cfg = report["config"]
    sides = ev["sides"]
    lines = [
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
            f"| {side} | {s['seconds']:.1f} ({s['cpu_seconds']:.1f}) | {sp:.2f}x{mark(ok)} "
            f"({s['cpu_speedup_vs_st_fp32']:.2f}x) | "
            f"{s['avg']:.2f} | {s['max_abs_diff']:.3f}{mark(dok)} |"
        )
    tasks = ev["tasks"]
    lines += ["", "| side | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for side, s in sides.items():
        lines.append(
            f"| {side} | "
            + " | ".join(f"{s['scores'][t]:.2f} ({s['diff_vs_fp32_ref'][t]:+.3f})" for t in tasks)
            + " |"
        )
    return lines + [
        "",
        f"Targets: ours-bf16 >= {TARGETS['eval_speedup']}x faster than ST; every task within "
        f"{TARGETS['eval_max_abs_diff']} of the fp32 reference (differences in brackets).",
        "",
    ]
