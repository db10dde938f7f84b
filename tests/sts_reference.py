"""Reference STS numbers computed without focalcse: plain ``transformers`` embeddings, numpy loops,
``scipy.stats.spearmanr``, and the SentEval files read here, so a test can compare what the
evaluator / CLI / pipeline report with an independent computation.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from transformers import AutoModel, AutoTokenizer

Pairs = tuple[list[str], list[str], list[float]]
ALIGN_MIN_GOLD = 4.0  # Wang & Isola / SimCSE: STS-B pairs with gold > 4 are positives


def _clean(sentence: str) -> str:
    return " ".join(sentence.split())


def read_task(downstream: Path, task: str) -> dict[str, Pairs]:
    """The scored test pairs of one task, by subset, straight from SentEval's files."""
    out: dict[str, Pairs] = {}
    if task in ("STSBenchmark", "STSBenchmark-dev"):
        split = "dev" if task.endswith("-dev") else "test"
        rows = [line.split("\t") for line in (downstream / f"STS/STSBenchmark/sts-{split}.csv").open()]
        rows = [r for r in rows if len(r) >= 7]
        out["test"] = (
            [_clean(r[5]) for r in rows],
            [_clean(r[6]) for r in rows],
            [float(r[4]) for r in rows],
        )
    elif task == "SICKRelatedness":
        lines = (downstream / "SICK/SICK_test_annotated.txt").read_text().splitlines()[1:]
        rows = [line.split("\t") for line in lines if line.strip()]
        out["test"] = (
            [_clean(r[1]) for r in rows],
            [_clean(r[2]) for r in rows],
            [float(r[3]) for r in rows],
        )
    else:  # STS12-16: STS.input.<subset>.txt / STS.gs.<subset>.txt, a blank gold line = unscored
        folder = downstream / "STS" / f"{task}-en-test"
        for gs in sorted(folder.glob("STS.gs.*.txt")):
            subset = gs.name[len("STS.gs.") : -len(".txt")]
            inputs = (folder / f"STS.input.{subset}.txt").read_text().splitlines()
            s1, s2, gold = [], [], []
            for pair, score in zip(inputs, gs.read_text().splitlines()):
                if score.strip():
                    a, b = pair.split("\t")[:2]
                    s1.append(_clean(a))
                    s2.append(_clean(b))
                    gold.append(float(score))
            out[subset] = (s1, s2, gold)
    assert out and all(p[2] for p in out.values()), f"no pairs read for {task} under {downstream}"
    return out


class HfEmbedder:
    """Sentence vectors of a saved model folder via ``AutoModel`` and the pooler written out here:
    ``cls_before_pooler`` = last hidden state of [CLS], ``cls`` = the backbone's ``pooler_output``,
    ``avg`` = mean of the real tokens' last hidden states. Untruncated up to the position limit."""

    def __init__(self, folder: Path, pooler: str) -> None:
        self.model = AutoModel.from_pretrained(folder).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.pooler = pooler
        self.cache: dict[str, np.ndarray] = {}

    @torch.no_grad()
    def __call__(self, sentences: list[str], batch_size: int = 64) -> np.ndarray:
        todo = [s for s in dict.fromkeys(sentences) if s not in self.cache]
        limit = self.model.config.max_position_embeddings
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            tok = self.tokenizer(batch, padding=True, truncation=True, max_length=limit, return_tensors="pt")
            out = self.model(**tok)
            if self.pooler == "cls_before_pooler":
                vecs = out.last_hidden_state[:, 0]
            elif self.pooler == "cls":
                vecs = out.pooler_output
            else:
                mask = tok["attention_mask"].unsqueeze(-1).float()
                vecs = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
            for s, v in zip(batch, vecs.double().numpy()):
                self.cache[s] = v
        return np.stack([self.cache[s] for s in sentences])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([float(x @ y) / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b)])


def task_score(embed: HfEmbedder, subsets: dict[str, Pairs]) -> tuple[float, float, float]:
    """(``all``: Spearman x 100 of every subset's pairs pooled, ``wmean``: per-subset Spearman
    weighted by size, smallest gap between two distinct pooled cosines)."""
    sims, golds, per, sizes = [], [], [], []
    for s1, s2, gold in subsets.values():
        c = cosines(embed(s1), embed(s2))
        sims.append(c)
        golds.append(np.asarray(gold))
        per.append(spearmanr(c, gold).statistic * 100.0)
        sizes.append(len(gold))
    pooled = np.concatenate(sims)
    gaps = np.diff(np.unique(pooled))
    wmean = float(np.dot(per, sizes) / np.sum(sizes))
    all_ = float(spearmanr(pooled, np.concatenate(golds)).statistic) * 100.0
    return all_, wmean, float(gaps.min()) if gaps.size else math.inf


def alignment_uniformity(embed: HfEmbedder, stsb: Pairs) -> tuple[float, float]:
    """Wang & Isola (2020) on L2-normalised vectors, by loops: alignment = mean ||f(x) - f(y)||^2 over
    STS-B pairs with gold > 4; uniformity = log mean exp(-2 ||f(x) - f(y)||^2) over all unordered
    pairs of distinct sentences of STS-B test (each sentence once)."""
    s1, s2, gold = stsb

    def unit(sents: list[str]) -> np.ndarray:
        v = embed(sents)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    pos = [i for i, g in enumerate(gold) if g > ALIGN_MIN_GOLD]
    a, b = unit([s1[i] for i in pos]), unit([s2[i] for i in pos])
    align = sum(float(np.sum((x - y) ** 2)) for x, y in zip(a, b)) / len(pos)
    v = unit(list(dict.fromkeys(s1 + s2)))
    total, count = 0.0, 0
    for i in range(len(v) - 1):  # row i against every later row j > i
        sq = np.sum((v[i + 1 :] - v[i]) ** 2, axis=1)
        total += float(np.sum(np.exp(-2.0 * sq)))
        count += len(sq)
    return align, math.log(total / count)
