"""PromptBERT (Jiang et al., 2022): a sentence is the last hidden state at a template's ``[MASK]``.

Follows the official code, github.com/kongds/Prompt-BERT (commit 690ba6e), whose files are cited as
``train.py``, ``prompt_bert/models.py``, ``evaluation.py`` and ``run.sh``:

* **Template syntax** (``train.py`` 617-641, ``evaluation.py`` 195-202): one string without spaces;
  ``*cls*`` and ``*sep+*`` are dropped (the tokenizer adds its own [CLS]/<s> and [SEP]/</s>),
  ``*mask*`` becomes the tokenizer's mask token, ``*sent_0*`` is where the sentence goes and ``_`` is a
  space. See :class:`Template`.
* **Inputs** (``train.py`` 673-693): ``bs + s + es`` at the token level, where ``bs`` is the tokenized
  prefix without its [SEP], ``es`` the tokenized suffix without its [CLS] and ``s`` the sentence's
  tokens (no special tokens) cut to ``max_seq_length``; the template is never cut. See
  :func:`build_inputs`.
* **Representation** (``models.py`` 158-160, "mask_embedding_sentence"): the last layer's hidden
  state at the mask token. See :func:`prompt_vectors`.
* **Template denoising** (``models.py`` 78-107 and 165-177, ``evaluation.py`` 47-69 and 296-302):
  subtract the mask vector of the template alone, with position ids that give every template token
  after the sentence the position it has in the filled input. See :func:`template_only_inputs` and
  :func:`denoised_vectors`.
* **Unsupervised training** (``run.sh`` 91-107, case ``unsup-bert``; 74-89, ``unsup-roberta``): the
  two views of a sentence use two *different* templates (``--mask_embedding_sentence_different_template``)
  with dropout on, both denoised with gradient through the template vectors, then SimCSE's MLP
  (``--mlp_only_train``: in training only) and the InfoNCE loss at temperature 0.05. See
  :func:`training_views`.
* **Evaluation** (``run.sh`` eval flags ``eargs``, ``eval_only.sh``): the first template; the
  unsupervised models are scored *without* denoising and without the MLP, the supervised ones with
  denoising. See :func:`eval_vectors`.

The building blocks above are plain torch plus a Hugging Face tokenizer and model (``AutoModel``:
BERT, RoBERTa, ...). :class:`PromptEncoder` puts them on the project's one encode path: a
:class:`~focalcse.core.model.SentenceEncoder` whose :meth:`~PromptEncoder.sentence_ids` builds the
templated evaluation rows and whose ``forward`` reads the mask vector (denoised with ``eval_denoise``),
with :meth:`~PromptEncoder.training_views` for training. A saved PromptBERT folder records its templates
and denoising in ``focalcse.json`` (``framework``), so ``SentenceEncoder.from_pretrained`` rebuilds it;
its ``modules.json`` refuses sentence-transformers (:class:`NotSentenceTransformers`), which cannot
express the denoised mask vector. :func:`training_setup` and :class:`PromptBERTStep` plug it into the
training loop (:mod:`focalcse.core.frameworks`).

One module of ~900 lines on purpose: a framework item's DVC deps name its framework as one file
(``src/focalcse/core/frameworks/${item.framework}.py``), so PromptBERT's code changes retrain only
PromptBERT items; split across modules, the others would have to depend on its parts.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from focalcse.core.encode import pad_batch
from focalcse.core.frameworks.settings.promptbert import PROMPTBERT_TEMPLATES
from focalcse.core.model import SentenceEncoder, eval_max_length

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig

SPEC = {
    "name": "promptbert",
    "label": "PromptBERT",
    "settings": "focalcse.core.frameworks.settings.promptbert:PromptBERTConfig",
    "needs": [],
    "refuses": ["ddp", "gradcache"],
    "encoder": True,  # its folders load as PromptEncoder (ENCODER): the template's mask vector
}

MASK_SLOT = "*mask*"
SENTENCE_SLOT = "*sent_0*"
CLS_SLOT = "*cls*"
SEP_SLOT = "*sep+*"
# evaluation.py 201: a sentence not ending in one of these gets a '.' before it is put in the template
EVAL_PERIOD_EXEMPT = ".?\"'"


@dataclass(frozen=True)
class Template:
    """A PromptBERT template parsed from the official syntax, e.g. ``*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*``.

    Parsing is ``train.py`` 618-629: no spaces allowed (asserted there), ``*sep+*`` and ``*cls*``
    removed, split at ``*sent_0*``, ``_`` -> space. The mask slot is kept as ``*mask*`` so a template
    does not depend on a tokenizer (``[MASK]`` for BERT, ``<mask>`` for RoBERTa); it is replaced at
    tokenization.

    Attributes:
        text: the template string as given.
        prefix: the text before the sentence (official ``mask_embedding_sentence_bs``, unstripped;
            e.g. ``' This sentence of "'``).
        suffix: the text after the sentence (official ``mask_embedding_sentence_es``; e.g.
            ``'" means*mask*.'``).
    """

    text: str
    prefix: str
    suffix: str

    @classmethod
    def parse(cls, text: str) -> Template:
        """Parse the official syntax; raises ``ValueError`` on a space, or not exactly one ``*sent_0*``
        and one ``*mask*`` (the official code takes every mask token's vector, so it needs one per
        sentence for one vector per sentence)."""
        if " " in text:
            raise ValueError(f"a template has no spaces ('_' is a space), got {text!r}")
        if text.count(SENTENCE_SLOT) != 1:
            raise ValueError(f"a template needs exactly one {SENTENCE_SLOT}, got {text!r}")
        if text.count(MASK_SLOT) != 1:
            raise ValueError(f"a template needs exactly one {MASK_SLOT}, got {text!r}")
        body = text.replace(SEP_SLOT, "").replace(CLS_SLOT, "")
        prefix, suffix = body.split(SENTENCE_SLOT)
        return cls(text=text, prefix=prefix.replace("_", " "), suffix=suffix.replace("_", " "))


# The official templates, verbatim from run.sh (commit 690ba6e) with the shell quoting removed.
# unsup-bert, run.sh 98-99 (TEMPLATE, TEMPLATE2); evaluated with TEMPLATE (run.sh 107, eval_only.sh 27).
BERT_TRAIN_TEMPLATES: tuple[Template, Template] = (
    Template.parse('*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'),
    Template.parse('*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'),
)
BERT_EVAL_TEMPLATE: Template = BERT_TRAIN_TEMPLATES[0]
# unsup-roberta, run.sh 80-81 (TEMPLATE, TEMPLATE2); evaluated with TEMPLATE (run.sh 89, eval_only.sh 35).
ROBERTA_TRAIN_TEMPLATES: tuple[Template, Template] = (
    Template.parse("*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"),
    Template.parse("*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"),
)
ROBERTA_EVAL_TEMPLATE: Template = ROBERTA_TRAIN_TEMPLATES[0]
# run.sh 52 (bert-prompt, BERT without fine-tuning) uses BERT_TRAIN_TEMPLATES[1]'s string.


@dataclass(frozen=True)
class PromptBatch:
    """Token ids of a batch of templated sentences (or of template-only rows), right-padded.

    Attributes:
        input_ids: (B, L) long.
        attention_mask: (B, L) long, 1 on real tokens.
        mask_positions: (B,) long, the index of the template's mask token in each row.
        sentence_lengths: (B,) long, the sentence's token count in each row (official ``blen``).
        position_ids: (B, L) long for template-only rows (:func:`template_only_inputs`); None for
            filled inputs, which use the model's default positions as the official code does.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask_positions: torch.Tensor
    sentence_lengths: torch.Tensor
    position_ids: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> PromptBatch:
        return PromptBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mask_positions.to(device),
            self.sentence_lengths.to(device),
            None if self.position_ids is None else self.position_ids.to(device),
        )


