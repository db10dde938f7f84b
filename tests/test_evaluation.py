"""Evaluation: Spearman, the "all" and "wmean" aggregations, alignment/uniformity, encode, evaluate_sts."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import sts_reference as ref
import torch
from conftest import random_sentence
from scipy.stats import rankdata

from focalcse.core.encode import encode
from focalcse.core.model import SentenceEncoder, tiny_config
from focalcse.data.sts import StsDataError, StsSplit, write_prepared
from focalcse.data.tasks import PAPER_TASKS
from focalcse.eval.sts_eval import (
    alignment_uniformity,
    cosine_spearman,
    evaluate_sts,
    score_split,
    stsb_dev_evaluator,
)


def _hand_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([float(x @ y) / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b)])


def _hand_spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of average ranks, x 100."""
    return float(np.corrcoef(rankdata(x), rankdata(y))[0, 1]) * 100.0


def test_cosine_spearman_matches_hand_computation() -> None:
    gen = torch.Generator().manual_seed(0)
    v1, v2 = torch.randn(40, 6, generator=gen), torch.randn(40, 6, generator=gen)
    gold = np.round(np.random.default_rng(0).uniform(0, 5, 40), 1)  # rounded: ties in the gold scores
    expected = _hand_spearman(_hand_cos(v1.double().numpy(), v2.double().numpy()), gold)
    assert cosine_spearman(v1, v2, list(gold)) == pytest.approx(expected, abs=1e-9)
    # a perfectly ordered prediction scores 100, a reversed one -100
    base = torch.tensor([[1.0, 0.0]]).repeat(5, 1)
    angles = torch.linspace(0.1, 1.4, 5)
    other = torch.stack([torch.cos(angles), torch.sin(angles)], dim=1)
    assert cosine_spearman(base, other, [5, 4, 3, 2, 1]) == pytest.approx(100.0)
    assert cosine_spearman(base, other, [1, 2, 3, 4, 5]) == pytest.approx(-100.0)


def _synthetic_split() -> tuple[StsSplit, dict[str, torch.Tensor]]:
    """Three subsets of different sizes with a fixed random vector per sentence."""
    rng = np.random.default_rng(1)
    table: dict[str, torch.Tensor] = {}
    subsets = {}
    for name, n in (("alpha", 5), ("beta", 9), ("gamma", 14)):
        s1 = [f"{name} left {i}" for i in range(n)]
        s2 = [f"{name} right {i}" for i in range(n)]
        for s in s1 + s2:
            table[s] = torch.tensor(rng.normal(size=4), dtype=torch.float32)
        gold = list(np.round(rng.uniform(0, 5, n), 2))
        subsets[name] = (s1, s2, gold)
    return StsSplit("STS99", subsets), table


def test_score_split_all_and_wmean_by_hand() -> None:
    split, table = _synthetic_split()
    calls: list[int] = []

    def vectors(sents: list[str]) -> torch.Tensor:
        calls.append(len(sents))
        return torch.stack([table[s] for s in sents])

    r = score_split(vectors, split)
    sims, golds, per, sizes = [], [], {}, {}
    for name, (s1, s2, gold) in split.subsets.items():
        a = np.stack([table[s].double().numpy() for s in s1])
        b = np.stack([table[s].double().numpy() for s in s2])
        c = _hand_cos(a, b)
        sims.append(c)
        golds.append(np.asarray(gold))
        per[name] = _hand_spearman(c, np.asarray(gold))
        sizes[name] = len(gold)
    pooled = _hand_spearman(np.concatenate(sims), np.concatenate(golds))
    wmean = sum(per[k] * sizes[k] for k in per) / sum(sizes.values())
    assert r["all"] == pytest.approx(pooled, abs=1e-6)
    assert r["wmean"] == pytest.approx(wmean, abs=1e-6)
    assert r["subsets"] == pytest.approx(per, abs=1e-6)
    # the two aggregations differ in general (this split is built so that they do)
    assert abs(r["all"] - r["wmean"]) > 1e-3
    # the size weighting matters: the plain mean is a different number
    assert abs(r["wmean"] - float(np.mean(list(per.values())))) > 1e-6
    assert calls == [10, 18, 28]


