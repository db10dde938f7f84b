"""STS evaluation: one ``encode`` path for training's dev checks and the final 7-task evaluation.

Scores follow SimCSE's evaluation: cosine similarity of the two sentence vectors, Spearman x 100
against the gold scores (scipy). Two aggregations are reported under separate keys:

- ``all`` (what SimCSE and the paper report; top-level keys ``STS12`` ... ``avg``): for STS12-16 every
  subset of a year is pooled into one list and one Spearman is computed;
- ``wmean`` (SentEval's other figure): per-subset Spearman averaged with weights = subset sizes.

STS-B is scored on ``sts-test.csv`` and SICK-R on ``SICK_test_annotated.txt``. Alignment and uniformity
(Wang & Isola, 2020) are computed on the STS-B **development** split (``sts-dev.csv``) with L2-normalised
vectors, as SimCSE's analysis does (its section 5, "we take STS-B development set"; the paper's Table 3
follows SimCSE's and DiffCSE's analysis); the dev sentences are encoded in a pass of their own, so the
test scores do not depend on them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from focalcse.core.encode import encode, encode_token_ids, tokenize_unique
from focalcse.core.model import eval_max_length
from focalcse.data.sts import StsSplit
from focalcse.data.tasks import PAPER_TASKS, TASKS, average_tasks, load_split
from focalcse.layout import DEV_SPLIT

ALIGN_THRESHOLD = 4.0  # STS-B pairs with gold > 4 are the positive pairs for alignment
ALIGN_SPLIT = "STSBenchmark-dev"  # the split alignment and uniformity are computed on (SimCSE's analysis)


def cosine_spearman(v1: torch.Tensor, v2: torch.Tensor, gold: Sequence[float]) -> float:
    """Spearman x 100 between row-wise cosine similarities and gold scores (scipy)."""
    sims = F.cosine_similarity(v1, v2, dim=-1).numpy()
    rho = spearmanr(sims, np.asarray(gold, dtype=np.float64)).statistic
    return float(rho) * 100.0


def score_split(
    vectors: Callable[[list[str]], torch.Tensor], split: StsSplit
) -> dict[str, float | dict[str, float]]:
    """``all`` (pooled), ``wmean`` and per-subset Spearman x 100 of one task."""
    sims_all, gold_all, per_subset, sizes = [], [], {}, {}
    for subset, (s1, s2, scores) in split.subsets.items():
        v = vectors(s1 + s2)
        v1, v2 = v[: len(s1)], v[len(s1) :]
        sims_all.append(F.cosine_similarity(v1, v2, dim=-1).numpy())
        gold_all.append(np.asarray(scores, dtype=np.float64))
        per_subset[subset] = cosine_spearman(v1, v2, scores)
        sizes[subset] = len(scores)
    pooled = float(spearmanr(np.concatenate(sims_all), np.concatenate(gold_all)).statistic) * 100.0
    wmean = sum(per_subset[k] * sizes[k] for k in sizes) / sum(sizes.values())
    return {"all": pooled, "wmean": wmean, "subsets": per_subset}


def alignment_uniformity(
    vectors: torch.Tensor, pairs_a: torch.Tensor, pairs_b: torch.Tensor
) -> tuple[float, float]:
    """Alignment over given positive pairs, uniformity over all pairs of ``vectors``.

    alignment  = E ||f(x) - f(y)||^2 over positive pairs (x, y);
    uniformity = log E exp(-2 ||f(x) - f(y)||^2) over all distinct pairs; vectors L2-normalised.
    """
    a, b = F.normalize(pairs_a.double(), dim=-1), F.normalize(pairs_b.double(), dim=-1)
    align = (a - b).pow(2).sum(-1).mean().item()
    v = F.normalize(vectors.double(), dim=-1)
    sq = torch.pdist(v, p=2).pow(2)  # (n(n-1)/2,) squared distances of all distinct pairs
    # log-mean-exp, stable
    uniform = (torch.logsumexp(-2.0 * sq, dim=0) - math.log(sq.numel())).item()
    return float(align), float(uniform)


def evaluate_sts(
    encoder: torch.nn.Module,
    data_dir: str,
    tasks: Sequence[str] = PAPER_TASKS,
    batch_size: int = 128,
    precision: str = "fp32",
    check_counts: bool = True,
    progress: bool = True,
) -> dict:
    """Evaluate ``encoder`` on ``tasks``; returns the output-contract dict.

    Top-level keys ``STS12`` ... ``SICKRelatedness`` and ``avg`` hold the ``all``-setting Spearman x 100
    (``avg``: over the evaluated tasks of the paper's 7, :func:`focalcse.data.tasks.average_tasks`);
    ``wmean`` holds the size-weighted per-subset means (and their ``avg``), ``subsets`` every subset's
    Spearman; ``alignment``/``uniformity`` come from the STS-B dev split (:data:`ALIGN_SPLIT`) when
    STS-B is among the tasks.
    """
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; expected a subset of {', '.join(TASKS)}")
    splits = {t: load_split(data_dir, t, check_counts) for t in tasks}
    # Encode every sentence of every task in one pass: sorting across tasks pads less, and
    # sentences shared between tasks are encoded once.
    unique = list(dict.fromkeys(s for sp in splits.values() for s in sp.sentences()))
    vecs = encode(encoder, unique, batch_size=batch_size, precision=precision, progress=progress)
    table = {s: i for i, s in enumerate(unique)}

    def lookup(sents: list[str]) -> torch.Tensor:
        return vecs[[table[s] for s in sents]]

    result: dict = {}
    wmean: dict[str, float] = {}
    subsets: dict[str, dict[str, float]] = {}
    for task, split in splits.items():
        r = score_split(lookup, split)
        result[task] = r["all"]
        wmean[task] = r["wmean"]
        if TASKS[task].pooled:
            subsets[task] = r["subsets"]
    averaged = average_tasks(tasks)  # the paper's tasks only: an added task is a column of its own
    result["avg"] = float(np.mean([result[t] for t in averaged]))
    wmean["avg"] = float(np.mean([wmean[t] for t in averaged]))
    result["wmean"] = wmean
    result["subsets"] = subsets
    if "STSBenchmark" in splits:
        # A pass of its own: the test sentences above are batched exactly as without it.
        s1, s2, gold = next(iter(load_split(data_dir, ALIGN_SPLIT, check_counts).subsets.values()))
        dev_unique = list(dict.fromkeys(s1 + s2))
        dev_vecs = encode(encoder, dev_unique, batch_size=batch_size, precision=precision, progress=False)
        dev_row = {s: i for i, s in enumerate(dev_unique)}
        pos = [i for i, g in enumerate(gold) if g > ALIGN_THRESHOLD]
        v1, v2 = dev_vecs[[dev_row[s] for s in s1]], dev_vecs[[dev_row[s] for s in s2]]
        align, uniform = alignment_uniformity(dev_vecs, v1[pos], v2[pos])
        result["alignment"], result["uniformity"] = align, uniform
    result["n_pairs"] = {t: len(sp) for t, sp in splits.items()}
    return result


def stsb_dev_evaluator(
    data_dir: str, batch_size: int = 128, precision: str = "fp32"
) -> Callable[[torch.nn.Module], float]:
    """A callable returning STS-B **dev** Spearman x 100 of an encoder (SimCSE's model selection)."""
    split = load_split(data_dir, DEV_SPLIT)
    s1, s2, gold = next(iter(split.subsets.values()))
    unique = list(dict.fromkeys(s1 + s2))
    index = {s: i for i, s in enumerate(unique)}
    rows = torch.tensor([index[s] for s in s1 + s2])  # (2n,) row of each pair sentence in `unique`
    # Tokenised once per (tokenizer, length, the encoder's tokenization variant), not at every
    # evaluation of a run (SimCSE: ~125 of them). A PromptBERT encoder tokenizes dev sentences for
    # checkpoint selection differently from test scoring (``ids_variant``).
    cached: list = [None, None, None, None]  # tokenizer, max_length, variant, token ids

    def evaluate(encoder: torch.nn.Module) -> float:
        max_length = eval_max_length(encoder)
        variant = getattr(encoder, "ids_variant", None)
        if cached[0] is not encoder.tokenizer or cached[1] != max_length or cached[2] != variant:
            cached[:] = [encoder.tokenizer, max_length, variant, tokenize_unique(encoder, unique, max_length)]
        v = encode_token_ids(encoder, cached[3], batch_size=batch_size, precision=precision)[rows]
        return cosine_spearman(v[: len(s1)], v[len(s1) :], gold)

    return evaluate
