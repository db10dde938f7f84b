"""One function per pipeline stage: read inputs, call the library, write outputs atomically.

``stages/*.py`` are thin command-line wrappers around these; everything here is importable and
testable without DVC, Prefect or MLflow (tracking arrives through the ``log_metrics`` callback).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.stats import paired_ttest, summarize
from focalcse.sts import TASKS

METRIC_KEYS = (*TASKS, "avg")


def run_name(backbone: str, loss: str, seed: int) -> str:
    """``<backbone>-<loss>-seed<k>``: the name of one matrix item in files and tracking."""
    return f"{backbone.replace('/', '__')}-{loss}-seed{seed}"


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------- sample
def run_sample(params: Params, out_file: str | os.PathLike) -> dict[str, Any]:
    """Seeded sample of ``data.num_sentences`` corpus sentences -> ``out_file`` (one a line)."""
    from focalcse.corpus import read_sentences, sample_sentences
    from focalcse.sources import corpus_path

    source = corpus_path(params.data.mirror or None)
    sentences = sample_sentences(read_sentences(source), params.data.num_sentences, params.data.seed)
    if any("\n" in s for s in sentences):  # pragma: no cover - read_sentences splits on lines
        raise ValueError("sampled sentence contains a newline")
    _write_text_atomic(Path(out_file), "\n".join(sentences) + "\n")
    return {"source": str(source), "num_sentences": len(sentences), "seed": params.data.seed}


# ---------------------------------------------------------------- prepare_sts
def run_prepare_sts(params: Params, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Read SentEval's STS data (counts checked) and write normalised TSVs + manifest to ``out_dir``."""
    from focalcse.sources import senteval_dir
    from focalcse.sts import read_sick, read_stsb, read_task, write_prepared

    root = senteval_dir(params.data.mirror or None)
    splits = [(t, read_task(root, t)) for t in TASKS]
    splits += [("STSBenchmark-dev", read_stsb(root, "dev")), ("STSBenchmark-train", read_stsb(root, "train"))]
    splits += [("SICKRelatedness-train", read_sick(root, "train"))]
    out = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
    try:
        manifest = write_prepared(splits, tmp, source=str(root))
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _replace_dir(tmp: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


# ---------------------------------------------------------------- train
def run_train(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    corpus_file: str | os.PathLike,
    sts_dir: str | os.PathLike,
    model_dir: str | os.PathLike,
    metrics_file: str | os.PathLike,
    curve_file: str | os.PathLike,
    dev_file: str | os.PathLike,
    log_metrics=None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train one matrix item; write the best model, a metrics JSON and the loss / dev curves."""
    from focalcse.evaluation import stsb_dev_evaluator
    from focalcse.model import SentenceEncoder
    from focalcse.provenance import provenance, write_json_atomic
    from focalcse.training import tokenize_corpus, train

    cfg = params.train_config(backbone, loss, seed)
    source = params.backbone_source(backbone)
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(
        source,
        pooler=cfg.pooler,
        mlp_only_train=cfg.mlp_only_train,
        max_seq_len=cfg.max_seq_len,
        mlp_init="fresh",
        seed=cfg.seed,
    )
    corpus = tokenize_corpus(corpus_file, encoder.tokenizer, cfg.max_seq_len)
    dev = stsb_dev_evaluator(str(sts_dir), batch_size=params.eval.batch_size, precision=cfg.precision)
    identity = {"backbone": backbone, "backbone_source": source, "loss": loss, "seed": seed}
    result = train(
        encoder,
        corpus,
        cfg,
        model_dir,
        dev_evaluator=dev,
        log_metrics=log_metrics or (lambda m, s: None),
        save_extra={**identity, "train_config": asdict(cfg)},
        progress=progress,
    )
    wall = time.perf_counter() - start
    metrics = {
        "best_step": result.best_step,
        "stsb_dev_best": result.best_dev,
        "stsb_dev_start": result.dev_curve[0]["stsb_dev_spearman"]
        if cfg.eval_at_start and result.dev_curve
        else None,
        "steps": result.steps,
        "final_loss": result.history[-1]["loss"] if result.history else None,
        "train_seconds": result.train_seconds,
        "wall_seconds": wall,
        "sentences_per_second": result.sentences_per_second,
        "peak_memory_mb": result.peak_memory_mb,
        "meta": provenance(
            **identity,
            train_config=asdict(cfg),
            corpus={"file": str(corpus_file), "sha256": sha256_file(corpus_file), "sentences": len(corpus)},
            sts_dir=str(sts_dir),
        ),
    }
    write_json_atomic(curve_file, result.history)
    write_json_atomic(dev_file, result.dev_curve)
    write_json_atomic(metrics_file, metrics)
    return metrics


# ---------------------------------------------------------------- evaluate
def run_evaluate(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    model_dir: str | os.PathLike,
    sts_dir: str | os.PathLike,
    out_file: str | os.PathLike,
    progress: bool = True,
) -> dict[str, Any]:
    """7-task STS evaluation of a trained model folder with its recorded pooler."""
    from focalcse.evaluation import evaluate_sts
    from focalcse.model import SentenceEncoder, read_record
    from focalcse.provenance import provenance, write_json_atomic

    record = read_record(model_dir)
    if record is None:
        raise ValueError(f"{model_dir}: no focalcse.json; not a model folder written by the train stage")
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(model_dir)
    result = evaluate_sts(
        encoder,
        str(sts_dir),
        tasks=params.eval.tasks,
        batch_size=params.eval.batch_size,
        precision=params.eval.precision,
        progress=progress,
    )
    result["meta"] = provenance(
        backbone=backbone,
        loss=loss,
        seed=seed,
        model=str(model_dir),
        pooler=record.eval_pooler,
        best_step=(record.extra or {}).get("best_step"),
        eval_config=asdict(params.eval),
        sts_dir=str(sts_dir),
        setting="all (STS12-16 subsets pooled); wmean under 'wmean'",
        wall_time_s=time.perf_counter() - start,
    )
    write_json_atomic(out_file, result)
    return result


# ---------------------------------------------------------------- significance
def load_eval_runs(eval_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every evaluation JSON in ``eval_dir`` (each carries backbone/loss/seed in ``meta``)."""
    runs = []
    for path in sorted(Path(eval_dir).glob("*.json")):
        data = json.loads(path.read_text())
        meta = data.get("meta", {})
        missing = [k for k in ("backbone", "loss", "seed") if k not in meta]
        if missing:
            raise ValueError(f"{path}: meta lacks {missing}; not written by the evaluate stage")
        runs.append(data)
    if not runs:
        raise ValueError(f"{eval_dir}: no evaluation JSON files")
    return runs


def run_significance(
    params: Params, eval_dir: str | os.PathLike, out_file: str | os.PathLike
) -> dict[str, Any]:
    """Per backbone: mean±std per task for each loss and a paired t-test treatment vs baseline over
    the seeds both losses have."""
    from focalcse.provenance import provenance, write_json_atomic

    sig = params.significance
    runs = [r for r in load_eval_runs(eval_dir) if r["meta"]["backbone"] in params.sweep.backbones]
    keys = [k for k in METRIC_KEYS if k == "avg" or k in params.eval.tasks] + ["alignment", "uniformity"]
    out: dict[str, Any] = {
        "baseline": sig.baseline,
        "treatment": sig.treatment,
        "alpha": sig.alpha,
        "backbones": {},
    }
    for backbone in params.sweep.backbones:
        by_loss: dict[str, dict[int, dict]] = {}
        for r in runs:
            if r["meta"]["backbone"] == backbone and r["meta"]["seed"] in params.sweep.seeds:
                by_loss.setdefault(r["meta"]["loss"], {})[int(r["meta"]["seed"])] = r
        entry: dict[str, Any] = {"losses": {}, "ttest": {}, "seeds": {}}
        for loss, seeds in sorted(by_loss.items()):
            entry["seeds"][loss] = sorted(seeds)
            entry["losses"][loss] = {
                k: summarize([seeds[s][k] for s in sorted(seeds)]).to_dict()
                for k in keys
                if all(k in seeds[s] for s in seeds)
            }
            entry["losses"][loss]["wmean_avg"] = summarize(
                [seeds[s]["wmean"]["avg"] for s in sorted(seeds)]
            ).to_dict()
        if sig.baseline in by_loss and sig.treatment in by_loss:
            paired = sorted(set(by_loss[sig.baseline]) & set(by_loss[sig.treatment]))
            entry["paired_seeds"] = paired
            for k in keys:
                treat = [by_loss[sig.treatment][s][k] for s in paired]
                base = [by_loss[sig.baseline][s][k] for s in paired]
                entry["ttest"][k] = paired_ttest(treat, base, sig.alpha).to_dict()
        out["backbones"][backbone] = entry
    out["meta"] = provenance(runs=len(runs), eval_dir=str(eval_dir))
    write_json_atomic(out_file, out)
    return out


# ---------------------------------------------------------------- report
def _cell(summary: dict[str, float] | None) -> str:
    if not summary:
        return "–"
    return f"{summary['mean']:.2f} ± {summary['std']:.2f}"


def table2_markdown(significance: dict[str, Any]) -> str:
    """Table 2 shape: per backbone, a row per loss (mean ± std over seeds) and a p-value row."""
    cols = [
        k
        for k in METRIC_KEYS
        if any(
            k in e["losses"].get(loss, {}) for e in significance["backbones"].values() for loss in e["losses"]
        )
    ]
    names = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "avg": "Avg."}
    lines = [
        "| Backbone | Loss | seeds | " + " | ".join(names.get(c, c) for c in cols) + " |",
        "|---|---|---|" + "---|" * len(cols),
    ]
    for backbone, entry in significance["backbones"].items():
        for loss, summ in entry["losses"].items():
            n = len(entry["seeds"][loss])
            lines.append(
                f"| {backbone} | {loss} | {n} | " + " | ".join(_cell(summ.get(c)) for c in cols) + " |"
            )
        if entry.get("ttest"):
            ps = []
            for c in cols:
                t = entry["ttest"].get(c)
                ps.append(
                    "–"
                    if t is None or t["p_value"] != t["p_value"]
                    else f"p={t['p_value']:.3g}{' *' if t['significant'] else ''}"
                )
            lines.append(
                f"| {backbone} | paired t-test ({significance['treatment']} − {significance['baseline']}) | {len(entry.get('paired_seeds', []))} | "
                + " | ".join(ps)
                + " |"
            )
    return "\n".join(lines) + "\n"


def run_report(params: Params, significance_file: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Markdown report with the Table 2-style table from the significance output."""
    significance = json.loads(Path(significance_file).read_text())
    meta = significance.get("meta", {})
    text = [
        "# Focal-InfoNCE reproduction: STS results",
        "",
        'Spearman × 100, SimCSE\'s "all" setting, mean ± std over seeds; `*` marks p < '
        f"{significance['alpha']} (two-sided paired t-test over matched seeds).",
        "",
        table2_markdown(significance),
        f"Produced by commit `{meta.get('git_commit', 'unknown')}` from `{significance_file}` "
        f"({meta.get('runs', '?')} evaluation runs).",
        "",
    ]
    out = Path(out_dir) / "table2.md"
    _write_text_atomic(out, "\n".join(text))
    return out
