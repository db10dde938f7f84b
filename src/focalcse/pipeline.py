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


TRAIN_FILES = ("metrics_file", "curve_file", "dev_file")  # the JSON outputs of a train item


def train_item_paths(backbone: str, loss: str, seed: int) -> dict[str, Any]:
    """A ``train`` matrix item's inputs and outputs as ``dvc.yaml`` declares them, as the path
    keywords of :func:`run_train` (shared by ``stages/train.py`` and ``scripts/train_ddp.py``)."""
    from focalcse.training import output_path

    name = run_name(backbone, loss, seed)
    return {
        "corpus_file": "data/corpus/train.txt",
        "sts_dir": "data/sts",
        "model_dir": output_path("models", backbone, loss, seed),
        "metrics_file": f"metrics/train/{name}.json",
        "curve_file": f"metrics/curves/loss/{name}.json",
        "dev_file": f"metrics/curves/dev/{name}.json",
    }


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
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # same filesystem: atomic rename
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
    parallel=None,
) -> dict[str, Any]:
    """Train one matrix item; write the best model, a metrics JSON and the loss / dev curves.

    ``parallel`` (a :class:`focalcse.distributed.DistributedContext`): one rank of a ``torchrun`` job;
    only rank 0 evaluates and writes, the others return ``{}``.
    """
    from focalcse.distributed import DistributedContext
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
    parallel = parallel or DistributedContext()
    with parallel.main_first():  # rank 0 fills the datasets cache, the others read it
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
        parallel=parallel,
    )
    if not parallel.is_main:
        return {}
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


# ---------------------------------------------------------------- ablate_tau / ablate_m
ABLATION_KINDS = {"tau": "temperature", "m": "m"}


def run_ablation(
    params: Params,
    kind: str,
    value: float,
    corpus_file: str | os.PathLike,
    sts_dir: str | os.PathLike,
    out_file: str | os.PathLike,
    progress: bool = True,
) -> dict[str, Any]:
    """One item of the tau (Table 4) or m (Table 5) ablation.

    Trains ``ablation.loss`` on ``ablation.backbone`` with seed ``ablation.seed`` for
    ``ablation.max_steps`` steps, τ (``kind="tau"``) or m (``kind="m"``) set to ``value`` and every other
    key from ``train`` + ``backbone_overrides``, exactly as the train stage would (best-on-dev model kept),
    then scores STS-B test with that model. The model lives in a temporary folder that is deleted.
    """
    from focalcse.config import replace
    from focalcse.provenance import provenance, write_json_atomic

    cfg = params.ablation_train_config(kind, value)
    backbone, ab = params.ablation_backbone, params.ablation
    over = {
        **(params.backbone_overrides.get(backbone) or {}),
        "temperature": cfg.temperature,
        "m": cfg.m,
        "max_steps": cfg.max_steps,
    }
    item = replace(
        params,
        backbone_overrides={**params.backbone_overrides, backbone: over},
        eval=replace(params.eval, tasks=("STSBenchmark",)),
    )
    if item.train_config(backbone, ab.loss, ab.seed) != cfg:  # pragma: no cover - guards the merge
        raise AssertionError("ablation train config does not survive the override merge")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="focalcse-ablation-") as tmp:
        t = Path(tmp)
        train = run_train(
            item,
            backbone,
            ab.loss,
            ab.seed,
            corpus_file=corpus_file,
            sts_dir=sts_dir,
            model_dir=t / "model",
            metrics_file=t / "train.json",
            curve_file=t / "loss.json",
            dev_file=t / "dev.json",
            progress=progress,
        )
        ev = run_evaluate(
            item, backbone, ab.loss, ab.seed, t / "model", sts_dir, t / "eval.json", progress=progress
        )
    out = {
        "kind": kind,
        "value": float(value),
        "parameter": ABLATION_KINDS[kind],
        "backbone": backbone,
        "loss": ab.loss,
        "seed": ab.seed,
        "temperature": cfg.temperature,
        "m": cfg.m,
        "STSBenchmark": ev["STSBenchmark"],
        "alignment": ev.get("alignment"),
        "uniformity": ev.get("uniformity"),
        "stsb_dev_best": train["stsb_dev_best"],
        "stsb_dev_start": train["stsb_dev_start"],
        "best_step": train["best_step"],
        "steps": train["steps"],
        "final_loss": train["final_loss"],
        "wall_seconds": time.perf_counter() - start,
        "meta": provenance(
            backbone=backbone,
            backbone_source=params.backbone_source(backbone),
            train_config=asdict(cfg),
            corpus=train["meta"]["corpus"],
            sts_dir=str(sts_dir),
            model="deleted after scoring (ablation items keep metrics only)",
        ),
    }
    write_json_atomic(out_file, out)
    return out


# ---------------------------------------------------------------- hard_negatives
def start_eval_pooler(pooler: str, mlp_only_train: bool) -> str:
    """The pooler a trained model is evaluated with (``cls_before_pooler`` for SimCSE unsup)."""
    return "cls_before_pooler" if pooler == "cls" and mlp_only_train else pooler


