"""Step ``hard_negatives``: §5.1's hardest STS-B train negatives, before and after training."""

from __future__ import annotations

import time
from typing import Any

from focalcse.atomic import write_json
from focalcse.config import Params
from focalcse.core.model import SentenceEncoder
from focalcse.data.tasks import load_split
from focalcse.eval.hard_negatives import candidate_pairs, hardest_negatives, pair_cosines, start_eval_pooler
from focalcse.layout import Layout
from focalcse.provenance import provenance


def run(params: Params, layout: Layout, progress: bool = True) -> dict[str, Any]:
    """Per sweep backbone: the backbone as loaded for training, read with the evaluation pooler
    (``[CLS]`` for SimCSE unsup), scores every STS-B train pair with gold
    ``<= report.hard_negative_max_gold``; the ``report.hard_negatives`` pairs of highest cosine are
    kept, and their cosine is recomputed with the first seed's trained model of every sweep loss. The
    mean cosine over all candidate pairs is recorded per model too (models differ in anisotropy).
    """
    rep, seed = params.report, params.sweep.seeds[0]
    cand, c1, c2, gold = candidate_pairs(
        load_split(layout.sts_dir, "STSBenchmark-train"), rep.hard_negative_max_gold
    )
    start = time.perf_counter()

    def cosines(encoder: SentenceEncoder, device: str) -> list[float]:
        return pair_cosines(encoder, c1, c2, device, params.eval.batch_size, params.eval.precision)

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
            model_dir = layout.model_dir(backbone, loss, seed)
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
    out["meta"] = provenance(sts_dir=str(layout.sts_dir), models_dir=str(layout.models_dir))
    write_json(layout.hard_negatives_file, out)
    return out