def test_alignment_uniformity_by_hand() -> None:
    gen = torch.Generator().manual_seed(3)
    vecs = torch.randn(7, 5, generator=gen) * 3.0  # not normalised: the function must normalise
    pa, pb = vecs[[0, 2, 4]], vecs[[1, 3, 6]]
    align, uniform = alignment_uniformity(vecs, pa, pb)

    def unit(x: torch.Tensor) -> np.ndarray:
        x = x.double().numpy()
        return x / np.linalg.norm(x)

    d2 = [float(np.sum((unit(a) - unit(b)) ** 2)) for a, b in zip(pa, pb)]
    hand_align = sum(d2) / len(d2)
    terms = []
    for i in range(len(vecs)):
        for j in range(i + 1, len(vecs)):
            terms.append(math.exp(-2.0 * float(np.sum((unit(vecs[i]) - unit(vecs[j])) ** 2))))
    hand_uniform = math.log(sum(terms) / len(terms))
    assert align == pytest.approx(hand_align, rel=1e-10)
    assert uniform == pytest.approx(hand_uniform, rel=1e-10)
    # identical positives align perfectly; uniformity is <= 0 and -4 is its floor (antipodal pair)
    assert alignment_uniformity(vecs, pa, pa)[0] == pytest.approx(0.0, abs=1e-12)
    two = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert alignment_uniformity(two, two[:1], two[1:]) == pytest.approx((4.0, -8.0))


SENTS = [
    "a man is playing a guitar .",
    "hello",
    "the quick brown fox jumps over the lazy dog again and again and again",
    "two dogs run in the park",
    "a woman slices an onion",
]


@pytest.mark.parametrize(("pooler", "mlp_only_train"), [("cls", True), ("cls", False), ("avg", False)])
def test_encode_is_order_and_padding_independent(tiny_encoder_factory, pooler, mlp_only_train) -> None:
    enc = tiny_encoder_factory(pooler, mlp_only_train)
    base = encode(enc, SENTS, batch_size=4)
    assert base.shape == (len(SENTS), 32) and base.dtype == torch.float32
    alone = torch.cat([encode(enc, [s]) for s in SENTS])
    torch.testing.assert_close(base, alone, atol=1e-5, rtol=0)
    shuffled = [SENTS[i] for i in (4, 1, 1, 0, 3, 2, 4, 1)]
    again = encode(enc, shuffled, batch_size=2)
    torch.testing.assert_close(again, base[[4, 1, 1, 0, 3, 2, 4, 1]], atol=1e-5, rtol=0)
    assert torch.equal(again[1], again[2]) and torch.equal(again[0], again[6])  # duplicates encoded once


def test_encode_uses_the_eval_pooler_and_restores_mode(tiny_encoder_factory) -> None:
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    batch = enc.tokenize(SENTS[:2])
    enc.eval()
    with torch.no_grad():
        hidden = enc.backbone(**batch).last_hidden_state
    vecs = encode(enc, SENTS[:2])
    torch.testing.assert_close(vecs, hidden[:, 0], atol=1e-5, rtol=0)  # cls_before_pooler: no MLP
    assert not enc.training
    enc.train()
    encode(enc, SENTS[:2])
    assert enc.training
    assert all(m.training for m in enc.modules())
    # eval mode inside encode: dropout is off, so repeated calls agree exactly
    torch.testing.assert_close(encode(enc, SENTS), encode(enc, SENTS), atol=0, rtol=0)


def test_evaluate_sts_contract_on_tiny_data(tiny_encoder_factory, tiny_sts_dir: Path) -> None:
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    with pytest.raises(StsDataError, match="expected 750"):
        evaluate_sts(enc, str(tiny_sts_dir), progress=False)  # real counts are checked by default
    r = evaluate_sts(enc, str(tiny_sts_dir), check_counts=False, progress=False)
    for key in (*PAPER_TASKS, "avg", "wmean", "alignment", "uniformity", "subsets", "n_pairs"):
        assert key in r, key
    assert set(r["wmean"]) == {*PAPER_TASKS, "avg"}  # the default tasks: the paper's 7
    # one-subset tasks: wmean is the pooled score
    assert r["wmean"]["STSBenchmark"] == pytest.approx(r["STSBenchmark"])
    assert r["wmean"]["SICKRelatedness"] == pytest.approx(r["SICKRelatedness"])
    assert set(r["subsets"]) == {"STS12", "STS13", "STS14", "STS15", "STS16"}
    assert r["n_pairs"]["STS12"] == 5 * 8 and r["n_pairs"]["STSBenchmark"] == 24


SEVEN_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]


