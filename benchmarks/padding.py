"""How much of a batch is padding: training batches (the pipeline's sample and a random one, cut in
the trainer's order) and the evaluation's batches (the 7 STS tasks' unique sentences, sorted by
length as ``focalcse.core.encode`` sorts them, and unsorted for comparison).

Counts tokens only (the MiniLM tokenizer; no model runs), so it takes seconds::

    FOCALCSE_DATA_MIRROR=../shared/data .venv/bin/python benchmarks/padding.py --out-json benchmarks/padding.json

``padding_share`` is padded positions / all positions of the batches; ``max_speedup`` = 1 / (1 −
share), what removing every padding token could give work that scales with the token count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common import (
    REPO,
    backbone_path,
    data_paths,
    emit_report,
    script_command,
    short_commit,
    train_batch_lengths,
)


def padding_stats(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> dict[str, float | int]:
    """Real and padded token positions when each batch (indices into ``lengths``) is right-padded to
    its longest row."""
    real = sum(lengths[i] for b in batches for i in b)
    total = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    share = 1 - real / total
    return {
        "batches": len(batches),
        "real_tokens": real,
        "padded_positions": total,
        "padding_share": share,
        "max_speedup": 1 / (1 - share),
    }


def chunks(order: Sequence[int], size: int) -> list[list[int]]:
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data-mirror",
        default=os.environ.get("FOCALCSE_DATA_MIRROR"),
        help="folder laid out like shared/data",
    )
    ap.add_argument(
        "--params",
        default=str(REPO / "params.yaml"),
        help="the pipeline's sample (data.num_sentences, data.seed) and batch",
    )
    ap.add_argument("--random-n", type=int, default=4096, help="size of the random comparison sample")
    ap.add_argument("--random-seed", type=int, default=0)
    ap.add_argument(
        "--order-seed", type=int, default=1, help="the trainer's batch-order seed (a training seed)"
    )
    ap.add_argument("--eval-batch", type=int, default=128)
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args(argv)
    if not args.data_mirror:
        ap.error("--data-mirror (or FOCALCSE_DATA_MIRROR) is required: the folder with corpus/ and senteval/")

    from transformers import AutoTokenizer

    from focalcse.config import load_params
    from focalcse.data.corpus import read_sentences, sample_sentences
    from focalcse.data.tasks import PAPER_TASKS, load_split

    t0 = time.perf_counter()
    params = load_params(args.params)
    train = params.train
    corpus_file, sts_dir = data_paths(args.data_mirror, None, None)
    tok = AutoTokenizer.from_pretrained(backbone_path())
    corpus = read_sentences(corpus_file)

    def train_side(sentences: list[str]) -> dict[str, float | int]:
        lengths, batches = train_batch_lengths(
            tok, sentences, train.batch_size, train.max_seq_len, args.order_seed
        )
        return {"sentences": len(sentences), **padding_stats(lengths, batches)}

    sample = {
        "pipeline_sample": {
            "what": f"the pipeline's sample (data.num_sentences {params.data.num_sentences}, data.seed {params.data.seed})",
            **train_side(sample_sentences(corpus, params.data.num_sentences, params.data.seed)),
        },
        "random_sample": {
            "what": f"a random {args.random_n}-sentence sample (seed {args.random_seed})",
            **train_side(sample_sentences(corpus, args.random_n, args.random_seed)),
        },
    }
    sts = Path(sts_dir)
    splits = [load_split(sts, t) for t in PAPER_TASKS]
    every = [s for sp in splits for s in sp.sentences()]
    unique = list(dict.fromkeys(every))
    lengths = [len(x) for x in tok(unique, truncation=True, max_length=tok.model_max_length)["input_ids"]]
    by_length = sorted(range(len(unique)), key=lambda i: lengths[i])
    evaluation = {
        "tasks": list(PAPER_TASKS),
        "sentences": len(every),
        "unique_sentences": len(unique),
        "batch_size": args.eval_batch,
        "sorted": padding_stats(lengths, chunks(by_length, args.eval_batch)),
        "unsorted": padding_stats(lengths, chunks(range(len(unique)), args.eval_batch)),
    }
    report = {
        "command": script_command("padding.py", argv),
        "commit": short_commit(),
        "tokenizer": "all-MiniLM-L6-v2",
        "train": {
            "batch_size": train.batch_size,
            "max_seq_len": train.max_seq_len,
            "order_seed": args.order_seed,
            **sample,
        },
        "eval": evaluation,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    return emit_report(report, args.out_json)


if __name__ == "__main__":
    sys.exit(main())