def hardest_negatives(cosines: Any, gold: Any, max_gold: float, k: int) -> list[int]:
    """Indices of the ``k`` pairs with the highest cosine among those with ``gold <= max_gold``
    (ties broken by index, so the choice is deterministic)."""
    import numpy as np

    cos, gold = np.asarray(cosines, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if cos.shape != gold.shape:
        raise ValueError(f"cosines {cos.shape} and gold {gold.shape} differ in shape")
    candidates = np.flatnonzero(gold <= max_gold)
    order = sorted(candidates.tolist(), key=lambda i: (-cos[i], i))
    return order[:k]


def run_hard_negatives(
    params: Params,
    sts_dir: str | os.PathLike,
    models_dir: str | os.PathLike,
    out_file: str | os.PathLike,
    progress: bool = True,
) -> dict[str, Any]:
    """§5.1: the hardest negatives of STS-B train under the starting model, before and after training.

    Per sweep backbone: the backbone as loaded for training, read with the evaluation pooler (``[CLS]``
    for SimCSE unsup), scores every STS-B train pair with gold ``<= report.hard_negative_max_gold``; the
    ``report.hard_negatives`` pairs of highest cosine are kept, and their cosine is recomputed with the
    first seed's trained model of every sweep loss (``<models_dir>/<backbone>/<loss>/seed<k>``). The mean
    cosine over all candidate pairs is recorded per model too (models differ in anisotropy).
    """
    import torch.nn.functional as F

    from focalcse.evaluation import encode
    from focalcse.model import SentenceEncoder
    from focalcse.provenance import provenance, write_json_atomic
    from focalcse.sts import load_split
    from focalcse.training import output_path

    rep, seed = params.report, params.sweep.seeds[0]
    split = load_split(sts_dir, "STSBenchmark-train")
    s1, s2, gold = [], [], []
    for a, b, g in split.subsets.values():
        s1 += a
        s2 += b
        gold += g
    cand = [i for i, g in enumerate(gold) if g <= rep.hard_negative_max_gold]
    if not cand:
        raise ValueError(
            f"no STS-B train pair has gold <= report.hard_negative_max_gold={rep.hard_negative_max_gold}"
        )
    c1, c2 = [s1[i] for i in cand], [s2[i] for i in cand]
    start = time.perf_counter()

    def cosines(encoder: SentenceEncoder, device: str) -> list[float]:
        encoder.to(device)
        v = encode(
            encoder, c1 + c2, batch_size=params.eval.batch_size, precision=params.eval.precision
        )  # (2n, d)
        return F.cosine_similarity(v[: len(c1)], v[len(c1) :], dim=-1).tolist()  # (n,)

    out: dict[str, Any] = {
        "split": "STSBenchmark-train",
        "max_gold": rep.hard_negative_max_gold,
        "k": rep.hard_negatives,
        "seed": seed,
        "backbones": {},
    }
    for backbone in params.sweep.backbones:
        cfg = params.train_config(backbone, params.sweep.losses[0], seed)
        source = params.backbone_source(backbone)
        pooler = start_eval_pooler(cfg.pooler, cfg.mlp_only_train)
        starting = SentenceEncoder.from_pretrained(
            source, pooler=pooler, max_seq_len=cfg.max_seq_len, mlp_init="fresh", seed=cfg.seed
        )
        cos = {"start": cosines(starting, cfg.device)}
        del starting
        models = {"start": source}
        for loss in params.sweep.losses:
            model_dir = output_path(models_dir, backbone, loss, seed)
            cos[loss] = cosines(SentenceEncoder.from_pretrained(model_dir), cfg.device)
            models[loss] = str(model_dir)
        top = hardest_negatives(
            cos["start"], [gold[i] for i in cand], rep.hard_negative_max_gold, rep.hard_negatives
        )
        out["backbones"][backbone] = {
            "source": source,
            "start_pooler": pooler,
            "models": models,
            "candidates": len(cand),
            "mean_cos": {k: sum(v) / len(v) for k, v in cos.items()},
            "pairs": [
                {
                    "index": cand[j],
                    "sentence1": c1[j],
                    "sentence2": c2[j],
                    "gold": gold[cand[j]],
                    "cos": {k: v[j] for k, v in cos.items()},
                }
                for j in top
            ],
        }
    out["wall_seconds"] = time.perf_counter() - start
    out["meta"] = provenance(sts_dir=str(sts_dir), models_dir=str(models_dir))
    write_json_atomic(out_file, out)
    return out


# ---------------------------------------------------------------- report
def run_report(
    params: Params,
    metrics_dir: str | os.PathLike = "metrics",
    out_dir: str | os.PathLike = "reports",
    params_file: str | os.PathLike = "params.yaml",
) -> dict[str, Path]:
    """Tables 2-5, Figure 1, curves and the hard negatives as ``report.md`` + ``index.html`` (see
    :mod:`focalcse.report`)."""
    from focalcse.report import ReportInputs, build_report

    return build_report(params, ReportInputs.under(metrics_dir), out_dir, params_file=params_file)