def template_token_ids(tokenizer: PreTrainedTokenizerBase, template: Template) -> tuple[list[int], list[int]]:
    """``(head, tail)``: [CLS] + the prefix's tokens, and the suffix's tokens + [SEP].

    As ``train.py`` 674-675: ``head = encode(prefix)[:-1]``, ``tail = encode(suffix)[1:]``. The prefix
    is stripped first, which is what the official code does for RoBERTa (``train.py`` 626-628, "remove
    empty block") and changes nothing for BERT (WordPiece ignores the leading space). Checks
    ``encode(prefix + suffix) == head + tail`` as ``train.py`` 793-794 asserts (the template-only input
    is then exactly the filled input without the sentence) and that the template has one mask token.
    """
    mask = tokenizer.mask_token
    prefix = template.prefix.replace(MASK_SLOT, mask).strip()
    suffix = template.suffix.replace(MASK_SLOT, mask)
    head = list(tokenizer(prefix)["input_ids"][:-1])
    tail = list(tokenizer(suffix)["input_ids"][1:])
    whole = list(tokenizer(prefix + suffix)["input_ids"])
    if whole != head + tail:
        raise ValueError(
            f"template {template.text!r} tokenizes differently whole ({whole}) and in two parts "
            f"({head} + {tail}); train.py asserts they agree"
        )
    if (head + tail).count(tokenizer.mask_token_id) != 1:
        raise ValueError(f"template {template.text!r} must give exactly one mask token, got {head + tail}")
    return head, tail


def _mask_position(head: list[int], tail: list[int], n_sentence: int, mask_id: int) -> int:
    if mask_id in head:
        return head.index(mask_id)
    return len(head) + n_sentence + tail.index(mask_id)


def _fill(
    head: list[int], tail: list[int], sentences: Sequence[Sequence[int]], mask_id: int
) -> tuple[list[list[int]], list[int], list[int]]:
    """``bs + s + es`` rows (train.py 687) of already cut sentence token ids, their mask positions and
    sentence lengths."""
    rows, masks, lengths = [], [], []
    for s in sentences:
        s = list(s)
        rows.append(head + s + tail)
        masks.append(_mask_position(head, tail, len(s), mask_id))
        lengths.append(len(s))
    return rows, masks, lengths


def _with_period(sentences: Sequence[str]) -> list[str]:
    """evaluation.py 200-201: a ``.`` after a sentence not ending in one of ``.?"'``."""
    return [s + "." if len(s) > 0 and s[-1] not in EVAL_PERIOD_EXEMPT else s for s in sentences]


def _sentence_ids(tokenizer: PreTrainedTokenizerBase, sentences: Sequence[str]) -> list[list[int]]:
    """Each sentence's tokens alone, no special tokens (train.py 686)."""
    if not sentences:
        return []
    return [list(ids) for ids in tokenizer(list(sentences), add_special_tokens=False)["input_ids"]]


