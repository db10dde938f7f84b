"""PromptBERT representation (focalcse.core.frameworks.promptbert) against hand-built inputs.

A tiny random BERT (hidden 32, 2 layers) with the MiniLM (bert-base-uncased vocabulary) tokenizer.
Expected token sequences and model calls are written out here with the tokenizer and the HF model
directly, not through the module under test.
"""

from __future__ import annotations

import pytest
import torch

from focalcse.core.frameworks.promptbert import (
    BERT_EVAL_TEMPLATE,
    BERT_TRAIN_TEMPLATES,
    ROBERTA_EVAL_TEMPLATE,
    ROBERTA_TRAIN_TEMPLATES,
    Template,
    build_inputs,
    denoised_vectors,
    eval_vectors,
    prompt_vectors,
    template_only_inputs,
    template_token_ids,
    training_views,
)
from focalcse.core.losses.infonce import InfoNCE

SENTENCES = ["a man is playing a guitar", "two dogs run", "the cat sat on the big red table near the park"]
PREFIX = 'This sentence of "'  # BERT_TRAIN_TEMPLATES[0] around the sentence, written out
SUFFIX = '" means[MASK].'


@pytest.fixture
def tok(minilm_tokenizer):
    return minilm_tokenizer


@pytest.fixture
def bert(tiny_bert):
    return tiny_bert


def tokens(tok, ids) -> list[str]:
    return tok.convert_ids_to_tokens([int(i) for i in ids])


# ---------------------------------------------------------------- templates
def test_official_templates_parse_verbatim(tok):
    bert1, bert2 = BERT_TRAIN_TEMPLATES
    assert bert1.text == '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'
    assert bert2.text == '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'
    assert bert1 == BERT_EVAL_TEMPLATE
    assert (bert1.prefix, bert1.suffix) == (' This sentence of "', '" means*mask*.')
    assert (bert2.prefix, bert2.suffix) == (' This sentence : "', '" means*mask*.')
    rob1, rob2 = ROBERTA_TRAIN_TEMPLATES
    assert rob1.text == "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"
    assert rob2.text == "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"
    assert rob1 == ROBERTA_EVAL_TEMPLATE
    assert (rob1.prefix, rob1.suffix) == (" This sentence : ' ", " ' means*mask*.")
    assert (rob2.prefix, rob2.suffix) == (" The sentence : ' ", " ' means*mask*.")

    head, tail = template_token_ids(tok, bert1)
    assert tokens(tok, head) == ["[CLS]", "this", "sentence", "of", '"']
    assert tokens(tok, tail) == ['"', "means", "[MASK]", ".", "[SEP]"]
    head2, tail2 = template_token_ids(tok, bert2)
    assert tokens(tok, head2) == ["[CLS]", "this", "sentence", ":", '"']
    assert tokens(tok, tail2) == ['"', "means", "[MASK]", ".", "[SEP]"]
    # the official pair's prefixes have equal token counts, so the official code's use of the first
    # template's prefix length for both views' template-only positions changes nothing
    assert len(head) == len(head2)


@pytest.mark.parametrize(
    "bad",
    [
        "*cls*_This *sent_0*_means*mask*.*sep+*",  # a space
        "*cls*_This_means*mask*.*sep+*",  # no sentence
        "*cls*_*sent_0*_*sent_0*_means*mask*.*sep+*",  # two sentences
        "*cls*_*sent_0*_means.*sep+*",  # no mask
        "*cls*_*mask*_*sent_0*_means*mask*.*sep+*",  # two masks
    ],
)
def test_bad_templates_are_refused(bad):
    with pytest.raises(ValueError):
        Template.parse(bad)


# ---------------------------------------------------------------- inputs
def test_build_inputs_tokens_and_mask_positions(tok):
    batch = build_inputs(tok, ["a man is playing guitar", "two dogs"], BERT_TRAIN_TEMPLATES[0])
    row0 = ["[CLS]", "this", "sentence", "of", '"', "a", "man", "is", "playing", "guitar"]
    row0 += ['"', "means", "[MASK]", ".", "[SEP]"]
    row1 = ["[CLS]", "this", "sentence", "of", '"', "two", "dogs", '"', "means", "[MASK]", ".", "[SEP]"]
    row1 += ["[PAD]"] * 3
    assert tokens(tok, batch.input_ids[0]) == row0
    assert tokens(tok, batch.input_ids[1]) == row1
    assert batch.attention_mask.tolist() == [[1] * 15, [1] * 12 + [0] * 3]
    assert batch.mask_positions.tolist() == [12, 9]
    assert batch.sentence_lengths.tolist() == [5, 2]
    assert batch.position_ids is None
    # the second template fills the same slots
    batch2 = build_inputs(tok, ["two dogs"], BERT_TRAIN_TEMPLATES[1])
    assert tokens(tok, batch2.input_ids[0])[:5] == ["[CLS]", "this", "sentence", ":", '"']