def _write_stsb_test(downstream: Path) -> None:
    """STS-B test with gold 0.0, 0.2, ..., 5.0 (4.0 itself is no positive: gold > 4) and sentences
    repeated across pairs (uniformity counts each distinct sentence once)."""
    rng = random.Random(5)
    pool = [random_sentence(rng) for _ in range(40)]
    rows = [
        f"main-captions\tMSRvid\t2012test\t{i:04d}\t{round(0.2 * i, 1)}\t{pool[i]}\t{pool[(7 * i + 3) % 40]}"
        for i in range(26)
    ]
    (downstream / "STS/STSBenchmark/sts-test.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    # the dev split, where alignment and uniformity are computed: other pairs of the same kind
    dev = [
        f"main-captions\tMSRvid\t2012dev\t{i:04d}\t{round(5.0 - 0.2 * i, 1)}\t{pool[(3 * i + 1) % 40]}\t{pool[(5 * i + 2) % 40]}"
        for i in range(26)
    ]
    (downstream / "STS/STSBenchmark/sts-dev.csv").write_text("\n".join(dev) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("pooler", "mlp_only_train", "eval_pooler"),
    [("cls", True, "cls_before_pooler"), ("cls", False, "cls"), ("avg", False, "avg")],
)
def test_evaluate_sts_matches_plain_transformers(
    minilm_tokenizer, tiny_sts_dir: Path, tmp_path: Path, pooler, mlp_only_train, eval_pooler
) -> None:
    """Every score, avg, alignment and uniformity against AutoModel + the pooler by hand, numpy loops
    and scipy's spearmanr on the files read by tests/sts_reference.py (nothing of focalcse)."""
    _write_stsb_test(tiny_sts_dir)
    # BERT's initializer_range 0.02 leaves a random model's [CLS] vectors within cosine 1e-5 of each
    # other, where float32 rounding decides the ranks; at 0.5 they spread over [-0.1, 0.9].
    config = tiny_config(minilm_tokenizer.vocab_size)
    config.initializer_range = 0.5
    torch.manual_seed(0)
    enc = SentenceEncoder.from_config(config, minilm_tokenizer, pooler=pooler, mlp_only_train=mlp_only_train)
    folder = enc.save(tmp_path / "model")
    r = evaluate_sts(
        SentenceEncoder.from_pretrained(folder), str(tiny_sts_dir), check_counts=False, progress=False
    )
    embed = ref.HfEmbedder(folder, eval_pooler)
    expected_all, expected_wmean = {}, {}
    for task in SEVEN_TASKS:
        expected_all[task], expected_wmean[task], gap = ref.task_score(
            embed, ref.read_task(tiny_sts_dir, task)
        )
        # the two paths' cosines differ by <= 2e-7 (float32, other batching): no rank can flip
        assert gap > 1e-6, f"{task}: near-tied cosines ({gap:.1e}); float32 rounding could flip ranks"
    assert {t: r[t] for t in SEVEN_TASKS} == pytest.approx(expected_all, abs=1e-4)
    assert {t: r["wmean"][t] for t in SEVEN_TASKS} == pytest.approx(expected_wmean, abs=1e-4)
    assert r["avg"] == pytest.approx(np.mean(list(expected_all.values())), abs=1e-4)
    assert r["wmean"]["avg"] == pytest.approx(np.mean(list(expected_wmean.values())), abs=1e-4)
    # alignment and uniformity on STS-B *dev* (SimCSE's analysis), not on the test split
    stsb = ref.read_task(tiny_sts_dir, "STSBenchmark-dev")["test"]
    assert len(set(stsb[0] + stsb[1])) < 2 * len(stsb[0]) and 4.0 in stsb[2]
    align, uniform = ref.alignment_uniformity(embed, stsb)
    on_test = ref.alignment_uniformity(embed, ref.read_task(tiny_sts_dir, "STSBenchmark")["test"])
    assert abs(on_test[0] - align) > 1e-4 and abs(on_test[1] - uniform) > 1e-4  # the split matters here
    assert r["alignment"] == pytest.approx(align, abs=1e-5)
    assert r["uniformity"] == pytest.approx(uniform, abs=1e-5)


def test_evaluate_sts_subset_of_tasks(tiny_encoder_factory, tiny_sts_dir: Path) -> None:
    enc = tiny_encoder_factory("avg")
    r = evaluate_sts(enc, str(tiny_sts_dir), tasks=["STS13", "SICKRelatedness"], check_counts=False)
    assert r["avg"] == pytest.approx((r["STS13"] + r["SICKRelatedness"]) / 2)
    assert "alignment" not in r and "STSBenchmark" not in r
    with pytest.raises(ValueError, match="unknown task"):
        evaluate_sts(enc, str(tiny_sts_dir), tasks=["STS11"], check_counts=False)


def test_stsb_dev_evaluator_on_prepared_dev(tiny_encoder_factory, tiny_sts_dir: Path, tmp_path: Path) -> None:
    from focalcse.data.sts import read_stsb

    dev = read_stsb(tiny_sts_dir, "dev", check_counts=False)
    write_prepared([("STSBenchmark-dev", dev)], tmp_path / "prep", source="tiny")
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    score = stsb_dev_evaluator(str(tmp_path / "prep"))(enc)
    s1, s2, gold = dev.subsets["dev"]
    v = encode(enc, s1 + s2)
    assert score == pytest.approx(cosine_spearman(v[: len(s1)], v[len(s1) :], gold))