def _rows(
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    template: Template,
    max_seq_len: int | None,
    count_template: bool,
    add_period: bool,
) -> tuple[list[list[int]], list[int], list[int]]:
    """Unpadded ``bs + s + es`` rows, their mask positions and sentence lengths."""
    head, tail = template_token_ids(tokenizer, template)
    if add_period:
        sentences = _with_period(sentences)
    budget = max_seq_len
    if max_seq_len is not None and count_template:
        budget = max_seq_len - len(head) - len(tail)
        if budget < 0:
            raise ValueError(
                f"max_seq_len {max_seq_len} is shorter than the template ({len(head) + len(tail)} tokens)"
            )
    encoded = _sentence_ids(tokenizer, sentences)
    cut = [ids[:budget] if budget is not None else ids for ids in encoded]  # train.py 686: [:max_seq_length]
    return _fill(head, tail, cut, tokenizer.mask_token_id)


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def _pack(
    tokenizer: PreTrainedTokenizerBase, rows: list[list[int]], masks: list[int], lengths: list[int]
) -> PromptBatch:
    return _pack_ids(_pad_id(tokenizer), rows, masks, lengths)


def _pack_ids(pad_id: int, rows: list[list[int]], masks: list[int], lengths: list[int]) -> PromptBatch:
    input_ids, attention_mask = pad_batch(rows, pad_id)  # right padding, as train.py 695-699
    return PromptBatch(
        input_ids,
        attention_mask,
        torch.tensor(masks, dtype=torch.long),
        torch.tensor(lengths, dtype=torch.long),
    )


def build_inputs(
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    template: Template,
    max_seq_len: int | None = 32,
    *,
    count_template: bool = False,
    add_period: bool = False,
) -> PromptBatch:
    """Templated, right-padded inputs: each row is ``[CLS] prefix sentence suffix [SEP]`` (+ padding).

    As ``train.py`` 673-699: the sentence is tokenized alone (no special tokens) and cut to
    ``max_seq_len`` tokens; the template is always kept whole. The official ``max_seq_length`` (32)
    counts the *sentence's* tokens only, so a row can be ``max_seq_len`` + the template's length long.

    Args:
        tokenizer: a Hugging Face tokenizer with a mask token.
        sentences: the sentences.
        template: where the sentence and the mask go.
        max_seq_len: the sentence's token budget (None: no truncation, as ``evaluation.py``).
        count_template: make ``max_seq_len`` the budget of the whole row instead (the sentence is cut
            to ``max_seq_len`` minus the template's tokens; the template is still kept whole). Not in
            the official code.
        add_period: append ``.`` to a sentence that does not end in one of ``.?"'``, as the official
            evaluation does (``evaluation.py`` 201); training does not.

    Returns:
        A :class:`PromptBatch` (CPU tensors) with each row's mask position and sentence length.
    """
    rows, masks, lengths = _rows(tokenizer, sentences, template, max_seq_len, count_template, add_period)
    return _pack(tokenizer, rows, masks, lengths)


def template_only_inputs(
    tokenizer: PreTrainedTokenizerBase, template: Template, sentence_lengths: torch.Tensor | Sequence[int]
) -> PromptBatch:
    """The template without the sentence, one row per sentence length, for denoising.

    Every row is ``[CLS] prefix suffix [SEP]`` (no padding). Its position ids are ``0, 1, ..., T-1``
    with ``n`` (the row's sentence length) added from the first suffix token on:
    ``models.py`` 96-98 (training) and 292-295 (in-training evaluation) build
    ``d_position_ids = arange(T)`` for rows ``n = 0 .. 49`` (``0 .. 127``) and add ``n`` to
    ``d_position_ids[:, len(bs) + 1:]`` (``bs`` the prefix's tokens without [CLS], so ``len(bs) + 1``
    is the first suffix token); ``evaluation.py`` 54-60 does the same for ``n = 0 .. 255`` with
    ``bs_length = len(encode(prefix.strip())) - 2 + 1``. So each suffix token, the mask among them,
    gets the position id it has in the filled input ``[CLS] prefix s_1..s_n suffix [SEP]`` (default
    positions ``0 .. L-1``), as if the sentence's tokens were still there but unseen. The attention
    mask is all ones and no token type ids are passed, as in the official code.

    The official code takes row ``blen = attention_mask.sum(-1) - template_len`` of that table for a
    sentence of ``blen`` tokens (``models.py`` 169-177); this builds the rows for the given lengths.

    Note (faithful, not fixed): the official position ids start at 0. That matches BERT's default
    positions exactly; RoBERTa's default positions start at ``padding_idx + 1`` (2), so for RoBERTa
    the official template-only mask position id is 2 below the filled input's.

    Args:
        tokenizer: the tokenizer.
        template: the template.
        sentence_lengths: (N,) sentence token counts, one row each.

    Returns:
        A :class:`PromptBatch` (CPU tensors) with ``position_ids`` set.
    """
    head, tail = template_token_ids(tokenizer, template)
    return _template_only_batch(head, tail, tokenizer.mask_token_id, sentence_lengths)


