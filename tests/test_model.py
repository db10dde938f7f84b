"""Sentence encoder: poolers by hand, mlp_only_train, save/load round trips, backbone resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from focalcse.core.encode import encode
from focalcse.core.model import RECORD_FILE, SentenceEncoder, read_record, resolve_backbone

SENTS = [
    "a man is playing a guitar .",
    "hi",
    "the quick brown fox jumps over the lazy dog near the river bank",
    "two dogs run",
]


def _hidden(enc: SentenceEncoder, sents: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    batch = enc.tokenize(sents)
    with torch.no_grad():
        hidden = enc.backbone(**batch).last_hidden_state  # (B, L, d)
    return hidden, batch["attention_mask"]


def test_pool_by_hand(tiny_encoder_factory) -> None:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 32, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    for pooler in ("cls", "cls_before_pooler", "avg"):
        enc = tiny_encoder_factory(pooler).eval()
        with torch.no_grad():
            out = enc.pool(hidden, mask)
        assert out.shape == (3, 32)
        for i in range(3):
            n = int(mask[i].sum())
            if pooler == "avg":
                expected = sum(hidden[i, t] for t in range(n)) / n  # real tokens only
            elif pooler == "cls_before_pooler":
                expected = hidden[i, 0]
            else:
                w, b = enc.mlp[0].weight, enc.mlp[0].bias
                expected = torch.tanh(w @ hidden[i, 0] + b)
            torch.testing.assert_close(out[i], expected, atol=1e-6, rtol=1e-6)


def test_mlp_only_train_switches_with_mode(tiny_encoder_factory) -> None:
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    assert enc.eval_pooler == "cls_before_pooler" and enc.mlp is not None
    hidden = torch.randn(2, 4, 32)
    mask = torch.ones(2, 4, dtype=torch.long)
    with torch.no_grad():
        enc.train()
        train_vec = enc.pool(hidden, mask)
        enc.eval()
        eval_vec = enc.pool(hidden, mask)
        torch.testing.assert_close(train_vec, enc.mlp(hidden[:, 0]))
        torch.testing.assert_close(eval_vec, hidden[:, 0])
    # without the flag, cls keeps its MLP at evaluation; the flag means nothing for other poolers
    assert tiny_encoder_factory("cls", mlp_only_train=False).eval_pooler == "cls"
    avg = tiny_encoder_factory("avg", mlp_only_train=True)
    assert avg.eval_pooler == "avg" and avg.mlp is None and not avg.mlp_only_train


def test_forward_uses_backbone_hidden_states(tiny_encoder_factory) -> None:
    enc = tiny_encoder_factory("avg").eval()
    hidden, mask = _hidden(enc, SENTS)
    batch = enc.tokenize(SENTS)
    with torch.no_grad():
        vecs = enc(batch["input_ids"], batch["attention_mask"])
    for i, s in enumerate(SENTS):
        n = int(mask[i].sum())
        torch.testing.assert_close(vecs[i], hidden[i, :n].mean(0), atol=1e-6, rtol=1e-6)
        # padding does not change a sentence's vector
        alone, _ = _hidden(enc, [s])
        torch.testing.assert_close(vecs[i], alone[0].mean(0), atol=1e-5, rtol=0)


def test_unknown_pooler(tiny_encoder_factory) -> None:
    with pytest.raises(ValueError, match="unknown pooler 'mean'"):
        tiny_encoder_factory("mean")


EVAL_POOLERS = {  # eval pooler -> (train pooler, mlp_only_train)
    "cls_before_pooler": ("cls", True),
    "cls": ("cls", False),
    "avg": ("avg", False),
}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory, minilm_tokenizer) -> dict[str, tuple[Path, torch.Tensor]]:
    """One saved tiny model per evaluation pooler, with its eval vectors of SENTS before saving."""
    from focalcse.core.model import tiny_config

    root = tmp_path_factory.mktemp("models")
    out = {}
    for eval_pooler, (pooler, mot) in EVAL_POOLERS.items():
        torch.manual_seed(7)
        enc = SentenceEncoder.from_config(
            tiny_config(minilm_tokenizer.vocab_size), minilm_tokenizer, pooler=pooler, mlp_only_train=mot
        )
        if eval_pooler == "cls":  # the fresh MLP differs from the backbone's own pooler layer
            assert not torch.equal(enc.mlp[0].weight, enc.backbone.pooler.dense.weight)
        before = encode(enc, SENTS)
        path = enc.save(root / eval_pooler, extra={"note": "test"})
        out[eval_pooler] = (path, before)
    return out


@pytest.mark.parametrize("eval_pooler", list(EVAL_POOLERS))
def test_save_and_reload(saved_models, eval_pooler: str) -> None:
    path, before = saved_models[eval_pooler]
    pooler, mot = EVAL_POOLERS[eval_pooler]
    record = read_record(path)
    assert record is not None
    assert (record.eval_pooler, record.train_pooler, record.mlp_only_train) == (eval_pooler, pooler, mot)
    assert record.extra == {"note": "test"}
    assert json.loads((path / RECORD_FILE).read_text())["eval_pooler"] == eval_pooler
    assert not list(path.parent.glob(f".{path.name}.*")), "temporary folders left behind"
    enc = SentenceEncoder.from_pretrained(path)
    assert enc.eval_pooler == eval_pooler
    torch.testing.assert_close(encode(enc, SENTS), before, atol=1e-6, rtol=0)
    same = SentenceEncoder.from_pretrained(path, pooler=eval_pooler)
    torch.testing.assert_close(encode(same, SENTS), before, atol=1e-6, rtol=0)


@pytest.mark.parametrize("eval_pooler", list(EVAL_POOLERS))
def test_wrong_pooler_for_saved_model(saved_models, eval_pooler: str) -> None:
    path, _ = saved_models[eval_pooler]
    other = "avg" if eval_pooler != "avg" else "cls"
    with pytest.raises(ValueError) as exc:
        SentenceEncoder.from_pretrained(path, pooler=other)
    msg = str(exc.value)
    assert repr(eval_pooler) in msg and repr(other) in msg


@pytest.mark.parametrize("eval_pooler", list(EVAL_POOLERS))
def test_plain_automodel_reads_the_saved_folder(saved_models, eval_pooler: str) -> None:
    from transformers import AutoModel, AutoTokenizer

    path, before = saved_models[eval_pooler]
    model = AutoModel.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    batch = tok(SENTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    if eval_pooler == "cls_before_pooler":
        vecs = out.last_hidden_state[:, 0]
    elif eval_pooler == "cls":
        vecs = out.pooler_output  # the trained MLP was written into the backbone's pooler
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        vecs = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(vecs, before, atol=1e-5, rtol=0)


@pytest.mark.parametrize("eval_pooler", list(EVAL_POOLERS))
def test_sentence_transformers_reads_the_saved_folder(saved_models, eval_pooler: str) -> None:
    st = pytest.importorskip("sentence_transformers")
    path, before = saved_models[eval_pooler]
    model = st.SentenceTransformer(str(path), device="cpu")
    vecs = torch.as_tensor(model.encode(SENTS, convert_to_numpy=True, batch_size=3))
    torch.testing.assert_close(vecs, before, atol=1e-5, rtol=0)


def test_save_replaces_an_existing_folder(tiny_encoder_factory, tmp_path: Path) -> None:
    first = tiny_encoder_factory("avg", seed=1)
    second = tiny_encoder_factory("avg", seed=2)
    path = tmp_path / "model"
    first.save(path)
    (path / "stale.txt").write_text("old")
    second.save(path)
    assert not (path / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    torch.testing.assert_close(
        encode(SentenceEncoder.from_pretrained(path), SENTS), encode(second, SENTS), atol=1e-6, rtol=0
    )


def test_resolve_backbone(tmp_path: Path, minilm_path: str) -> None:
    path = resolve_backbone("all-MiniLM-L6-v2")
    assert Path(path).is_dir() and (Path(path) / "config.json").is_file()
    assert resolve_backbone("sentence-transformers/all-MiniLM-L6-v2") == path == minilm_path
    assert resolve_backbone(path) == str(Path(path).resolve())
    with pytest.raises(ValueError, match="does not exist"):
        resolve_backbone("./x-no-such-folder")
    with pytest.raises(ValueError, match="no config.json"):
        resolve_backbone(tmp_path)
    assert resolve_backbone("bert-base-uncased") == "bert-base-uncased"  # a hub id passes through


def test_minilm_loads_with_each_pooler(minilm_path: str) -> None:
    """The offline backbone: a fresh MLP for cls, its own pooler layer with mlp_init='pretrained'."""
    fresh = SentenceEncoder.from_pretrained("all-MiniLM-L6-v2", pooler="cls", mlp_only_train=True, seed=0)
    assert fresh.eval_pooler == "cls_before_pooler" and fresh.source == "all-MiniLM-L6-v2"
    pre = SentenceEncoder.from_pretrained(minilm_path, pooler="cls", mlp_init="pretrained")
    torch.testing.assert_close(pre.mlp[0].weight, pre.backbone.pooler.dense.weight)
    with pytest.raises(ValueError, match="no pooler given"):
        SentenceEncoder.from_pretrained(minilm_path)


# ---------------------------------------------------------------- the fresh MLP's initialisation
WIDE = 256  # 65,536 MLP weights: the sample std is within ~0.3% of sigma (1 sd)


def _wide_config(initializer_range: float = 0.02):
    from focalcse.core.model import tiny_config

    cfg = tiny_config(vocab_size=200, hidden=WIDE, layers=1, heads=4)  # small vocab: the MLP is what counts
    cfg.initializer_range = initializer_range
    return cfg


def _assert_normal(weight: torch.Tensor, std: float) -> None:
    w = weight.detach().double().flatten()
    assert float(w.std()) == pytest.approx(std, rel=0.02)
    assert abs(float(w.mean())) < 4 * std / w.numel() ** 0.5  # 4 standard errors of the mean
    # a normal, not a uniform of the same std: kurtosis 3 (uniform 1.8), standard error ~0.02 here
    assert float(((w - w.mean()) ** 4).mean() / w.var() ** 2) == pytest.approx(3.0, abs=0.15)


@pytest.mark.parametrize("initializer_range", [0.02, 0.05])
def test_fresh_mlp_is_initialised_like_the_backbone(initializer_range: float) -> None:
    """SimCSE's ``cl_init``: the MLP's weights N(0, initializer_range), bias 0 (PyTorch's default
    would be uniform with std 1/sqrt(3 * 256) = 0.036 here)."""
    torch.manual_seed(0)
    enc = SentenceEncoder.from_config(_wide_config(initializer_range), None, pooler="cls")
    _assert_normal(enc.mlp[0].weight, initializer_range)
    assert torch.equal(enc.mlp[0].bias, torch.zeros(WIDE))


@pytest.fixture(scope="module")
def wide_backbone(tmp_path_factory, minilm_tokenizer) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """A saved 256-wide random BERT whose own pooler layer holds distinctive weights (uniform, bias
    0.1), so a copy of it cannot be mistaken for a fresh initialisation."""
    from transformers import AutoModel

    torch.manual_seed(3)
    model = AutoModel.from_config(_wide_config())
    with torch.no_grad():
        model.pooler.dense.weight.uniform_(-0.5, 0.5)
        model.pooler.dense.bias.fill_(0.1)
    path = tmp_path_factory.mktemp("wide") / "backbone"
    model.save_pretrained(path, safe_serialization=True)
    minilm_tokenizer.save_pretrained(path)  # loaded, never used to tokenise here
    return path, model.pooler.dense.weight.detach().clone(), model.pooler.dense.bias.detach().clone()


def test_fresh_mlp_follows_the_seed_and_pretrained_copies_the_pooler(wide_backbone) -> None:
    path, pooler_w, pooler_b = wide_backbone

    def mlp(seed: int, mlp_init: str = "fresh") -> torch.nn.Linear:
        return SentenceEncoder.from_pretrained(path, pooler="cls", mlp_init=mlp_init, seed=seed).mlp[0]

    a, b, c = mlp(1), mlp(1), mlp(2)
    assert torch.equal(a.weight, b.weight)  # same seed, same MLP
    assert not torch.equal(a.weight, c.weight)
    _assert_normal(a.weight, 0.02)
    assert torch.equal(a.bias, torch.zeros(WIDE)) and torch.equal(c.bias, torch.zeros(WIDE))
    pre = mlp(1, mlp_init="pretrained")  # the backbone's own pooler layer, untouched by the init
    assert torch.equal(pre.weight, pooler_w) and torch.equal(pre.bias, pooler_b)
