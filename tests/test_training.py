"""Trainer: determinism, best-checkpoint selection, logging, lr schedule, NaN guard, batching, corpus."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from focalcse.config import TrainConfig
from focalcse.core.batching import batch_order, tokenize_corpus
from focalcse.core.model import RECORD_FILE, SentenceEncoder, read_record
from focalcse.core.training import NonFiniteLossError, train
from focalcse.data.sts import StsSplit, write_prepared
from focalcse.eval.sts_eval import stsb_dev_evaluator

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "that",
    "which",
    "were",
    "are",
    "an",
    "it",
    "this",
    "be",
    "river",
    "city",
    "music",
    "film",
    "team",
    "war",
    "school",
    "church",
    "village",
    "game",
    "year",
    "season",
    "album",
    "song",
    "house",
    "king",
]
N_SENTENCES = 200


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    rng = random.Random(0)
    return [_sentence(rng) for _ in range(N_SENTENCES)]


@pytest.fixture(scope="module")
def corpus(sentences, minilm_tokenizer) -> list[list[int]]:
    return minilm_tokenizer(sentences, truncation=True, max_length=32)["input_ids"]


@pytest.fixture(scope="module")
def dev_dir(tmp_path_factory) -> Path:
    """A prepared folder with a synthetic 60-pair ``STSBenchmark-dev`` (read without count checks)."""
    rng = random.Random(1)
    n = 60
    s1 = [_sentence(rng) for _ in range(n)]
    s2 = [_sentence(rng) for _ in range(n)]
    gold = [round(5.0 * (i + 0.5) / n, 3) for i in range(n)]
    rng.shuffle(gold)
    folder = tmp_path_factory.mktemp("dev")
    write_prepared([("STSBenchmark-dev", StsSplit("STSBenchmark", {"dev": (s1, s2, gold)}))], folder, "test")
    return folder


def _cfg(**changes) -> TrainConfig:
    base = dict(batch_size=16, lr=1e-3, eval_steps=4, seed=5, max_seq_len=32, loss="focal_infonce")
    return TrainConfig(**{**base, **changes})


def _run(factory, corpus, dev_dir, out: Path, log=None, **changes):
    enc = factory("cls", mlp_only_train=True)
    calls: list[tuple[dict, int]] = []

    def log_metrics(metrics: dict, step: int) -> None:
        calls.append((dict(metrics), step))

    result = train(
        enc,
        corpus,
        _cfg(**changes),
        out,
        dev_evaluator=stsb_dev_evaluator(str(dev_dir)),
        log_metrics=log_metrics,
        save_extra={"loss": changes.get("loss", "focal_infonce")},
        progress=False,
    )
    return enc, result, calls


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, minilm_tokenizer, corpus, dev_dir):
    """One training run (seed 5) shared by several tests."""
    from focalcse.core.model import tiny_config

    def factory(pooler: str, mlp_only_train: bool):
        torch.manual_seed(1234)
        return SentenceEncoder.from_config(
            tiny_config(minilm_tokenizer.vocab_size), minilm_tokenizer, pooler, mlp_only_train
        )

    out = tmp_path_factory.mktemp("run") / "seed5"
    enc, result, calls = _run(factory, corpus, dev_dir, out)
    return factory, out, enc, result, calls


def _steps() -> int:
    return math.ceil(N_SENTENCES / 16)  # 12 full batches + one of 8


def test_same_seed_same_run_other_seed_other_run(reference_run, corpus, dev_dir, tmp_path) -> None:
    factory, _, _, ref, _ = reference_run
    _, again, _ = _run(factory, corpus, dev_dir, tmp_path / "again")
    assert again.history == ref.history
    assert again.dev_curve == ref.dev_curve
    assert (again.best_step, again.best_dev) == (ref.best_step, ref.best_dev)
    _, other, _ = _run(factory, corpus, dev_dir, tmp_path / "other", seed=6)
    assert [h["loss"] for h in other.history] != [h["loss"] for h in ref.history]
    assert other.dev_curve != ref.dev_curve


def test_result_shape_and_dev_curve(reference_run) -> None:
    _, _, _, result, _ = reference_run
    total = _steps()
    assert result.steps == total == 13
    assert [h["step"] for h in result.history] == list(range(1, total + 1))
    assert all(math.isfinite(h["loss"]) and h["loss"] > 0 for h in result.history)
    assert all(set(h) == {"step", "loss", "lr", "grad_norm"} for h in result.history)
    assert all(math.isfinite(h["grad_norm"]) and h["grad_norm"] > 0 for h in result.history)
    assert [d["step"] for d in result.dev_curve] == [0, 4, 8, 12, 13]  # start, every 4 steps, the end
    later = [d for d in result.dev_curve if d["step"] > 0]
    best = max(later, key=lambda d: d["stsb_dev_spearman"])  # step 0 is never selected
    assert (result.best_step, result.best_dev) == (best["step"], best["stsb_dev_spearman"])
    assert result.train_seconds > 0 and result.sentences_per_second > 0
    assert 0 < result.step_seconds_median <= result.train_seconds  # no dev evaluation in it
    assert result.to_dict()["best_step"] == result.best_step


def test_best_checkpoint_is_saved_and_reproduces_dev(reference_run, dev_dir) -> None:
    _, out, _, result, _ = reference_run
    record = read_record(out)
    assert record is not None
    assert record.eval_pooler == "cls_before_pooler"
    assert (record.train_pooler, record.mlp_only_train) == ("cls", True)
    assert record.extra["best_step"] == result.best_step
    assert record.extra["stsb_dev_spearman"] == pytest.approx(result.best_dev)
    assert record.extra["loss"] == "focal_infonce"
    assert json.loads((out / RECORD_FILE).read_text())["eval_pooler"] == "cls_before_pooler"
    assert not list(out.parent.glob(".seed5.*")), "temporary folders left behind"
    reloaded = SentenceEncoder.from_pretrained(out)
    assert reloaded.eval_pooler == "cls_before_pooler"
    assert stsb_dev_evaluator(str(dev_dir))(reloaded) == pytest.approx(result.best_dev, abs=1e-9)


def test_log_metrics_calls(reference_run) -> None:
    _, _, _, result, calls = reference_run
    train_calls = [(m, s) for m, s in calls if "loss" in m]
    dev_calls = [(m, s) for m, s in calls if "stsb_dev_spearman" in m]
    assert len(train_calls) + len(dev_calls) == len(calls)
    assert [s for _, s in train_calls] == list(range(1, _steps() + 1))
    assert all(set(m) == {"loss", "lr", "grad_norm"} for m, _ in train_calls)
    assert [m for m, _ in train_calls] == [
        {k: h[k] for k in ("loss", "lr", "grad_norm")} for h in result.history
    ]
    assert [s for _, s in dev_calls] == [d["step"] for d in result.dev_curve]
    assert [m["stsb_dev_spearman"] for m, _ in dev_calls] == [
        d["stsb_dev_spearman"] for d in result.dev_curve
    ]


def test_lr_decays_linearly_to_zero(reference_run) -> None:
    _, _, _, result, _ = reference_run
    total = _steps()
    lrs = [h["lr"] for h in result.history]
    expected = [1e-3 * (1 - (k - 1) / total) for k in range(1, total + 1)]  # no warm-up
    assert lrs == pytest.approx(expected, rel=1e-9)
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-3 / total)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))


def test_nan_loss_raises(monkeypatch, tiny_encoder_factory, corpus, tmp_path) -> None:
    import focalcse.core.training as training

    calls = {"n": 0}

    def fake_build_loss(name, temperature, m):
        def loss(z1, z2):
            calls["n"] += 1
            value = (z1 * z2).sum() * 0.0
            return value + (float("nan") if calls["n"] >= 3 else 1.0)

        return loss

    monkeypatch.setattr(training, "build_loss", fake_build_loss)
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    with pytest.raises(NonFiniteLossError, match="at step 3"):
        train(enc, corpus, _cfg(eval_at_start=False), tmp_path / "nan", progress=False)
    assert not (tmp_path / "nan").exists()  # no dev evaluator: nothing was saved before the failure


def test_no_dev_evaluator_keeps_last_model_and_max_steps(tiny_encoder_factory, corpus, tmp_path) -> None:
    enc = tiny_encoder_factory("avg")
    result = train(enc, corpus, _cfg(max_steps=3), tmp_path / "last", progress=False)
    assert result.steps == 3 and result.best_step == 3 and result.dev_curve == []
    record = read_record(tmp_path / "last")
    assert record.eval_pooler == "avg" and record.extra == {"best_step": 3, "stsb_dev_spearman": None}
    with pytest.raises(ValueError, match="max_steps=99"):
        train(enc, corpus, _cfg(max_steps=99), tmp_path / "x", progress=False)


def test_batch_order() -> None:
    batches = batch_order(10, 3, epochs=2, seed=0)
    assert [len(b) for b in batches] == [3, 3, 3] * 2  # the last batch of 1 is dropped each epoch
    for epoch in (batches[:3], batches[3:]):
        flat = [i for b in epoch for i in b]
        assert len(flat) == len(set(flat)) == 9 and set(flat) <= set(range(10))
    assert batches[:3] != batches[3:]  # a new permutation per epoch
    full = batch_order(12, 5, epochs=1, seed=3)
    assert [len(b) for b in full] == [5, 5, 2]
    assert sorted(i for b in full for i in b) == list(range(12))
    assert batch_order(12, 5, 1, 3) == full and batch_order(12, 5, 1, 4) != full


def test_tokenize_corpus_drops_blank_lines(
    monkeypatch, tmp_path, minilm_tokenizer, tiny_encoder_factory
) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    lines = [
        "The first sentence.",
        "",
        "   ",
        "A second one, somewhat longer than the first.",
        "\t",
        "Third.",
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ds = tokenize_corpus(path, minilm_tokenizer, max_seq_len=8)
    kept = [x for x in lines if x.strip()]
    assert len(ds) == 3 and ds.column_names == ["input_ids"]
    assert ds["input_ids"] == minilm_tokenizer(kept, truncation=True, max_length=8)["input_ids"]
    assert max(len(x) for x in ds["input_ids"]) == 8
    # a Dataset is accepted as a training corpus
    result = train(tiny_encoder_factory("avg"), ds, _cfg(batch_size=2), tmp_path / "m", progress=False)
    assert result.steps == 1  # 3 sentences: one batch of 2, the single leftover dropped
    (tmp_path / "tiny.txt").write_text("only one\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="at least 2"):
        tokenize_corpus(tmp_path / "tiny.txt", minilm_tokenizer, max_seq_len=8)