def test_truncation_cuts_the_sentence_and_keeps_the_template(tok):
    long = " ".join(["guitar"] * 100)
    head = ["[CLS]", "this", "sentence", "of", '"']
    tail = ['"', "means", "[MASK]", ".", "[SEP]"]
    # official: the sentence's tokens are cut to max_seq_len, the template comes on top
    batch = build_inputs(tok, [long, "two dogs"], BERT_TRAIN_TEMPLATES[0], max_seq_len=8)
    assert tokens(tok, batch.input_ids[0]) == head + ["guitar"] * 8 + tail
    assert batch.sentence_lengths.tolist() == [8, 2]
    assert batch.mask_positions[0].item() == 5 + 8 + 2
    # count_template: the whole row fits max_seq_len, the template is still whole
    batch = build_inputs(tok, [long], BERT_TRAIN_TEMPLATES[0], max_seq_len=16, count_template=True)
    assert tokens(tok, batch.input_ids[0]) == head + ["guitar"] * 6 + tail
    assert batch.input_ids[0, batch.mask_positions[0]].item() == tok.mask_token_id
    with pytest.raises(ValueError, match="shorter than the template"):
        build_inputs(tok, [long], BERT_TRAIN_TEMPLATES[0], max_seq_len=9, count_template=True)
    # no limit: the whole sentence
    assert build_inputs(tok, [long], BERT_TRAIN_TEMPLATES[0], max_seq_len=None).sentence_lengths.item() == 100


def test_eval_inputs_match_the_official_whole_string_tokenization(tok):
    """evaluation.py fills the string (appending '.' unless the sentence ends in .?"') and tokenizes it
    whole; for WordPiece that is the same as the token-level concatenation."""
    sentences = ["a man is playing a guitar", "is it raining?", 'he said "no"']
    batch = build_inputs(tok, sentences, BERT_EVAL_TEMPLATE, max_seq_len=None, add_period=True)
    filled = [PREFIX + "a man is playing a guitar." + SUFFIX, PREFIX + "is it raining?" + SUFFIX]
    filled.append(PREFIX + 'he said "no"' + SUFFIX)
    for i, text in enumerate(filled):
        expected = tok(text)["input_ids"]
        assert batch.input_ids[i, : len(expected)].tolist() == expected
        assert batch.attention_mask[i].sum().item() == len(expected)
        assert batch.mask_positions[i].item() == expected.index(tok.mask_token_id)


# ---------------------------------------------------------------- vectors
def hand_mask_vector(model, tok, text: str) -> torch.Tensor:
    enc = tok(text, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    with torch.no_grad():
        hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    return hidden[0, ids.index(tok.mask_token_id)]


def test_prompt_vectors_equal_the_hand_computed_mask_hidden_state(bert, tok):
    batch = build_inputs(tok, SENTENCES, BERT_TRAIN_TEMPLATES[0])  # padded: lengths differ
    with torch.no_grad():
        got = prompt_vectors(bert, batch.input_ids, batch.attention_mask, batch.mask_positions)
    expected = torch.stack([hand_mask_vector(bert, tok, PREFIX + s + SUFFIX) for s in SENTENCES])
    assert got.shape == (3, bert.config.hidden_size)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got[0], got[1], atol=1e-3)


