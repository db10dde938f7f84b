"""PromptBERT's templates and vectors: the template syntax, the filled inputs, the mask-token vector,
template denoising, the two training views and the evaluation vectors (plain torch plus a Hugging
Face tokenizer and model). The sources are cited in :mod:`focalcse.core.frameworks.promptbert`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from focalcse.core.encode import pad_batch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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