def _template_only_batch(
    head: list[int], tail: list[int], mask_id: int, sentence_lengths: torch.Tensor | Sequence[int]
) -> PromptBatch:
    """:func:`template_only_inputs` from the template's token ids."""
    lengths = torch.as_tensor(sentence_lengths, dtype=torch.long).reshape(-1).cpu()  # (N,)
    ids = torch.tensor(head + tail, dtype=torch.long)  # (T,)
    n, width = lengths.shape[0], ids.shape[0]
    after_sentence = (torch.arange(width) >= len(head)).long()  # (T,) 1 from the first suffix token on
    position_ids = torch.arange(width).unsqueeze(0) + lengths.unsqueeze(1) * after_sentence  # (N, T)
    mask_at = _mask_position(head, tail, 0, mask_id)
    return PromptBatch(
        input_ids=ids.unsqueeze(0).repeat(n, 1),
        attention_mask=torch.ones(n, width, dtype=torch.long),
        mask_positions=torch.full((n,), mask_at, dtype=torch.long),
        sentence_lengths=lengths,
        position_ids=position_ids,
    )


def prompt_vectors(
    backbone: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask_positions: torch.Tensor,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, d) last hidden states at the mask token: the official "mask_embedding_sentence" pooler
    (``models.py`` 158-160: ``last_hidden_state[input_ids == mask_token_id]``; ``evaluation.py`` 62).

    Indexes ``mask_positions`` rather than searching for the mask id, so a sentence that itself
    contains the mask token's text cannot add a row (the official code would).

    Args:
        backbone: a Hugging Face encoder (``AutoModel``), in the mode the caller chose (dropout on
            in training, as officially).
        input_ids: (B, L).
        attention_mask: (B, L).
        mask_positions: (B,) mask index per row.
        position_ids: (B, L) or None for the model's default positions.
    """
    kwargs = {} if position_ids is None else {"position_ids": position_ids}
    out = backbone(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    hidden = out.last_hidden_state  # (B, L, d)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return hidden[rows, mask_positions.to(hidden.device)]  # (B, d)


def template_vectors(
    backbone: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    template: Template,
    sentence_lengths: torch.Tensor,
    *,
    detach: bool = False,
) -> torch.Tensor:
    """(B, d) the template-only mask vector for each sentence length (the official ``delta[blen]``).

    One forward per distinct length, so sentences of one length share one vector (one dropout draw
    in training), as rows of the official table do. ``detach=True`` is the official
    ``--mask_embedding_sentence_delta_freeze`` (``models.py`` 79: ``set_grad_enabled(not freeze)``);
    the default lets the gradient flow, as the official training does.
    """
    head, tail = template_token_ids(tokenizer, template)
    return _template_vectors(backbone, head, tail, tokenizer.mask_token_id, sentence_lengths, detach)


def _template_vectors(
    backbone: nn.Module,
    head: list[int],
    tail: list[int],
    mask_id: int,
    sentence_lengths: torch.Tensor,
    detach: bool = False,
) -> torch.Tensor:
    """:func:`template_vectors` from the template's token ids."""
    device = next(backbone.parameters()).device
    unique, inverse = torch.unique(sentence_lengths.cpu(), return_inverse=True)
    batch = _template_only_batch(head, tail, mask_id, unique).to(device)
    with torch.set_grad_enabled(torch.is_grad_enabled() and not detach):
        delta = prompt_vectors(
            backbone, batch.input_ids, batch.attention_mask, batch.mask_positions, batch.position_ids
        )  # (U, d)
    return delta[inverse.to(device)]


def denoised_vectors(
    backbone: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    batch: PromptBatch,
    template: Template,
    *,
    detach_template: bool = False,
) -> torch.Tensor:
    """(B, d) sentence mask vectors minus template-only mask vectors: the official template denoising.

    ``models.py`` 165-177 (training, ``--mask_embedding_sentence_delta``): ``pooler_output -=
    delta[blen]`` with ``delta`` from the template alone (:func:`template_only_inputs`) computed in the
    same mode as the sentences (dropout on in training) and with the gradient flowing through it
    unless ``--mask_embedding_sentence_delta_freeze``; ``evaluation.py`` 296-302 and ``models.py``
    290-300 / 364-368 (in-training evaluation): the same subtraction under ``no_grad``. Run this under
    ``torch.no_grad()`` / ``inference_mode()`` for evaluation.

    Args:
        backbone: the encoder.
        tokenizer: its tokenizer.
        batch: from :func:`build_inputs` with the same ``template``.
        template: the template of ``batch``.
        detach_template: stop the gradient at the template vector (official ``delta_freeze``).
    """
    device = next(backbone.parameters()).device
    batch = batch.to(device)
    vectors = prompt_vectors(backbone, batch.input_ids, batch.attention_mask, batch.mask_positions)
    return vectors - template_vectors(
        backbone, tokenizer, template, batch.sentence_lengths, detach=detach_template
    )


