"""PromptBERT's encoder: :class:`PromptEncoder` puts the template vectors
(:mod:`focalcse.core.frameworks.promptbert.templates`) on the project's one encode path, and a saved
folder refuses sentence-transformers (:class:`NotSentenceTransformers`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from focalcse.core.encode import pad_batch
from focalcse.core.frameworks.settings.promptbert import PROMPTBERT_TEMPLATES
from focalcse.core.model import SentenceEncoder, eval_max_length

if TYPE_CHECKING:
    from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig
from focalcse.core.frameworks.promptbert.templates import (
    BERT_TRAIN_TEMPLATES,
    ROBERTA_TRAIN_TEMPLATES,
    Template,
    _pad_id,
    _sentence_ids,
    _template_vectors,
    _views,
    _with_period,
    prompt_vectors,
    template_token_ids,
)

ROBERTA_FAMILY = ("roberta", "xlm-roberta")  # model types that get the official RoBERTa templates
# = the package's SPEC["name"] (tests/test_promptbert.py), recorded in each saved folder
FRAMEWORK_NAME = "promptbert"


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
