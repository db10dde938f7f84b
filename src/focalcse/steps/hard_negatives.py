"""Step ``hard_negatives``: §5.1's hardest STS-B train negatives, before and after training.

One item per sweep backbone × loss (a DVC matrix): it depends on that loss's first-seed model only,
so retraining another seed or loss reruns nothing here. The report merges the items
(:func:`focalcse.eval.hard_negatives.merge_items`)."""

from __future__ import annotations

import time
from typing import Any

from focalcse.config import Params
from focalcse.core.model import SentenceEncoder
from focalcse.data.tasks import load_split
from focalcse.eval.hard_negatives import candidate_pairs, hardest_negatives, pair_cosines, start_eval_pooler
from focalcse.layout import Layout
from focalcse.provenance import provenance
from focalcse.results import write_result


def run(params: Params, layout: Layout, backbone: str, loss: str) -> dict[str, Any]:
    """The backbone as loaded for training, read with the evaluation pooler (``[CLS]`` for SimCSE
    unsup), scores every STS-B train pair with gold ``<= report.hard_negative_max_gold``; the
    ``report.hard_negatives`` pairs of highest cosine are kept, and their cosine is recomputed with
    ``loss``'s first-seed trained model. The mean cosine over all candidate pairs is recorded per
    model too (models differ in anisotropy). Written to ``layout.hard_negatives_file(backbone, loss)``.
    """
    rep, seed = params.report, params.sweep.seeds[0]
    cand, c1, c2, gold = candidate_pairs(
        load_split(layout.sts_dir, "STSBenchmark-train"), rep.hard_negative_max_gold
    )
    start = time.perf_counter()
    # the starting model as this item's training loaded it; the items of one backbone pick the same
    # pairs unless an override gives their losses other poolers or lengths (merge_items refuses that)
    cfg = params.train_config(backbone, loss, seed)
    source = params.backbone_source(backbone)
    pooler = start_eval_pooler(cfg.pooler, cfg.mlp_only_train)

    def cosines(encoder: SentenceEncoder) -> list[float]:
        return pair_cosines(encoder, c1, c2, cfg.device, params.eval.batch_size, params.eval.precision)

    starting = SentenceEncoder.from_pretrained(
        source, pooler=pooler, max_seq_len=cfg.max_seq_len, mlp_init="fresh", seed=cfg.seed
    )
    cos = {"start": cosines(starting)}
    del starting
    model_dir = layout.model_dir(backbone, loss, seed, params.sweep.reference)
    cos[loss] = cosines(SentenceEncoder.from_pretrained(model_dir))
    top = hardest_negatives(
        cos["start"], [gold[i] for i in cand], rep.hard_negative_max_gold, rep.hard_negatives
    )
    out: dict[str, Any] = {
        "split": "STSBenchmark-train",
        "max_gold": rep.hard_negative_max_gold,
        "k": rep.hard_negatives,
        "seed": seed,
        "backbone": backbone,
        "loss": loss,
        "source": source,
        "start_pooler": pooler,
        "model": str(model_dir),
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
        "wall_seconds": time.perf_counter() - start,
    }
    out["meta"] = provenance(sts_dir=str(layout.sts_dir), model=str(model_dir))
    write_result(layout.hard_negatives_file(backbone, loss), out)
    return out