def training_views(
    backbone: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    templates: tuple[Template, Template] = BERT_TRAIN_TEMPLATES,
    max_seq_len: int | None = 32,
    *,
    denoise: bool = True,
    detach_template: bool = False,
    head: nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z1, z2)``, (N, d) each: two views of every sentence for ``loss(z1, z2)``, unsupervised PromptBERT.

    As the official ``unsup-bert`` / ``unsup-roberta`` runs (``run.sh`` 74-107): view 1 uses
    ``templates[0]`` (``--mask_embedding_sentence_template``), view 2 ``templates[1]``
    (``--mask_embedding_sentence_different_template``; ``train.py`` 684-690); both go through the
    backbone in one forward (``models.py`` 120-126: the (N, 2) views flattened into one batch, right-
    padded to a common length) in whatever mode the caller set (``train()``: dropout on, so views
    differ by template *and* dropout). With ``denoise`` (``--mask_embedding_sentence_delta``, set in
    both runs) each view subtracts its own template's template-only vector (``models.py`` 110-113 and
    166-173: ``delta`` for view 1, ``delta1`` for view 2), with the gradient flowing through it. Then
    ``head`` if given: the official runs apply SimCSE's MLP (Linear + Tanh) here, in training only
    (``--mlp_only_train``; ``models.py`` 186-191), e.g. a :class:`~focalcse.core.model.SentenceEncoder`'s
    ``mlp``.

    Each view's template-only positions use that view's own prefix length; the official code uses
    the first template's for both (``models.py`` 98, ``len(cls.bs)``), which is the same for the
    official pairs (their prefixes have equal token counts).

    Args:
        backbone: the encoder.
        tokenizer: its tokenizer.
        sentences: N sentences.
        templates: the two views' templates (default the official BERT pair; RoBERTa:
            :data:`ROBERTA_TRAIN_TEMPLATES`).
        max_seq_len: the sentence's token budget (official 32, ``run.sh`` 158).
        denoise: subtract template-only vectors (official: yes).
        detach_template: stop the gradient at the template vectors (official default: no).
        head: applied to both views after denoising (official: SimCSE's MLP).
    """
    ids = (template_token_ids(tokenizer, templates[0]), template_token_ids(tokenizer, templates[1]))
    encoded = _sentence_ids(tokenizer, sentences)
    cut = [s[:max_seq_len] if max_seq_len is not None else s for s in encoded]  # train.py 686
    return _views(
        backbone, _pad_id(tokenizer), tokenizer.mask_token_id, ids, cut, denoise, detach_template, head
    )


def _views(
    backbone: nn.Module,
    pad_id: int,
    mask_id: int,
    template_ids: tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]],
    sentences: Sequence[Sequence[int]],
    denoise: bool,
    detach_template: bool,
    head: nn.Module | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`training_views` from the two templates' ``(head, tail)`` ids and the sentences' (cut) ids."""
    device = next(backbone.parameters()).device
    (h1, t1), (h2, t2) = template_ids
    first = _fill(h1, t1, sentences, mask_id)
    second = _fill(h2, t2, sentences, mask_id)
    n = len(first[0])
    batch = _pack_ids(pad_id, first[0] + second[0], first[1] + second[1], first[2] + second[2]).to(device)
    z = prompt_vectors(backbone, batch.input_ids, batch.attention_mask, batch.mask_positions)  # (2N, d)
    if denoise:
        lengths = batch.sentence_lengths
        z = torch.cat(
            [
                z[:n] - _template_vectors(backbone, h1, t1, mask_id, lengths[:n], detach_template),
                z[n:] - _template_vectors(backbone, h2, t2, mask_id, lengths[n:], detach_template),
            ]
        )
    if head is not None:
        z = head(z)
    return z[:n], z[n:]


def eval_vectors(
    backbone: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    template: Template = BERT_EVAL_TEMPLATE,
    *,
    denoise: bool = False,
    add_period: bool = True,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """(N, d) evaluation vectors under ``torch.no_grad()`` (set ``backbone.eval()`` first).

    As ``evaluation.py``: the sentence (with a ``.`` appended, line 201) in the template, untruncated,
    the mask vector, and with ``denoise`` minus the template-only vector (lines 296-302). The official
    scripts score the *unsupervised* models without denoising (``run.sh`` 106-107 and 88-89 pass no
    ``--mask_embedding_sentence_delta``; ``eval_only.sh`` 22-36) and the supervised ones with it; the
    in-training dev evaluation (``trainers.py`` batcher -> ``models.py`` ``sentemb_forward``) does
    denoise, without the period. No MLP at evaluation (``--mlp_only_train``).

    The official evaluation tokenizes the filled string as a whole; this tokenizes the sentence
    alone, as training does. The two agree for WordPiece (BERT); for RoBERTa's byte-level BPE the
    sentence's first word gets a leading-space token in the official evaluation but not here.
    """
    device = next(backbone.parameters()).device
    batch = build_inputs(tokenizer, sentences, template, max_seq_len, add_period=add_period).to(device)
    with torch.no_grad():
        if denoise:
            return denoised_vectors(backbone, tokenizer, batch, template)
        return prompt_vectors(backbone, batch.input_ids, batch.attention_mask, batch.mask_positions)


# ---------------------------------------------------------------- the encoder
ROBERTA_FAMILY = ("roberta", "xlm-roberta")  # model types that get the official RoBERTa templates
FRAMEWORK_NAME = SPEC["name"]


def official_templates(config_or_model_type: Any, choice: str = "auto") -> tuple[Template, Template]:
    """The official training pair for a backbone: :data:`BERT_TRAIN_TEMPLATES` or
    :data:`ROBERTA_TRAIN_TEMPLATES` (``run.sh`` unsup-bert / unsup-roberta; the first is the evaluation
    template).

    Args:
        config_or_model_type: a ``transformers`` config (its ``model_type``) or a model type string.
        choice: ``auto`` (RoBERTa's pair for model types ``roberta`` / ``xlm-roberta``, else BERT's),
            ``bert`` or ``roberta``.
    """
    if choice not in PROMPTBERT_TEMPLATES:
        raise ValueError(
            f"PromptBERT templates must be one of {', '.join(PROMPTBERT_TEMPLATES)}, got {choice!r}"
        )
    if choice == "auto":
        model_type = (
            config_or_model_type
            if isinstance(config_or_model_type, str)
            else getattr(config_or_model_type, "model_type", "")
        )
        choice = "roberta" if model_type in ROBERTA_FAMILY else "bert"
    return ROBERTA_TRAIN_TEMPLATES if choice == "roberta" else BERT_TRAIN_TEMPLATES


class PromptEncoder(SentenceEncoder):
    """A PromptBERT sentence encoder on the project's one encode path.

    The sentence vector is the last hidden state at the mask token of ``templates[0]`` filled with the
    sentence (minus the template-only vector with ``eval_denoise``): :meth:`sentence_ids` builds the
    templated rows that :func:`focalcse.core.encode.encode` pads and hands to :meth:`forward`, so
    evaluation, the STS-B dev check and a re-loaded folder all score through one path. Training uses
    :meth:`training_views` (the two templates, denoised with ``denoise``, then SimCSE's MLP).

    The pooler only decides the MLP: ``cls`` puts SimCSE's MLP after the (denoised) mask vector in
    training, and at evaluation too unless ``mlp_only_train`` (official unsupervised runs:
    ``--mlp_only_train``, so none at evaluation); ``cls_before_pooler`` never uses one; ``avg`` has no
    meaning here and is refused.

    Args:
        backbone, tokenizer, pooler, mlp_only_train, max_seq_len, source: as
            :class:`~focalcse.core.model.SentenceEncoder`; ``max_seq_len`` is the sentence's token budget
            in training (official 32), the template comes on top.
        templates: the two training templates (the first is also the evaluation template), or
            ``auto`` / ``bert`` / ``roberta`` for the official pair (:func:`official_templates`).
        denoise: template denoising in training and in the dev checkpoint selection
            (:meth:`selection_mode`; official unsupervised runs: yes).
        eval_denoise: template denoising in scoring the test sets (official unsupervised evaluation,
            ``evaluation.py`` without ``--mask_embedding_sentence_delta``: no; the supervised runs: yes).
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: Any,
        pooler: str = "cls",
        mlp_only_train: bool = True,
        max_seq_len: int = 32,
        source: str = "",
        *,
        templates: tuple[Template, Template] | str = "auto",
        denoise: bool = True,
        eval_denoise: bool = False,
    ) -> None:
        if pooler == "avg":
            raise ValueError(
                "PromptBERT's sentence vector is the template's mask token, not an average: use pooler 'cls' "
                "(SimCSE's MLP in training; with mlp_only_train not at evaluation) or 'cls_before_pooler' (no MLP)"
            )
        super().__init__(backbone, tokenizer, pooler, mlp_only_train, max_seq_len, source)
        if isinstance(templates, str):
            templates = official_templates(backbone.config, templates)
        if len(templates) != 2 or not all(isinstance(t, Template) for t in templates):
            raise ValueError(f"PromptBERT needs two templates (Template), got {templates!r}")
        if tokenizer.mask_token_id is None:
            raise ValueError("PromptBERT needs a tokenizer with a mask token")
        self.templates: tuple[Template, Template] = (templates[0], templates[1])
        self.denoise = bool(denoise)
        self.eval_denoise = bool(eval_denoise)
        self._selecting = False  # inside selection_mode(): the official dev-selection encoding
        self.mask_id = int(tokenizer.mask_token_id)
        self.pad_id = _pad_id(tokenizer)
        # (head, tail) token ids of each template: [CLS] + prefix, suffix + [SEP] (train.py 674-675)
        self.template_ids = (
            template_token_ids(tokenizer, self.templates[0]),
            template_token_ids(tokenizer, self.templates[1]),
        )

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_pretrained_backbone(
        cls,
        source: str | os.PathLike,
        settings: PromptBERTConfig | Any,
        *,
        pooler: str = "cls",
        mlp_only_train: bool = True,
        max_seq_len: int = 32,
        seed: int | None = None,
        attn_implementation: str | None = "sdpa",
    ) -> PromptEncoder:
        """A PromptBERT encoder to train: :meth:`SentenceEncoder.from_pretrained` (the same loading and
        the same seeded fresh MLP, ``mlp_init="fresh"``) with ``settings``' templates (``auto`` /
        ``bert`` / ``roberta``) and denoising (``frameworks.promptbert``, :class:`~focalcse.core.frameworks.settings.promptbert.PromptBERTConfig`)."""
        enc = cls.from_pretrained(
            source,
            pooler=pooler,
            mlp_only_train=mlp_only_train,
            max_seq_len=max_seq_len,
            mlp_init="fresh",
            seed=seed,
            attn_implementation=attn_implementation,
            templates=settings.templates,
            denoise=bool(settings.denoise),
            eval_denoise=bool(settings.eval_denoise),
        )
        assert isinstance(enc, PromptEncoder)
        return enc

    def framework_record(self) -> dict[str, Any]:
        """``focalcse.json``'s ``framework`` entry: what :meth:`options_from_record` rebuilds."""
        return {
            "name": FRAMEWORK_NAME,
            "templates": [self.templates[0].text, self.templates[1].text],
            "eval_template": self.templates[0].text,
            "denoise": self.denoise,
            "eval_denoise": self.eval_denoise,
            "add_period": True,
        }

    @staticmethod
    def options_from_record(framework: dict[str, Any]) -> dict[str, Any]:
        """Constructor options (``templates``, ``denoise``, ``eval_denoise``) from a ``framework``
        entry written by :meth:`framework_record`; refuses one this class cannot reproduce."""
        if framework.get("name") != FRAMEWORK_NAME:
            raise ValueError(f"not a PromptBERT record: {framework!r}")
        texts = framework.get("templates")
        if not isinstance(texts, list) or len(texts) != 2 or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"PromptBERT record: 'templates' must be two template strings, got {texts!r}")
        if framework.get("eval_template", texts[0]) != texts[0]:
            raise ValueError(
                f"PromptBERT record: eval_template {framework.get('eval_template')!r} is not the first template "
                f"{texts[0]!r}; this encoder evaluates with the first one"
            )
        if framework.get("add_period", True) is not True:
            raise ValueError("PromptBERT record: only add_period true (the official evaluation) is supported")
        for key in ("denoise", "eval_denoise"):
            if not isinstance(framework.get(key), bool):
                raise ValueError(
                    f"PromptBERT record: {key!r} must be true or false, got {framework.get(key)!r}"
                )
        return {
            "templates": (Template.parse(texts[0]), Template.parse(texts[1])),
            "denoise": framework["denoise"],
            "eval_denoise": framework["eval_denoise"],
        }

    # ---------------------------------------------------------------- evaluation
    @contextlib.contextmanager
    def selection_mode(self) -> Iterator[None]:
        """The official dev selection's encoding, for the training loop's STS-B dev checks.

        ``CLTrainer.evaluate`` (``prompt_bert/trainers.py`` 105-131) tokenizes each dev sentence alone,
        with no added period, and ``sentemb_forward`` (``prompt_bert/models.py`` 290-368) puts it in the
        first template and subtracts the template-only vector whenever the run trains with
        ``--mask_embedding_sentence_delta`` (here ``denoise``). The test sets are scored by
        ``evaluation.py`` instead: a period added, denoised only with ``eval_denoise`` (official
        unsupervised runs: no). Outside this context the encoder scores as ``evaluation.py``.
        """
        before = self._selecting
        self._selecting = True
        try:
            yield
        finally:
            self._selecting = before

    @property
    def ids_variant(self) -> str:
        """Which tokenization :meth:`sentence_ids` does now (a cache key for pre-tokenized dev sets)."""
        return "selection" if self._selecting else "evaluation"

    def sentence_ids(self, sentences: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Evaluation rows, unpadded: ``[CLS] prefix sentence. suffix [SEP]`` of the evaluation template.

        As ``evaluation.py``: a ``.`` after a sentence not ending in one of ``.?"'`` (line 201) and no
        truncation, except that a row longer than ``max_length`` (default the model's position limit,
        :func:`~focalcse.core.model.eval_max_length`) has its *sentence* cut so the template stays
        whole. The sentence is tokenized alone, as in training (see :func:`eval_vectors`). In
        :meth:`selection_mode` no period is added (the official dev selection adds none).
        """
        head, tail = self.template_ids[0]
        if max_length is None:
            max_length = eval_max_length(self)
        budget = int(max_length) - len(head) - len(tail)
        if budget < 0:
            raise ValueError(
                f"max_length {max_length} is shorter than the PromptBERT template ({len(head) + len(tail)} tokens)"
            )
        texts = list(sentences) if self._selecting else _with_period(list(sentences))
        encoded = _sentence_ids(self.tokenizer, texts)
        return [head + s[:budget] + tail for s in encoded]

    def tokenize(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        """Right-padded :meth:`sentence_ids` rows for :meth:`forward` (``input_ids``, ``attention_mask``)."""
        input_ids, attention_mask = pad_batch(self.sentence_ids(sentences), self.pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor
    ) -> torch.Tensor:
        """(B, L) right-padded rows of :meth:`sentence_ids` -> (B, d) sentence vectors.

        Each row's sentence length is its token count (from ``attention_mask``) minus the template's,
        which places the mask (the mask id is not searched for, so a sentence containing the mask
        token's text changes nothing); the vector is the last hidden state there, minus the
        template-only vector for that length (:func:`template_vectors`' position ids) when denoising
        (``eval_denoise`` in eval mode, ``denoise`` in train mode), then SimCSE's MLP when the current
        mode's pooler is ``cls``. Filled rows use the model's default position ids, as officially.
        """
        if extra:
            raise TypeError(
                f"PromptEncoder.forward takes input_ids and attention_mask only, got {sorted(extra)}"
            )
        head, tail = self.template_ids[0]
        lengths = attention_mask.sum(-1) - (len(head) + len(tail))  # (B,) sentence token counts
        if self.mask_id in head:
            positions = torch.full_like(lengths, head.index(self.mask_id))
        else:
            positions = lengths + len(head) + tail.index(self.mask_id)  # (B,)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        at_mask = input_ids[rows, positions.clamp_min(0)] == self.mask_id  # (B,) a cheap check of the rows
        if not (bool((lengths >= 0).all()) and bool(at_mask.all())):
            raise ValueError(
                "PromptEncoder.forward: the rows are not right-padded templated rows of its sentence_ids "
                f"(template {self.templates[0].text!r}); tokenize with encoder.sentence_ids / encode()"
            )
        vectors = prompt_vectors(self.backbone, input_ids, attention_mask, positions)  # (B, d)
        if self.denoise if self.training or self._selecting else self.eval_denoise:
            vectors = vectors - _template_vectors(self.backbone, head, tail, self.mask_id, lengths)
        pooler = self.pooler if self.training else self.eval_pooler
        return self.mlp(vectors) if pooler == "cls" else vectors

    # ---------------------------------------------------------------- training
    def training_views(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z1, z2)``, (N, d) each, for ``loss(z1, z2)``: :func:`training_views` from corpus token ids.

        ``rows``: each sentence's ids *with* the tokenizer's special tokens, as the corpus is tokenized
        (``tokenizer(text, truncation=True, max_length=max_seq_len + 2)``); the first and last id are
        dropped and the sentence cut to ``max_seq_len`` tokens (official ``[:max_seq_length]``). View
        1 is ``templates[0]``, view 2 ``templates[1]``, one forward of both through the backbone in its
        current mode, each denoised with its own template when ``denoise`` (gradient flowing), then
        SimCSE's MLP when the pooler is ``cls``.
        """
        first = self.template_ids[0][0][0]  # [CLS] / <s>
        last = self.template_ids[0][1][-1]  # [SEP] / </s>
        sentences = []
        for r in rows:
            r = list(r)
            if len(r) < 2 or r[0] != first or r[-1] != last:
                raise ValueError(
                    f"PromptEncoder.training_views: a row must be a sentence's token ids with the tokenizer's "
                    f"special tokens ({first} ... {last}), got {r[:8]}{'...' if len(r) > 8 else ''}"
                )
            sentences.append(r[1:-1][: self.max_seq_len])
        head = self.mlp if self.pooler == "cls" else None
        return _views(
            self.backbone, self.pad_id, self.mask_id, self.template_ids, sentences, self.denoise, False, head
        )

    # ---------------------------------------------------------------- saving
    def _write_export_files(self, folder: Path) -> None:
        """No sentence-transformers modules that would load and score differently: a ``modules.json``
        whose one module refuses to load (:class:`NotSentenceTransformers`)."""
        modules = [{"idx": 0, "name": "0", "path": "", "type": ST_REFUSAL_TYPE}]
        (folder / "modules.json").write_text(json.dumps(modules, indent=2))


ST_REFUSAL_TYPE = "focalcse.core.frameworks.promptbert.NotSentenceTransformers"


def sentence_transformers_refusal(path: str | os.PathLike | None = None) -> str:
    """The message of :class:`NotSentenceTransformers`."""
    where = f" {path}" if path else ""
    target = str(path) if path else "PATH"
    return (
        f"The model folder{where} is a PromptBERT model saved by focalcse. Its sentence vector is the last "
        "hidden state at the template's [MASK] token, minus the same template's mask state without the "
        "sentence (template denoising), with the sentence put inside a template; sentence-transformers' "
        "modules (Transformer + Pooling) cannot express that, and loading it as a plain Transformer + "
        "Pooling model would score it differently. Load it with focalcse instead: "
        f"focalcse.core.model.SentenceEncoder.from_pretrained({target!r}) (then focalcse.core.encode.encode), "
        f"or evaluate it with `focalcse evaluate --model {target}`. AutoModel.from_pretrained loads its "
        "backbone (the template and denoising are in focalcse.json)."
    )


class NotSentenceTransformers:
    """The one module in a PromptBERT folder's ``modules.json``: ``SentenceTransformer(path)`` raises a
    ``ValueError`` that says what the model is and how to load it (:func:`sentence_transformers_refusal`).

    sentence-transformers >= 6 refuses a module class outside its namespace unless
    ``trust_remote_code=True`` (its own ValueError naming this class); with it, it imports this class and
    calls :meth:`load`, which raises this message.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(sentence_transformers_refusal())

    @classmethod
    def load(
        cls, model_name_or_path: str | os.PathLike = "", *args: Any, **kwargs: Any
    ) -> NotSentenceTransformers:
        raise ValueError(sentence_transformers_refusal(model_name_or_path or None))


class PromptBERTStep:
    """PromptBERT's training step (:class:`focalcse.core.frameworks.FrameworkStep`): the loss of the
    two template views of :meth:`PromptEncoder.training_views` with the registry's loss."""

    name = FRAMEWORK_NAME

    def __init__(self, encoder: PromptEncoder) -> None:
        self.settings = encoder.framework_record()

    def attach(self, encoder: nn.Module) -> None:
        if not isinstance(encoder, PromptEncoder):
            raise ValueError(f"PromptBERT trains a PromptEncoder, got {type(encoder).__name__}")

    def loss(
        self, encoder: nn.Module, loss_fn: nn.Module, rows: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        z1, z2 = encoder.training_views(rows)  # on the encoder's device
        return loss_fn(z1.float(), z2.float()), {}


def training_setup(
    source: str, cfg: Any, settings: PromptBERTConfig | Any, prepared_dir: str | os.PathLike | None = None
) -> tuple[PromptEncoder, PromptBERTStep, int]:
    """``(encoder, step, corpus_max_len)`` for one PromptBERT item (:func:`focalcse.steps.train.framework_encoder`).

    The encoder is :meth:`PromptEncoder.from_pretrained_backbone` with ``cfg``'s pooler,
    ``mlp_only_train``, ``max_seq_len`` and seed; the corpus is tokenized with ``max_seq_len + 2``
    tokens (the special tokens that :meth:`PromptEncoder.training_views` drops), so every sentence keeps
    the official ``max_seq_len`` budget. ``prepared_dir`` is unused (PromptBERT needs no stage output).
    """
    encoder = PromptEncoder.from_pretrained_backbone(
        source,
        settings,
        pooler=cfg.pooler,
        mlp_only_train=cfg.mlp_only_train,
        max_seq_len=cfg.max_seq_len,
        seed=cfg.seed,
    )
    return encoder, PromptBERTStep(encoder), cfg.max_seq_len + 2


ENCODER = PromptEncoder  # what focalcse.core.model loads a folder recording framework "promptbert" with
