"""DiffCSE pieces (focalcse.core.frameworks.diffcse) against hand-written expectations.

A tiny random BERT (hidden 32, 2 layers) with the MiniLM (bert-base-uncased vocabulary) tokenizer, as
tests/test_promptbert.py. Expected values are written out here (the BCE with math.log and a written
sigmoid), not through the module under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from focalcse.core.frameworks.diffcse import (
    OFFICIAL,
    BatchNormProjector,
    ConditionalDiscriminator,
    diffcse_loss,
    replace_with_generator,
    rtd_loss,
)
from focalcse.core.losses.infonce import InfoNCE
from focalcse.core.masking import mask_tokens

SENTENCES = ["a man is playing a guitar", "two dogs run", "the cat sat on the big red table near the park"]


@pytest.fixture
def tok(minilm_tokenizer):
    return minilm_tokenizer


@pytest.fixture
def bert(tiny_bert):
    return tiny_bert


def batch(tok, sentences=SENTENCES):
    enc = tok(sentences, padding=True, return_tensors="pt", return_special_tokens_mask=True)
    return enc["input_ids"], enc["attention_mask"], enc["special_tokens_mask"]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- hyper-parameters
def test_official_bert_hyper_parameters():
    h = OFFICIAL["bert-base"]
    assert (h.mask_ratio, h.lambda_weight, h.lr, h.batch_size, h.temperature) == (0.30, 0.005, 7e-6, 64, 0.05)
    assert h.generator == "distilbert-base-uncased" and h.batchnorm is True
    assert OFFICIAL["roberta-base"].generator == "distilroberta-base"
    with pytest.raises(AttributeError):
        h.lr = 1.0  # frozen


# ---------------------------------------------------------------- RTD loss
def test_rtd_loss_matches_written_bce():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [-0.3, 1.2, 0.0, -2.0]])
    labels = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])

    def bce(x, y):
        p = sigmoid(x)
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    terms = [[bce(x, y) for x, y in zip(rx, ry)] for rx, ry in zip(logits.tolist(), labels.tolist())]
    all_mean = sum(sum(r) for r in terms) / 8  # official: every position, padding included
    real_mean = sum(t for r, m in zip(terms, mask.tolist()) for t, k in zip(r, m) if k) / 7
    assert rtd_loss(logits, labels, mask).item() == pytest.approx(all_mean, rel=1e-6)
    assert rtd_loss(logits, labels, mask, include_padding=False).item() == pytest.approx(real_mean, rel=1e-6)

    # the official two-class head: CE over (a, b) == BCE on b - a
    two = torch.stack([torch.zeros_like(logits), logits], dim=-1) + 0.7
    assert rtd_loss(two, labels, mask).item() == pytest.approx(all_mean, rel=1e-6)


def test_diffcse_loss_with_zero_lambda_is_the_contrastive_loss():
    torch.manual_seed(1)
    z1, z2 = torch.randn(6, 16), torch.randn(6, 16)
    contrastive = InfoNCE(0.05)(z1, z2)
    rtd = rtd_loss(torch.randn(6, 5), torch.randint(0, 2, (6, 5)), torch.ones(6, 5, dtype=torch.long))
    assert torch.equal(diffcse_loss(contrastive, rtd, 0.0), InfoNCE(0.05)(z1, z2))
    assert diffcse_loss(contrastive, rtd, 0.005).item() == pytest.approx(
        contrastive.item() + 0.005 * rtd.item(), rel=1e-6
    )


# ---------------------------------------------------------------- masking
def test_masking_ratio_specials_padding_and_determinism(tok):
    rng = torch.Generator().manual_seed(0)
    sentences = [" ".join(["word"] * n) for n in (3, 40, 17, 60)] * 16
    ids, mask, special = batch(tok, sentences)
    eligible = (special == 0) & (mask == 1)
    assert (mask == 0).any()  # there is padding

    masked, labels = mask_tokens(ids, mask, special, 0.3, tok.mask_token_id, rng, vocab_size=len(tok))
    selected = labels != -100
    assert not (selected & ~eligible).any()  # no special token, no padding
    assert torch.equal(masked[~eligible], ids[~eligible])
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected])  # only selected tokens change
    frac = selected.sum().item() / eligible.sum().item()
    assert frac == pytest.approx(0.3, abs=0.03)
    mask_share = (masked[selected] == tok.mask_token_id).float().mean().item()
    assert mask_share == pytest.approx(0.8, abs=0.05)

    again = mask_tokens(
        ids, mask, special, 0.3, tok.mask_token_id, torch.Generator().manual_seed(0), vocab_size=len(tok)
    )
    assert torch.equal(again[0], masked) and torch.equal(again[1], labels)
    other = mask_tokens(
        ids, mask, special, 0.3, tok.mask_token_id, torch.Generator().manual_seed(1), vocab_size=len(tok)
    )
    assert not torch.equal(other[1], labels)

    none, none_labels = mask_tokens(ids, mask, special, 0.0, tok.mask_token_id, rng, vocab_size=len(tok))
    assert torch.equal(none, ids) and (none_labels == -100).all()


def test_masking_excludes_padding_even_without_special_mark(tok):
    ids, mask, special = batch(tok)
    no_pad_mark = special * mask  # padding not marked special
    _, labels = mask_tokens(
        ids, mask, no_pad_mark, 1.0, tok.mask_token_id, torch.Generator().manual_seed(0), vocab_size=len(tok)
    )
    assert torch.equal(labels != -100, (special == 0) & (mask == 1))


# ---------------------------------------------------------------- replacement
def test_replacement_labels_and_official_argmax(tok):
    original = torch.tensor([[101, 7, 8, 9, 102, 0], [101, 5, 6, 102, 0, 0]])
    attn = (original != 0).long()
    masked = original.clone()
    masked[0, 2] = masked[1, 1] = tok.mask_token_id
    want = torch.tensor([[55, 7, 33, 9, 44, 12], [55, 5, 6, 102, 77, 78]])  # argmax per position
    logits = torch.full((2, 6, 120), -5.0)
    logits.scatter_(-1, want.unsqueeze(-1), 5.0)

    ids, labels = replace_with_generator(logits, masked, original, attn, cls_token_id=101)
    # position 0 reset to [CLS]; padding -> id 0; argmax everywhere (also unmasked position 4)
    assert ids.tolist() == [[101, 7, 33, 9, 44, 0], [101, 5, 6, 102, 0, 0]]
    # (1, 1) was masked but regenerated as the original: labelled 0
    assert labels.tolist() == [[0, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0]]

    only, only_labels = replace_with_generator(logits, masked, original, attn, 101, only_masked=True)
    assert only.tolist() == [[101, 7, 33, 9, 102, 0], [101, 5, 6, 102, 0, 0]]
    assert only_labels.tolist() == [[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]]

    # sampling from a (near) one-hot distribution gives the argmax; labels follow the same rule
    peaked = logits * 10
    s_ids, s_labels = replace_with_generator(
        peaked, masked, original, attn, 101, sample=True, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(s_ids, ids) and torch.equal(s_labels, labels)


# ---------------------------------------------------------------- conditional discriminator
@pytest.mark.parametrize("where", ["embedding_output", "inputs_embeds"])
def test_conditional_discriminator_uses_the_sentence_vector(tok, bert, where):
    ids, mask, _ = batch(tok)
    disc = ConditionalDiscriminator(bert, num_outputs=1, where=where).eval()
    sent = torch.randn(ids.size(0), 32, requires_grad=True)
    logits = disc(ids, mask, sent)
    assert logits.shape == ids.shape

    other = disc(ids, mask, sent.detach() + 1.0)
    assert not torch.allclose(logits, other)
    # the first token's own input is ignored: changing it changes nothing
    ids2 = ids.clone()
    ids2[:, 0] = tok.convert_tokens_to_ids("the")
    assert torch.allclose(disc(ids2, mask, sent), logits, atol=1e-6)

    labels = torch.randint(0, 2, ids.shape) * mask
    rtd_loss(logits, labels, mask).backward()
    assert sent.grad is not None and sent.grad.abs().sum() > 0
    assert disc.head.weight.grad is not None


def test_official_placement_replaces_the_embedding_output(tok, bert):
    ids, mask, _ = batch(tok)
    sent = torch.randn(ids.size(0), 32)
    disc = ConditionalDiscriminator(bert, num_outputs=2)
    with torch.no_grad():
        emb = bert.embeddings(input_ids=ids)
        emb = torch.cat([sent.unsqueeze(1), emb[:, 1:]], dim=1)
        ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min  # additive mask
        hidden = bert.encoder(emb, attention_mask=ext).last_hidden_state
        want = disc.head(hidden)
        got = disc(ids, mask, sent)
    assert got.shape == (*ids.shape, 2)
    assert torch.allclose(got, want, atol=1e-5)
    # the hook is removed after the call
    with torch.no_grad():
        assert torch.allclose(bert(input_ids=ids, attention_mask=mask).last_hidden_state, bert(ids, mask)[0])
    assert not bert.embeddings._forward_hooks


# ---------------------------------------------------------------- projector
def test_batchnorm_projector_init_is_cl_init():
    """Official cl_init: ProjectionMLP built, then init_weights -> every Linear N(0, initializer_range);
    BatchNorm left at weight 1 / bias 0. Checked by the sample statistics of the 2 x 64 x 128 draws."""
    torch.manual_seed(0)
    proj = BatchNormProjector(128, init_std=0.02)
    linear1, bn1, _, linear2, _ = proj.net
    for lin in (linear1, linear2):
        w = lin.weight.detach().double()
        assert abs(float(w.mean())) < 0.002
        assert (
            abs(float(w.std()) - 0.02) < 0.001
        )  # PyTorch's default would be 1/sqrt(3*fan_in) = 0.051 / 0.036
    assert torch.equal(bn1.weight, torch.ones(256)) and torch.equal(bn1.bias, torch.zeros(256))
    torch.manual_seed(0)
    default = BatchNormProjector(128, init_std=None).net[0].weight.detach().double()
    assert abs(float(default.std()) - 1 / (3 * 128) ** 0.5) < 0.003


def test_batchnorm_projector_shapes_and_modes():
    torch.manual_seed(0)
    proj = BatchNormProjector(32)
    linear1, bn1, _, linear2, bn2 = proj.net
    assert (linear1.in_features, linear1.out_features, linear1.bias) == (32, 64, None)
    assert (linear2.in_features, linear2.out_features, linear2.bias) == (64, 32, None)
    assert bn1.affine and not bn2.affine

    x = torch.randn(16, 32) * 3 + 1
    out = proj.train()(x)
    assert out.shape == (16, 32)
    assert torch.allclose(out.mean(0), torch.zeros(32), atol=1e-5)  # batch statistics
    assert torch.allclose(out.var(0, unbiased=False), torch.ones(32), atol=1e-2)
    with pytest.raises(ValueError):
        proj(x[:1])  # training-mode BN needs more than one sample

    proj.eval()
    one = proj(x[:1])  # running statistics: fine with one sample, differs from the batch-stat output
    assert one.shape == (1, 32)
    assert not torch.allclose(proj(x), out, atol=1e-3)
    assert torch.allclose(proj(x)[:1], one, atol=1e-6)