def test_denoised_vectors_subtract_the_template_with_official_position_ids(bert, tok):
    template_ids = tok('This sentence of "" means[MASK].')["input_ids"]  # the template, sentence removed
    assert tokens(tok, template_ids) == [
        "[CLS]",
        "this",
        "sentence",
        "of",
        '"',
        '"',
        "means",
        "[MASK]",
        ".",
        "[SEP]",
    ]
    prefix_len = len(tok(PREFIX)["input_ids"]) - 1  # [CLS] + prefix tokens: 5
    t_mask = template_ids.index(tok.mask_token_id)
    expected, hand_positions = [], []
    for s in SENTENCES:
        n = len(tok(s, add_special_tokens=False)["input_ids"])
        # official: arange(T), plus n from the first token after the prefix on
        positions = list(range(prefix_len)) + [p + n for p in range(prefix_len, len(template_ids))]
        hand_positions.append(positions)
        filled = tok(PREFIX + s + SUFFIX)["input_ids"]
        assert positions[t_mask] == filled.index(tok.mask_token_id)  # the filled input's mask position id
        with torch.no_grad():
            t_hidden = bert(
                input_ids=torch.tensor([template_ids]), position_ids=torch.tensor([positions])
            ).last_hidden_state
        expected.append(hand_mask_vector(bert, tok, PREFIX + s + SUFFIX) - t_hidden[0, t_mask])

    batch = build_inputs(tok, SENTENCES, BERT_TRAIN_TEMPLATES[0])
    only = template_only_inputs(tok, BERT_TRAIN_TEMPLATES[0], batch.sentence_lengths)
    assert only.position_ids.tolist() == hand_positions
    assert only.input_ids.tolist() == [template_ids] * 3
    assert only.mask_positions.tolist() == [t_mask] * 3
    with torch.no_grad():
        got = denoised_vectors(bert, tok, batch, BERT_TRAIN_TEMPLATES[0])
        plain = eval_vectors(bert, tok, SENTENCES, BERT_TRAIN_TEMPLATES[0], add_period=False)
        denoised_eval = eval_vectors(
            bert, tok, SENTENCES, BERT_TRAIN_TEMPLATES[0], denoise=True, add_period=False
        )
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(denoised_eval, got)
    torch.testing.assert_close(
        plain, torch.stack([hand_mask_vector(bert, tok, PREFIX + s + SUFFIX) for s in SENTENCES])
    )


# ---------------------------------------------------------------- training
def test_two_template_views_differ_and_the_loss_backpropagates(bert, tok):
    sentences = SENTENCES + ["a woman is riding a horse"]
    bert.eval()  # no dropout: the views still differ, by template
    with torch.no_grad():
        z1, z2 = training_views(bert, tok, sentences)
        v1 = denoised_vectors(
            bert, tok, build_inputs(tok, sentences, BERT_TRAIN_TEMPLATES[0]), BERT_TRAIN_TEMPLATES[0]
        )
        v2 = denoised_vectors(
            bert, tok, build_inputs(tok, sentences, BERT_TRAIN_TEMPLATES[1]), BERT_TRAIN_TEMPLATES[1]
        )
    assert z1.shape == z2.shape == (4, bert.config.hidden_size)
    assert not torch.allclose(z1, z2, atol=1e-3)
    # the joint forward of both views equals each view on its own (denoised with its own template)
    torch.testing.assert_close(z1, v1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(z2, v2, atol=1e-5, rtol=1e-5)

    # the gradient flows through the template vectors unless detached (official delta_freeze)
    grads = []
    for detach in (False, True):
        bert.zero_grad()
        a, b = training_views(bert, tok, sentences, detach_template=detach)
        InfoNCE(0.05)(a, b).backward()
        grads.append(bert.embeddings.position_embeddings.weight.grad.clone())
    assert not torch.allclose(grads[0], grads[1])

    # training mode (dropout on) with SimCSE's MLP head: InfoNCE backpropagates into the backbone
    bert.train()
    bert.zero_grad()
    torch.manual_seed(1)
    head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh())
    z1, z2 = training_views(bert, tok, sentences, head=head)
    loss = InfoNCE(0.05)(z1, z2)
    assert torch.isfinite(loss)
    loss.backward()
    for param in (
        bert.embeddings.word_embeddings.weight,
        bert.encoder.layer[0].attention.self.query.weight,
        bert.encoder.layer[-1].output.dense.weight,
        head[0].weight,
    ):
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0


def test_the_encoder_records_the_registry_name() -> None:
    """The name each saved folder records is the package's SPEC name (read as the registry reads it)."""
    from focalcse.core.frameworks import framework_spec
    from focalcse.core.frameworks.promptbert.encoder import FRAMEWORK_NAME

    assert FRAMEWORK_NAME == framework_spec("promptbert").name == "promptbert"
