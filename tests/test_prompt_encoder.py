"""PromptEncoder (focalcse.core.frameworks.promptbert): PromptBERT on the one encode path.

A tiny random BERT (hidden 32, 2 layers, the MiniLM tokenizer). Expected vectors come three ways: the
module's own building blocks (``eval_vectors`` / ``training_views`` from text), and a small
re-implementation written out here with the tokenizer and the HF model only (fill the template string,
tokenize, pick the mask, subtract the template-only run with hand-built position ids).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from focalcse.core.encode import encode, encode_token_ids, tokenize_unique
from focalcse.core.frameworks.promptbert import (
    BERT_EVAL_TEMPLATE,
    BERT_TRAIN_TEMPLATES,
    ROBERTA_TRAIN_TEMPLATES,
    PromptBERTStep,
    PromptEncoder,
    official_templates,
    training_setup,
    training_views,
)
from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig
from focalcse.core.losses.infonce import InfoNCE
from focalcse.core.model import RECORD_FILE, EncoderRecord, SentenceEncoder, read_record, record_json
from focalcse.eval.sts_eval import evaluate_sts, stsb_dev_evaluator

# "is it raining?" and 'he said "no"' get no period (evaluation.py 201); one sentence repeats
SENTENCES = [
    "a man is playing a guitar",
    "is it raining?",
    'he said "no"',
    "two dogs run",
    "the cat sat on the big red table near the park",
    "a man is playing a guitar",
]
PREFIX = 'This sentence of "'  # BERT_EVAL_TEMPLATE around the sentence, written out
SUFFIX = '" means[MASK].'
TEMPLATE_ONLY = 'This sentence of "" means[MASK].'


@pytest.fixture
def tok(minilm_tokenizer):
    return minilm_tokenizer


def make_encoder(bert, tok, pooler="cls", mlp_only_train=True, denoise=True, eval_denoise=True, seed=5):
    torch.manual_seed(seed)
    enc = PromptEncoder(
        bert, tok, pooler, mlp_only_train, 32, "tiny", denoise=denoise, eval_denoise=eval_denoise
    )
    return enc.eval()  # a new module is in train mode, and encode() restores the mode it found


def with_period(s: str) -> str:
    return s if s[-1] in ".?\"'" else s + "."


def hand_vector(model, tok, sentence: str, denoise: bool) -> torch.Tensor:
    """The official evaluation, written out: fill the string, tokenize it whole, the hidden state at
    the (template's) mask; minus the template alone with the suffix's positions shifted by the
    sentence's length."""
    filled = tok(PREFIX + with_period(sentence) + SUFFIX)["input_ids"]
    mask_at = len(filled) - 1 - filled[::-1].index(tok.mask_token_id)  # the template's mask is the last
    with torch.no_grad():
        vec = model(input_ids=torch.tensor([filled])).last_hidden_state[0, mask_at]
        if not denoise:
            return vec
        template = tok(TEMPLATE_ONLY)["input_ids"]
        prefix_len = len(tok(PREFIX)["input_ids"]) - 1  # [CLS] + prefix tokens
        n = len(tok(with_period(sentence), add_special_tokens=False)["input_ids"])
        positions = list(range(prefix_len)) + [p + n for p in range(prefix_len, len(template))]
        t_hidden = model(input_ids=torch.tensor([template]), position_ids=torch.tensor([positions]))
        return vec - t_hidden.last_hidden_state[0, template.index(tok.mask_token_id)]


# ---------------------------------------------------------------- templates
def test_official_templates_follow_the_backbone_family(tiny_bert):
    assert official_templates(tiny_bert.config) == BERT_TRAIN_TEMPLATES
    assert official_templates("bert") == official_templates("distilbert") == BERT_TRAIN_TEMPLATES
    assert official_templates("roberta") == official_templates("xlm-roberta") == ROBERTA_TRAIN_TEMPLATES
    assert official_templates("roberta", "bert") == BERT_TRAIN_TEMPLATES
    assert official_templates(tiny_bert.config, "roberta") == ROBERTA_TRAIN_TEMPLATES
    with pytest.raises(ValueError, match="auto, bert, roberta"):
        official_templates("bert", "gpt")


def test_constructor_options_and_refusals(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok)
    assert enc.templates == BERT_TRAIN_TEMPLATES and enc.templates[0] == BERT_EVAL_TEMPLATE
    assert enc.eval_pooler == "cls_before_pooler" and enc.mlp is not None
    head, tail = enc.template_ids[0]
    assert tok.convert_ids_to_tokens(head) == ["[CLS]", "this", "sentence", "of", '"']
    assert tok.convert_ids_to_tokens(tail) == ['"', "means", "[MASK]", ".", "[SEP]"]
    assert (
        PromptEncoder(tiny_bert, tok, templates=ROBERTA_TRAIN_TEMPLATES).templates == ROBERTA_TRAIN_TEMPLATES
    )
    with pytest.raises(ValueError, match="not an average"):
        PromptEncoder(tiny_bert, tok, pooler="avg")
    with pytest.raises(ValueError, match="two templates"):
        PromptEncoder(tiny_bert, tok, templates=(BERT_EVAL_TEMPLATE,))


# ---------------------------------------------------------------- evaluation through encode()
def test_sentence_ids_are_the_filled_eval_template(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok)
    rows = enc.sentence_ids(SENTENCES)
    for row, s in zip(rows, SENTENCES, strict=True):
        assert row == tok(PREFIX + with_period(s) + SUFFIX)["input_ids"]  # WordPiece: same as whole-string
    assert tokenize_unique(enc, SENTENCES) == rows  # the shared path asks the encoder
    # a row longer than the limit loses sentence tokens, never template tokens
    long = " ".join(["guitar"] * 300)
    (row,) = enc.sentence_ids([long])
    assert len(row) == 128 == tiny_bert.config.max_position_embeddings  # eval_max_length of the tiny model
    assert row[:5] == head_ids(enc) and row[-5:] == tail_ids(enc) and row[5:-5] == [row[5]] * 118
    (row,) = enc.sentence_ids([long], max_length=14)
    assert row == head_ids(enc) + [row[5]] * 4 + tail_ids(enc)
    with pytest.raises(ValueError, match="shorter than the PromptBERT template"):
        enc.sentence_ids(["two dogs"], max_length=9)


def head_ids(enc):
    return enc.template_ids[0][0]


def tail_ids(enc):
    return enc.template_ids[0][1]


@pytest.mark.parametrize("eval_denoise", [True, False])
def test_encode_equals_eval_vectors_and_a_hand_computation(tiny_bert, tok, eval_denoise):
    from focalcse.core.frameworks.promptbert import eval_vectors

    enc = make_encoder(tiny_bert, tok, eval_denoise=eval_denoise)
    enc.train()  # encode switches to eval mode (no dropout, no MLP) and back
    got = encode(enc, SENTENCES, batch_size=4)  # sorted by length, padded per batch
    assert enc.training and tiny_bert.training
    enc.eval()  # the backbone too, for the references below
    expected = eval_vectors(tiny_bert, tok, SENTENCES, BERT_EVAL_TEMPLATE, denoise=eval_denoise)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    hand = torch.stack([hand_vector(tiny_bert, tok, s, eval_denoise) for s in SENTENCES])
    torch.testing.assert_close(got, hand, atol=1e-5, rtol=1e-5)
    assert torch.equal(got[0], got[-1])  # a repeated sentence is encoded once
    other = encode(make_encoder(tiny_bert, tok, eval_denoise=not eval_denoise), SENTENCES)
    assert not torch.allclose(got, other, atol=1e-3)  # denoising matters


def hand_selection_vector(model, tok, sentence: str, denoise: bool) -> torch.Tensor:
    """The official dev selection (CLTrainer.evaluate -> sentemb_forward), written out: the sentence
    tokenized alone with *no* period, put between the template's head and tail ids, the mask's hidden
    state, minus the template-only vector when the run trains with --mask_embedding_sentence_delta."""
    head = tok(PREFIX)["input_ids"][:-1]  # [CLS] + prefix
    tail = tok(SUFFIX, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]
    sent = tok(sentence, add_special_tokens=False)["input_ids"]
    row = head + sent + tail
    with torch.no_grad():
        vec = model(input_ids=torch.tensor([row])).last_hidden_state[0, row.index(tok.mask_token_id)]
        if not denoise:
            return vec
        template = head + tail
        positions = list(range(len(head))) + [len(head) + len(sent) + i for i in range(len(tail))]
        t_hidden = model(input_ids=torch.tensor([template]), position_ids=torch.tensor([positions]))
        return vec - t_hidden.last_hidden_state[0, template.index(tok.mask_token_id)]


@pytest.mark.parametrize("denoise", [True, False])
def test_dev_selection_is_denoised_without_period_and_test_scoring_is_not(tiny_bert, tok, denoise):
    """Official protocol: the dev checkpoint is selected with the training run's denoising and no added
    period; the test sets are scored by evaluation.py (a period added, no denoising by default)."""
    enc = make_encoder(tiny_bert, tok, denoise=denoise, eval_denoise=False)
    with enc.selection_mode():
        selected = encode(enc, SENTENCES, batch_size=4)
    scored = encode(enc, SENTENCES, batch_size=4)  # outside the context again
    tiny_bert.eval()
    hand_sel = torch.stack([hand_selection_vector(tiny_bert, tok, s, denoise) for s in SENTENCES])
    hand_test = torch.stack([hand_vector(tiny_bert, tok, s, False) for s in SENTENCES])
    torch.testing.assert_close(selected, hand_sel, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scored, hand_test, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(selected, scored, atol=1e-3)


def test_the_dev_evaluator_tokenizes_per_mode(tiny_bert, tok, tiny_sts_dir, tmp_path):
    """The dev evaluator's cached token ids follow the encoder's mode: inside selection_mode and outside
    it, the same evaluator gives each mode's own score (no stale cache)."""
    from focalcse.data.sts import read_stsb, write_prepared

    write_prepared(
        [("STSBenchmark-dev", read_stsb(tiny_sts_dir, "dev", check_counts=False))], tmp_path / "prep", "tiny"
    )
    evaluate = stsb_dev_evaluator(str(tmp_path / "prep"))
    enc = make_encoder(tiny_bert, tok, denoise=True, eval_denoise=False)
    with enc.selection_mode():
        first = evaluate(enc)
    plain = evaluate(enc)
    with enc.selection_mode():
        again = evaluate(enc)
    assert first == again and plain != first
    assert plain == stsb_dev_evaluator(str(tmp_path / "prep"))(enc)


def test_denoising_switch_gives_the_plain_mask_vector(tiny_bert, tok):
    """eval_denoise False: the mask token's last hidden state itself (no template subtraction)."""
    enc = make_encoder(tiny_bert, tok, eval_denoise=False)
    batch = enc.tokenize(SENTENCES[:3])
    with torch.no_grad():
        hidden = tiny_bert(**batch).last_hidden_state
        vecs = enc.eval()(**batch)
    mask = batch["input_ids"] == tok.mask_token_id
    torch.testing.assert_close(vecs, hidden[mask], atol=0, rtol=0)


def test_a_mask_token_inside_the_sentence_does_not_move_the_vector(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok)
    sentence = "the [MASK] is red"
    (row,) = enc.sentence_ids([sentence])
    assert row.count(tok.mask_token_id) == 2  # the sentence's own and the template's
    torch.testing.assert_close(
        encode(enc, [sentence])[0], hand_vector(tiny_bert, tok, sentence, True), atol=1e-5, rtol=1e-5
    )


def test_forward_refuses_rows_without_the_template(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok)
    plain = tok(["a man is playing a guitar", "two dogs run"])["input_ids"]  # SimCSE's rows
    with pytest.raises(ValueError, match="not right-padded templated rows"):
        encode_token_ids(enc, plain)
    with pytest.raises(TypeError, match="input_ids and attention_mask only"):
        batch = enc.tokenize(["two dogs"])
        enc(**batch, token_type_ids=torch.zeros_like(batch["input_ids"]))


def test_mlp_at_evaluation_without_mlp_only_train(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok, mlp_only_train=False).eval()
    assert enc.eval_pooler == "cls"
    plain = make_encoder(tiny_bert, tok, pooler="cls_before_pooler")
    assert plain.mlp is None
    with torch.no_grad():
        torch.testing.assert_close(encode(enc, SENTENCES), enc.mlp(encode(plain, SENTENCES)))


# ---------------------------------------------------------------- save and re-load
@pytest.mark.parametrize(
    ("pooler", "mlp_only_train", "eval_denoise"),
    [("cls", True, False), ("cls", True, True), ("cls", False, True), ("cls_before_pooler", False, False)],
)
def test_save_reload_scores_identically(
    tiny_bert, tok, tmp_path, tiny_sts_dir, pooler, mlp_only_train, eval_denoise
):
    enc = make_encoder(tiny_bert, tok, pooler, mlp_only_train, denoise=True, eval_denoise=eval_denoise)
    path = enc.save(tmp_path / "model", extra={"best_step": 3})
    record = read_record(path)
    assert record.framework == {
        "name": "promptbert",
        "templates": [t.text for t in BERT_TRAIN_TEMPLATES],
        "eval_template": BERT_EVAL_TEMPLATE.text,
        "denoise": True,
        "eval_denoise": eval_denoise,
        "add_period": True,
    }
    assert record.eval_pooler == enc.eval_pooler and record.extra == {"best_step": 3}

    loaded = SentenceEncoder.from_pretrained(path)
    assert type(loaded) is PromptEncoder
    assert loaded.templates == enc.templates
    assert (loaded.denoise, loaded.eval_denoise, loaded.eval_pooler) == (True, eval_denoise, enc.eval_pooler)
    assert torch.equal(encode(loaded, SENTENCES), encode(enc, SENTENCES))
    kwargs = {"tasks": ("STS12", "STSBenchmark", "SICKRelatedness"), "check_counts": False, "progress": False}
    assert evaluate_sts(loaded, str(tiny_sts_dir), **kwargs) == evaluate_sts(enc, str(tiny_sts_dir), **kwargs)
    from focalcse.data.sts import read_stsb, write_prepared

    write_prepared(
        [("STSBenchmark-dev", read_stsb(tiny_sts_dir, "dev", check_counts=False))], tmp_path / "prep", "tiny"
    )
    dev = stsb_dev_evaluator(str(tmp_path / "prep"))  # the training loop's dev check, on encode_token_ids
    assert dev(loaded) == dev(enc) == dev(SentenceEncoder.from_pretrained(path))
    # the recorded options can be overridden from code (e.g. to score without denoising)
    other = SentenceEncoder.from_pretrained(path, eval_denoise=not eval_denoise)
    assert type(other) is PromptEncoder and other.eval_denoise is not eval_denoise


def test_saved_folder_loads_its_backbone_with_automodel(tiny_bert, tok, tmp_path):
    from transformers import AutoModel

    path = make_encoder(tiny_bert, tok).save(tmp_path / "model")
    model = AutoModel.from_pretrained(path).eval()
    batch = make_encoder(tiny_bert, tok).tokenize(SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).last_hidden_state, tiny_bert(**batch).last_hidden_state)
    assert not (path / "1_Pooling").exists() and not (path / "sentence_bert_config.json").exists()


def test_sentence_transformers_refuses_a_promptbert_folder(tiny_bert, tok, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    path = make_encoder(tiny_bert, tok).save(tmp_path / "model")
    modules = json.loads((path / "modules.json").read_text())
    assert modules == [
        {
            "idx": 0,
            "name": "0",
            "path": "",
            "type": "focalcse.core.frameworks.promptbert.NotSentenceTransformers",
        }
    ]
    # sentence-transformers >= 6 will not import a module class outside its namespace by default ...
    with pytest.raises(ValueError, match="NotSentenceTransformers"):
        st.SentenceTransformer(str(path), device="cpu")
    # ... and with trust_remote_code the class refuses, saying what the model is and how to load it
    with pytest.raises(ValueError) as exc:
        st.SentenceTransformer(str(path), device="cpu", trust_remote_code=True)
    msg = str(exc.value)
    assert "PromptBERT model saved by focalcse" in msg and str(path) in msg
    assert "cannot express" in msg and "denois" in msg
    assert (
        f"SentenceEncoder.from_pretrained({str(path)!r})" in msg
        and f"focalcse evaluate --model {path}" in msg
    )


def test_unknown_or_bad_framework_records_are_refused(tiny_bert, tok, tmp_path):
    path = make_encoder(tiny_bert, tok).save(tmp_path / "model")
    data = json.loads((path / RECORD_FILE).read_text())
    for change, match in (
        ({"name": "diffcse"}, "unknown framework 'diffcse'"),
        ({"templates": ["*cls*_*sent_0*_means*mask*.*sep+*"]}, "two template strings"),
        ({"eval_template": BERT_TRAIN_TEMPLATES[1].text}, "not the first template"),
        ({"add_period": False}, "add_period"),
        ({"eval_denoise": "yes"}, "'eval_denoise' must be true or false"),
    ):
        (path / RECORD_FILE).write_text(json.dumps({**data, "framework": {**data["framework"], **change}}))
        with pytest.raises(ValueError, match=match):
            SentenceEncoder.from_pretrained(path)


# ---------------------------------------------------------------- SimCSE's record is unchanged
def test_simcse_record_bytes_are_unchanged(tiny_encoder_factory, tmp_path):
    enc = tiny_encoder_factory("cls", mlp_only_train=True)
    path = enc.save(tmp_path / "simcse", extra={"best_step": 7, "loss": "infonce"})
    # exactly what save() wrote before the framework field existed
    before = {
        "eval_pooler": "cls_before_pooler",
        "train_pooler": "cls",
        "mlp_only_train": True,
        "max_seq_len": 32,
        "backbone": enc.source,
        "extra": {"best_step": 7, "loss": "infonce"},
    }
    assert (path / RECORD_FILE).read_bytes() == (json.dumps(before, indent=2) + "\n").encode()
    assert "framework" not in (path / RECORD_FILE).read_text()
    record = read_record(path)
    assert record.framework is None and type(SentenceEncoder.from_pretrained(path)) is SentenceEncoder
    modules = json.loads((path / "modules.json").read_text())
    assert [m["type"] for m in modules] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
    ]
    # record_json keeps a framework entry, and read_record reads it back
    with_framework = EncoderRecord(**{**asdict(record), "framework": {"name": "promptbert"}})
    assert json.loads(record_json(with_framework))["framework"] == {"name": "promptbert"}


# ---------------------------------------------------------------- training
def corpus_rows(tok, sentences, max_seq_len):
    """As the corpus is tokenised for PromptBERT: special tokens on, room for max_seq_len sentence tokens."""
    return tok(sentences, truncation=True, max_length=max_seq_len + 2)["input_ids"]


TRAIN_SENTENCES = [
    "a man is playing a guitar",
    "two dogs run",
    "the cat sat on the big red table near the park with three small blue bikes",
    "a woman is riding a horse",
]


@pytest.mark.parametrize(("pooler", "denoise"), [("cls", True), ("cls", False), ("cls_before_pooler", True)])
def test_token_level_training_views_equal_the_text_level_ones(tiny_bert, tok, pooler, denoise):
    enc = make_encoder(tiny_bert, tok, pooler, denoise=denoise)
    enc.max_seq_len = 8  # the long sentence is cut to 8 tokens, the template kept whole
    rows = corpus_rows(tok, TRAIN_SENTENCES, enc.max_seq_len)
    head = enc.mlp if pooler == "cls" else None

    def text_level():
        return training_views(
            tiny_bert, tok, TRAIN_SENTENCES, BERT_TRAIN_TEMPLATES, 8, denoise=denoise, head=head
        )

    enc.eval()  # dropout off
    with torch.no_grad():
        z1, z2 = enc.training_views(rows)
        r1, r2 = text_level()
    assert torch.equal(z1, r1) and torch.equal(z2, r2)
    assert z1.shape == (4, 32) and not torch.allclose(z1, z2, atol=1e-3)
    enc.train()  # dropout on: the same RNG gives the same draws
    torch.manual_seed(11)
    z1, z2 = enc.training_views(rows)
    torch.manual_seed(11)
    r1, r2 = text_level()
    assert torch.equal(z1, r1) and torch.equal(z2, r2)
    loss = InfoNCE(0.05)(z1, z2)
    loss.backward()
    assert tiny_bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    if head is not None:
        assert head[0].weight.grad.abs().sum() > 0


def test_training_views_refuse_rows_without_special_tokens(tiny_bert, tok):
    enc = make_encoder(tiny_bert, tok)
    with pytest.raises(ValueError, match="special tokens"):
        enc.training_views(tok(["two dogs run"], add_special_tokens=False)["input_ids"])


def test_from_pretrained_backbone_seeds_the_mlp_like_sentence_encoder(tiny_backbone):
    settings = PromptBERTConfig(templates="auto", denoise=True, eval_denoise=False)
    enc = PromptEncoder.from_pretrained_backbone(
        tiny_backbone, settings, pooler="cls", mlp_only_train=True, max_seq_len=32, seed=3
    )
    after_prompt = torch.random.get_rng_state()
    plain = SentenceEncoder.from_pretrained(
        tiny_backbone, pooler="cls", mlp_only_train=True, max_seq_len=32, mlp_init="fresh", seed=3
    )
    assert torch.equal(torch.random.get_rng_state(), after_prompt)  # the same RNG draws
    assert type(enc) is PromptEncoder and type(plain) is SentenceEncoder
    assert torch.equal(enc.mlp[0].weight, plain.mlp[0].weight)
    assert (enc.denoise, enc.eval_denoise, enc.templates) == (True, False, BERT_TRAIN_TEMPLATES)
    assert enc.source == str(tiny_backbone)


def test_training_setup_and_step(tiny_backbone, tok):
    cfg = SimpleNamespace(pooler="cls", mlp_only_train=True, max_seq_len=16, seed=2)
    encoder, step, corpus_len = training_setup(str(tiny_backbone), cfg, PromptBERTConfig(), None)
    assert isinstance(encoder, PromptEncoder) and isinstance(step, PromptBERTStep) and corpus_len == 18
    assert step.name == "promptbert" and step.settings == encoder.framework_record()
    step.attach(encoder)
    with pytest.raises(ValueError, match="PromptEncoder"):
        step.attach(SentenceEncoder(encoder.backbone, tok, "cls"))
    encoder.train()
    rows = corpus_rows(tok, TRAIN_SENTENCES, cfg.max_seq_len)
    torch.manual_seed(4)
    loss, parts = step.loss(encoder, InfoNCE(0.05), rows, torch.device("cpu"))
    torch.manual_seed(4)
    z1, z2 = encoder.training_views(rows)
    assert parts == {} and torch.equal(loss, InfoNCE(0.05)(z1, z2))
    loss.backward()
    assert encoder.backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_saved_model_of_a_training_setup_round_trips(tiny_backbone, tmp_path: Path):
    cfg = SimpleNamespace(pooler="cls", mlp_only_train=True, max_seq_len=32, seed=1)
    encoder, _, _ = training_setup(str(tiny_backbone), cfg, PromptBERTConfig(eval_denoise=False))
    path = encoder.save(tmp_path / "best")
    loaded = SentenceEncoder.from_pretrained(path)
    assert type(loaded) is PromptEncoder and loaded.eval_denoise is False
    assert torch.equal(encode(loaded, SENTENCES), encode(encoder, SENTENCES))
