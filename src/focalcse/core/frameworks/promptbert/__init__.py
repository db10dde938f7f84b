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

One package, a module per job: :mod:`.templates` (the building blocks above), :mod:`.encoder`
(:class:`PromptEncoder`, the sentence-transformers refusal) and :mod:`.step` (the training step). A
framework item's DVC deps name its package folder (``src/focalcse/core/frameworks/${item.framework}``),
so PromptBERT's code changes rerun only PromptBERT items. The names below are re-exported here, where
saved folders and callers find them (a folder's ``modules.json`` names
``focalcse.core.frameworks.promptbert.NotSentenceTransformers``).
"""

from __future__ import annotations

from focalcse.core.frameworks.promptbert.encoder import (
    FRAMEWORK_NAME,
    ROBERTA_FAMILY,
    ST_REFUSAL_TYPE,
    NotSentenceTransformers,
    PromptEncoder,
    official_templates,
    sentence_transformers_refusal,
)
from focalcse.core.frameworks.promptbert.step import PromptBERTStep, training_setup
from focalcse.core.frameworks.promptbert.templates import (
    BERT_EVAL_TEMPLATE,
    BERT_TRAIN_TEMPLATES,
    CLS_SLOT,
    EVAL_PERIOD_EXEMPT,
    MASK_SLOT,
    ROBERTA_EVAL_TEMPLATE,
    ROBERTA_TRAIN_TEMPLATES,
    SENTENCE_SLOT,
    SEP_SLOT,
    PromptBatch,
    Template,
    build_inputs,
    denoised_vectors,
    eval_vectors,
    prompt_vectors,
    template_only_inputs,
    template_token_ids,
    template_vectors,
    training_views,
)

SPEC = {
    "name": "promptbert",
    "label": "PromptBERT",
    "settings": "focalcse.core.frameworks.settings.promptbert:PromptBERTConfig",
    "needs": [],
    "refuses": ["ddp", "gradcache"],
    "encoder": True,  # its folders load as PromptEncoder (ENCODER): the template's mask vector
}

ENCODER = PromptEncoder  # what focalcse.core.model loads a folder recording framework "promptbert" with

__all__ = [
    "BERT_EVAL_TEMPLATE",
    "BERT_TRAIN_TEMPLATES",
    "CLS_SLOT",
    "ENCODER",
    "EVAL_PERIOD_EXEMPT",
    "FRAMEWORK_NAME",
    "MASK_SLOT",
    "NotSentenceTransformers",
    "PromptBERTStep",
    "PromptBatch",
    "PromptEncoder",
    "ROBERTA_EVAL_TEMPLATE",
    "ROBERTA_FAMILY",
    "ROBERTA_TRAIN_TEMPLATES",
    "SENTENCE_SLOT",
    "SEP_SLOT",
    "SPEC",
    "ST_REFUSAL_TYPE",
    "Template",
    "build_inputs",
    "denoised_vectors",
    "eval_vectors",
    "official_templates",
    "prompt_vectors",
    "sentence_transformers_refusal",
    "template_only_inputs",
    "template_token_ids",
    "template_vectors",
    "training_setup",
    "training_views",
]
