"""The speed levers leave the numbers unchanged (within tolerance). Timings live in benchmarks/bench.py.

Levers: de-duplicated, length-sorted batched encoding; vectorised padding; pre-tokenisation (once in
the data stage for training, once per run for the STS-B dev evaluator); one forward over the
concatenated (2N, L) batch; SDPA attention; bf16 autocast.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModel

from focalcse.core.encode import autocast_context, encode, pad_batch
from focalcse.core.model import SentenceEncoder, eval_max_length, tiny_config
from focalcse.eval.sts_eval import cosine_spearman, stsb_dev_evaluator
from focalcse.losses import build_loss

CPU = torch.device("cpu")
WORDS = [
    "a",
    "man",
    "woman",
    "dog",
    "is",
    "playing",
    "eating",
    "on",
    "in",
    "the",
    "with",
    "guitar",
    "red",
    "two",
]


def _sentences(n: int = 40, seed: int = 0) -> list[str]:
    """Sentences of 1-20 words with repeats (as STS pairs repeat sentences)."""
    rng = random.Random(seed)
    base = [" ".join(rng.choices(WORDS, k=rng.randint(1, 20))) + f" {i}" for i in range(n)]
    return base + [base[i % n] for i in (3, 0, 7, 3, 11)]


def _one_by_one(encoder: torch.nn.Module, sentences: list[str]) -> torch.Tensor:
    """The naive reference: each sentence alone, no padding, no sorting, no de-duplication."""
    encoder.eval()
    max_length = eval_max_length(encoder)
    rows = []
    with torch.inference_mode():
        for s in sentences:
            b = encoder.tokenizer([s], truncation=True, max_length=max_length, return_tensors="pt")
            rows.append(encoder(input_ids=b["input_ids"], attention_mask=b["attention_mask"]))
    return torch.cat(rows)


def _loop_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def test_pad_batch_matches_loop_and_tokenizer_padding(minilm_tokenizer):
    sentences = _sentences(12)
    rows = minilm_tokenizer(sentences, truncation=True, max_length=32)["input_ids"]
    ids, mask = pad_batch(rows, minilm_tokenizer.pad_token_id)
    ref_ids, ref_mask = _loop_pad(rows, minilm_tokenizer.pad_token_id)
    assert torch.equal(ids, ref_ids) and torch.equal(mask, ref_mask)
    assert ids.dtype == mask.dtype == torch.long
    padded = minilm_tokenizer(sentences, truncation=True, max_length=32, padding=True, return_tensors="pt")
    assert torch.equal(ids, padded["input_ids"]) and torch.equal(mask, padded["attention_mask"])


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg"])
def test_sorted_deduplicated_encode_equals_one_by_one(tiny_encoder_factory, pooler):
    encoder = tiny_encoder_factory(pooler=pooler)
    sentences = _sentences()
    reference = _one_by_one(encoder, sentences)
    for batch_size in (1, 7, 128):
        got = encode(encoder, sentences, batch_size=batch_size)
        torch.testing.assert_close(got, reference, atol=1e-5, rtol=1e-5)


def test_encode_restores_train_mode(tiny_encoder_factory):
    encoder = tiny_encoder_factory()
    encoder.train()
    encode(encoder, ["a man", "a dog is running"])
    assert encoder.training


def test_dev_evaluator_pretokenised_once_equals_fresh_encode(tiny_encoder_factory, tiny_sts_dir, tmp_path):
    from focalcse.data.sts import read_stsb, write_prepared

    dev = read_stsb(tiny_sts_dir, "dev", check_counts=False)
    write_prepared([("STSBenchmark-dev", dev)], tmp_path / "prep", source="tiny")
    s1, s2, gold = dev.subsets["dev"]
    encoder = tiny_encoder_factory(pooler="cls", mlp_only_train=True)
    evaluate = stsb_dev_evaluator(str(tmp_path / "prep"))
    v = encode(encoder, s1 + s2)
    expected = cosine_spearman(v[: len(s1)], v[len(s1) :], gold)
    assert evaluate(encoder) == pytest.approx(expected, abs=1e-9)
    with torch.no_grad():  # a changed model is re-encoded (only the tokens are cached)
        for p in encoder.backbone.encoder.parameters():
            p.mul_(0.5)
    v = encode(encoder, s1 + s2)
    assert evaluate(encoder) == pytest.approx(cosine_spearman(v[: len(s1)], v[len(s1) :], gold), abs=1e-9)


def test_pretokenised_corpus_equals_per_step_tokenisation(tmp_path, minilm_tokenizer):
    from focalcse.core.training import tokenize_corpus

    sentences = _sentences(30, seed=3) + ["word " * 60]  # one longer than max_seq_len
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(sentences) + "\n")
    corpus = tokenize_corpus(corpus_file, minilm_tokenizer, max_seq_len=32)
    rows = [list(r) for r in corpus["input_ids"]]
    per_step = minilm_tokenizer(sentences, truncation=True, max_length=32, padding=True, return_tensors="pt")
    ids, mask = pad_batch(rows, minilm_tokenizer.pad_token_id)
    assert torch.equal(ids, per_step["input_ids"]) and torch.equal(mask, per_step["attention_mask"])


@pytest.mark.parametrize("pooler,mlp_only_train", [("cls", False), ("cls", True), ("avg", False)])
def test_concatenated_2n_forward_equals_two_forwards_in_eval(tiny_encoder_factory, pooler, mlp_only_train):
    encoder = tiny_encoder_factory(pooler=pooler, mlp_only_train=mlp_only_train)
    batch = encoder.tokenize(_sentences(8))
    ids, mask = batch["input_ids"], batch["attention_mask"]  # (N, L)
    n = len(ids)
    encoder.eval()  # no dropout: both views must be the single forward's output
    with torch.no_grad():
        z = encoder(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))  # (2N, d)
        single = encoder(input_ids=ids, attention_mask=mask)  # (N, d)
    torch.testing.assert_close(z[:n], single, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(z[n:], single, atol=1e-5, rtol=1e-5)
    encoder.train()  # in train mode the two halves are two dropout views of the same sentences
    with torch.no_grad():
        z = encoder(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))
    assert not torch.allclose(z[:n], z[n:])


def test_sdpa_attention_equals_eager(minilm_tokenizer):
    config = tiny_config(minilm_tokenizer.vocab_size)
    torch.manual_seed(0)
    sdpa = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    eager = AutoModel.from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    batch = minilm_tokenizer(_sentences(10), padding=True, return_tensors="pt")
    with torch.no_grad():
        a = sdpa(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        b = eager(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()  # padded positions are never pooled
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("loss_name", ["infonce", "focal_infonce"])
def test_bf16_autocast_loss_close_to_fp32(tiny_encoder_factory, loss_name):
    encoder = tiny_encoder_factory(pooler="cls").eval()
    batch = encoder.tokenize(_sentences(16))
    loss_fn = build_loss(loss_name, 0.05, m=0.3)
    losses = {}
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), autocast_context(CPU, precision):
            z = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).float()
            # Two distinct "views": the batch and a mix with its neighbour (eval mode has no dropout).
            losses[precision] = loss_fn(z, 0.5 * z + 0.5 * z.roll(1, 0)).item()
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=1e-2)


def test_bf16_encoding_of_minilm_within_0_1_of_fp32_on_stsb_test(minilm_path, senteval_dir):
    """bf16 autocast moves MiniLM's STS-B test Spearman by far less than 0.1 (first 400 pairs, for time;
    benchmarks/bench.py checks all 7 tasks)."""
    from focalcse.data.tasks import load_split

    s1, s2, gold = next(iter(load_split(senteval_dir, "STSBenchmark").subsets.values()))
    n = 400
    s1, s2, gold = s1[:n], s2[:n], gold[:n]
    encoder = SentenceEncoder.from_pretrained(minilm_path, pooler="cls_before_pooler")
    scores = {}
    for precision in ("fp32", "bf16"):
        v = encode(encoder, s1 + s2, precision=precision)
        scores[precision] = cosine_spearman(v[:n], v[n:], gold)
    assert abs(scores["bf16"] - scores["fp32"]) < 0.1
    assert scores["fp32"] > 80  # the fixed model is what we think it is (MSRvid pairs, CLS vector)


def test_sentence_transformers_encode_matches_ours(minilm_path):
    """The benchmark's sentence-transformers side encodes the very same vectors (fair comparison)."""
    pytest.importorskip("sentence_transformers")
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers 3-5
        from sentence_transformers.models import Pooling, Transformer
    from sentence_transformers import SentenceTransformer

    encoder = SentenceEncoder.from_pretrained(minilm_path, pooler="cls_before_pooler")
    transformer = Transformer(minilm_path, max_seq_length=eval_max_length(encoder))
    st = SentenceTransformer(
        modules=[transformer, Pooling(transformer.auto_model.config.hidden_size, pooling_mode="cls")],
        device="cpu",
    )
    sentences = _sentences(12)
    ours = encode(encoder, sentences)
    theirs = st.encode(sentences, batch_size=5, convert_to_tensor=True, show_progress_bar=False)
    torch.testing.assert_close(ours, theirs.float().cpu(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("weight_decay", [0.0, 0.03])
def test_training_setup_builds_the_reference_optimizer_and_schedule(
    tiny_encoder_factory, tmp_path, weight_decay
):
    """The trainer's optimizer and schedule are SimCSE's (HF Trainer defaults): AdamW, eps 1e-8, betas
    (0.9, 0.999), the config's lr and weight decay over every encoder parameter; the lr of step k
    (1-based) is lr (1 - (k - 1) / T), no warm-up, and exactly 0 after the last of the T steps."""
    from focalcse.config import TrainConfig
    from focalcse.core.distributed import DistributedContext
    from focalcse.core.training import _setup

    encoder = tiny_encoder_factory(pooler="cls")
    corpus = [[101, 2000 + i, 2001 + i, 102] for i in range(40)]
    cfg = TrainConfig(batch_size=4, lr=3e-5, weight_decay=weight_decay, max_steps=7, eval_at_start=False)
    loop = _setup(encoder, corpus, cfg, tmp_path / "work", DistributedContext(), resume=False)
    opt = loop.optimizer
    assert type(opt) is torch.optim.AdamW
    (group,) = opt.param_groups
    assert group["eps"] == 1e-8
    assert tuple(group["betas"]) == (0.9, 0.999)
    assert group["weight_decay"] == weight_decay
    assert group["initial_lr"] == cfg.lr == group["lr"]  # no warm-up: step 1 runs at the full lr
    assert not group["amsgrad"] and not group["maximize"]
    assert {id(p) for p in group["params"]} == {id(p) for p in encoder.parameters()}
    total = loop.total
    assert total == cfg.max_steps
    seen = []
    for _ in range(total):  # the lr each step uses, then the scheduler step after it (as _step)
        seen.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients: a no-op, only keeps the optimizer-before-scheduler order
        loop.scheduler.step()
    expected = [cfg.lr * (total - k) / total for k in range(total)]
    assert seen == pytest.approx(expected, rel=1e-12, abs=0)
    assert opt.param_groups[0]["lr"] == 0.0  # decayed to exactly 0 at the end of the run
