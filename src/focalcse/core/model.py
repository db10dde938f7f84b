"""Sentence encoder: a Hugging Face backbone plus SimCSE's poolers, saved as a portable folder.

Poolers (SimCSE names):
    ``cls``                the [CLS] hidden state through an MLP (Linear + Tanh, hidden -> hidden);
    ``cls_before_pooler``  the [CLS] hidden state as is;
    ``avg``                the mean of the last hidden states over real (non-pad) tokens.

With ``mlp_only_train`` (SimCSE's unsupervised setting) the MLP is used in training and dropped at
evaluation, so the *evaluation* pooler is ``cls_before_pooler``. A saved folder records that pooler in
``focalcse.json`` and in sentence-transformers' module files, so no reader can silently pick another.
For ``cls`` the MLP is written into the backbone's own pooler weights (as SimCSE's release scripts do),
so ``AutoModel(...).pooler_output`` of a saved folder is exactly the trained MLP's output.

A framework's encoder (PromptBERT's :class:`~focalcse.core.frameworks.promptbert.PromptEncoder`, a
subclass) also records how it builds its vectors (``framework`` in ``focalcse.json``), so
:meth:`SentenceEncoder.from_pretrained` rebuilds that class; its ``modules.json`` makes
sentence-transformers refuse the folder rather than score it differently.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer

from focalcse.atomic import staged_dir, tensor_bytes
from focalcse.core.backbones import DEFAULT_BACKBONE, POOLERS, resolve_backbone  # noqa: F401

RECORD_FILE = "focalcse.json"


def _check_pooler(pooler: str) -> str:
    if pooler not in POOLERS:
        raise ValueError(f"unknown pooler {pooler!r}; expected one of {', '.join(POOLERS)}")
    return pooler


@dataclass(frozen=True)
class EncoderRecord:
    """What ``focalcse.json`` in a saved model folder says about it."""

    eval_pooler: str
    train_pooler: str
    mlp_only_train: bool
    max_seq_len: int
    backbone: str
    extra: dict[str, Any] | None = None
    # A framework other than SimCSE and how it builds the sentence vector, e.g. PromptBERT's
    # {"name": "promptbert", "templates": [...], ...}; absent (None) for a SimCSE model, whose
    # focalcse.json then has no "framework" key at all (see :func:`record_json`).
    framework: dict[str, Any] | None = None


def record_json(record: EncoderRecord) -> str:
    """The text of ``focalcse.json``: the record as indented JSON, without a ``framework`` key when it
    is None (so a SimCSE model's file is byte-for-byte what it was before frameworks existed)."""
    data = asdict(record)
    if data["framework"] is None:
        del data["framework"]
    return json.dumps(data, indent=2) + "\n"


def _framework_class(framework: dict[str, Any], where: str) -> tuple[type[SentenceEncoder], dict[str, Any]]:
    """The encoder class and its constructor options for a record's ``framework`` entry."""
    from focalcse.core.frameworks import framework_module, framework_names, framework_spec

    # Frameworks whose saved models encode differently from SimCSE's poolers declare ``"encoder": True``
    # in their SPEC: their module's ``ENCODER`` class loads such a folder (a DiffCSE model is a plain
    # [CLS] encoder and needs none). Imported by computed name: SimCSE's stages depend on no framework
    # module (tests/test_dvc_yaml.py), and a framework module imports this one.
    name = framework.get("name")
    encoding = [f for f in framework_names() if framework_spec(f).encoder]
    if name in encoding:
        cls = framework_module(name).ENCODER
        return cls, cls.options_from_record(framework)
    raise ValueError(
        f"{where}: focalcse.json names an unknown framework {name!r} (known: {', '.join(encoding)})"
    )


class SentenceEncoder(nn.Module):
    """A backbone with SimCSE's poolers.

    Args:
        backbone: a loaded ``transformers`` model.
        tokenizer: its tokenizer.
        pooler: ``cls`` | ``cls_before_pooler`` | ``avg``.
        mlp_only_train: use the MLP in training only (evaluation pooler becomes ``cls_before_pooler``).
        max_seq_len: truncation length for :meth:`tokenize`.
        source: where the backbone came from (recorded when saving).
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: Any,
        pooler: str = "cls",
        mlp_only_train: bool = False,
        max_seq_len: int = 32,
        source: str = "",
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler = _check_pooler(pooler)
        self.mlp_only_train = bool(mlp_only_train) and pooler == "cls"
        self.max_seq_len = int(max_seq_len)
        self.source = source
        # Train-mode forwards on the real tokens only (focalcse.core.unpad); set by the training loop
        # for SimCSE items with train.unpad. Evaluation always runs the padded transformers forward.
        self.unpad = False
        hidden = backbone.config.hidden_size
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if pooler == "cls" else None
        if self.mlp is not None:
            init_mlp(self.mlp[0], backbone.config)

    # ---------------------------------------------------------------- loading
    @classmethod
    def for_training(cls, source: str, cfg: Any) -> SentenceEncoder:
        """SimCSE's encoder for one train item: ``cfg``'s pooler, ``mlp_only_train`` and length, and a
        fresh MLP seeded with ``cfg.seed`` (SimCSE's items, and the frameworks that train SimCSE's
        encoder, e.g. DiffCSE)."""
        return cls.from_pretrained(
            source,
            pooler=cfg.pooler,
            mlp_only_train=cfg.mlp_only_train,
            max_seq_len=cfg.max_seq_len,
            mlp_init="fresh",
            seed=cfg.seed,
        )

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        pooler: str | None = None,
        mlp_only_train: bool = False,
        max_seq_len: int = 32,
        mlp_init: str = "fresh",
        seed: int | None = None,
        attn_implementation: str | None = "sdpa",
        **options: Any,
    ) -> SentenceEncoder:
        """Load a backbone (hub id, folder, or ``all-MiniLM-L6-v2``) and attach a pooler.

        A folder saved by this project for a framework other than SimCSE (its ``focalcse.json`` has a
        ``framework`` entry) comes back as that framework's encoder, whichever class this is called on:
        a PromptBERT folder as a :class:`~focalcse.core.frameworks.promptbert.PromptEncoder` with its
        recorded templates and denoising.

        Args:
            name_or_path: backbone reference (see :func:`resolve_backbone`).
            pooler: pooler to use; for a folder saved by this project it defaults to the recorded
                evaluation pooler, and any other value is refused.
            mlp_only_train: SimCSE's flag (``cls`` only).
            max_seq_len: truncation length.
            mlp_init: ``fresh`` (a new MLP initialised as the backbone's layers, see :func:`init_mlp`; as
                SimCSE) or ``pretrained`` (copy the backbone's own pooler dense layer; what SimCSE's
                evaluation does with ``--pooler cls``).
            seed: seeds the fresh MLP's initialisation (None: the current torch RNG state).
            attn_implementation: passed to ``AutoModel``; ``sdpa`` is PyTorch's fused attention.
            options: further constructor arguments of a subclass (e.g. ``PromptEncoder``'s
                ``templates``); for a framework folder they override the recorded ones.
        """
        path = resolve_backbone(name_or_path)
        record = read_record(path)
        target: type[SentenceEncoder] = cls
        if record is not None and record.framework is not None:
            target, recorded = _framework_class(record.framework, str(name_or_path))
            options = {**recorded, **options}
        if record is not None:
            if pooler is None:
                pooler = record.eval_pooler
            elif pooler != record.eval_pooler:
                raise ValueError(
                    f"model {name_or_path} was saved for evaluation with pooler {record.eval_pooler!r} "
                    f"(trained with {record.train_pooler!r}, mlp_only_train={record.mlp_only_train}); "
                    f"got pooler {pooler!r}. Use --pooler {record.eval_pooler} or omit it."
                )
            mlp_init = "pretrained"  # a saved cls model keeps its trained MLP in the backbone pooler
        if pooler is None:
            raise ValueError(f"no pooler given for {name_or_path}; expected one of {', '.join(POOLERS)}")
        _check_pooler(pooler)
        if mlp_init not in ("fresh", "pretrained"):
            raise ValueError(f"mlp_init must be 'fresh' or 'pretrained', got {mlp_init!r}")
        kwargs: dict[str, Any] = {"trust_remote_code": False}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        backbone = AutoModel.from_pretrained(path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        if seed is not None:
            torch.manual_seed(seed)
        enc = target(
            backbone, tokenizer, pooler, mlp_only_train, max_seq_len, source=str(name_or_path), **options
        )
        if enc.mlp is not None and mlp_init == "pretrained":
            dense = _backbone_pooler_dense(backbone)
            if dense is None:
                raise ValueError(
                    f"pooler 'cls' with a pretrained MLP needs a backbone pooler layer; {name_or_path} has none. "
                    "Use cls_before_pooler or avg."
                )
            enc.mlp[0].load_state_dict(dense.state_dict())
        return enc

    @classmethod
    def from_config(
        cls,
        config: Any,
        tokenizer: Any,
        pooler: str = "cls",
        mlp_only_train: bool = False,
        max_seq_len: int = 32,
    ) -> SentenceEncoder:
        """A randomly initialised encoder from a ``transformers`` config (tests, benchmarks)."""
        backbone = AutoModel.from_config(config, attn_implementation="sdpa")
        return cls(
            backbone, tokenizer, pooler, mlp_only_train, max_seq_len, source=f"config:{config.model_type}"
        )

    # ---------------------------------------------------------------- forward
    @property
    def eval_pooler(self) -> str:
        return "cls_before_pooler" if self.mlp_only_train else self.pooler

    def selection_mode(self) -> contextlib.AbstractContextManager[None]:
        """A context in which the training loop scores the STS-B dev set to select its checkpoint.

        For SimCSE it changes nothing (the dev vectors are the evaluation vectors). A framework whose
        official dev selection encodes differently from its test scoring overrides it (PromptBERT:
        denoised for selection, as ``CLTrainer.evaluate``; not for test scoring, as ``evaluation.py``).
        """
        return contextlib.nullcontext()

    def sentence_ids(self, sentences: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Token ids of ``sentences`` as :meth:`forward` reads them at evaluation: with the tokenizer's
        special tokens, truncated to ``max_length`` (default: the model's position limit,
        :func:`eval_max_length`), unpadded. :func:`focalcse.core.encode.encode` tokenizes with this."""
        if max_length is None:
            max_length = eval_max_length(self)
        return self.tokenizer(
            list(sentences), truncation=True, max_length=max_length, add_special_tokens=True
        )["input_ids"]

    def tokenize(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            sentences, padding=True, truncation=True, max_length=self.max_seq_len, return_tensors="pt"
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor
    ) -> torch.Tensor:
        """(B, L) token ids -> (B, d) sentence vectors with the pooler for the current mode.

        In train mode with :attr:`unpad` set, the backbone runs on the real tokens only
        (:func:`focalcse.core.unpad.packed_hidden`: the same function of the same weights).
        """
        if self.unpad and self.training and not extra:
            from focalcse.core.unpad import packed_hidden

            return self.pool(packed_hidden(self.backbone, input_ids, attention_mask), attention_mask)
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return self.pool(out.last_hidden_state, attention_mask)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, L, d) hidden states -> (B, d) with the pooler of the current mode (train / eval)."""
        pooler = self.pooler if self.training else self.eval_pooler
        if pooler == "avg":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
            return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        cls_vec = hidden[:, 0]  # (B, d)
        if pooler == "cls":
            return self.mlp(cls_vec)
        return cls_vec

    # ---------------------------------------------------------------- saving
    def save(self, path: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
        """Write a portable model folder atomically (temp dir, then rename).

        The folder holds the backbone (safetensors) and tokenizer, ``focalcse.json`` (the evaluation
        pooler and how the model was trained) and sentence-transformers module files, so
        ``AutoModel.from_pretrained(path)`` and ``SentenceTransformer(path)`` both load it with the
        evaluation pooler.
        """
        path = Path(path)
        with staged_dir(path, need=tensor_bytes(self.backbone.state_dict())) as tmp:
            eval_pooler = self.eval_pooler
            if eval_pooler == "cls":
                dense = _backbone_pooler_dense(self.backbone)
                if dense is None:
                    raise ValueError(
                        "pooler 'cls' at evaluation needs a backbone with a pooler layer to save the MLP into"
                    )
                with torch.no_grad():
                    dense.load_state_dict(self.mlp[0].state_dict())
            self.backbone.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            drop_loader_flags(tmp / "tokenizer_config.json")
            record = EncoderRecord(
                eval_pooler=eval_pooler,
                train_pooler=self.pooler,
                mlp_only_train=self.mlp_only_train,
                max_seq_len=self.max_seq_len,
                backbone=portable_source(self.source),
                extra=extra,
                framework=self.framework_record(),
            )
            (tmp / RECORD_FILE).write_text(record_json(record))
            self._write_export_files(tmp)
        return path

    def framework_record(self) -> dict[str, Any] | None:
        """The ``framework`` entry of ``focalcse.json``: None for SimCSE (a subclass says how it
        builds its vectors, so :meth:`from_pretrained` can rebuild it)."""
        return None

    def _write_export_files(self, folder: Path) -> None:
        """Files for other libraries besides the backbone and tokenizer: sentence-transformers' modules."""
        _write_sentence_transformers_files(
            folder, self.eval_pooler, self.backbone.config.hidden_size, eval_max_length(self), self.mlp
        )


# Keys ``AutoTokenizer.from_pretrained`` adds to a tokenizer's init kwargs about *how it was loaded*
# (transformers 5: ``is_local``, ``local_files_only`` - the latter true under HF_HUB_OFFLINE=1), which
# ``save_pretrained`` writes into tokenizer_config.json. They describe the loading process, not the
# tokenizer, and would make the same model's folder hash depend on the environment.
TOKENIZER_LOADER_FLAGS = ("is_local", "local_files_only", "cache_dir", "token", "revision", "_commit_hash")


def drop_loader_flags(path: Path) -> None:
    """Remove :data:`TOKENIZER_LOADER_FLAGS` from a saved ``tokenizer_config.json`` (rewritten with the
    same layout ``save_pretrained`` uses: indent 2, sorted keys, a final newline)."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if not any(k in config for k in TOKENIZER_LOADER_FLAGS):
        return
    for key in TOKENIZER_LOADER_FLAGS:
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def portable_source(source: str) -> str:
    """The backbone reference a model folder records: a hub id or name as given, but a local folder
    by its name only (``folder:<name>``), so the folder's bytes do not depend on where that folder was.
    The full path stays in the run's provenance (``*.meta.json``, MLflow)."""
    path = Path(source).expanduser()
    if source.startswith((".", "/", "~")) or (os.sep in source and path.is_dir()):
        return f"folder:{path.name}"
    return source


def init_mlp(linear: nn.Linear, config: Any) -> None:
    """Initialise the fresh MLP's linear layer as SimCSE's ``cl_init`` does (``init_weights``, i.e. the
    backbone's own ``_init_weights``): weights N(0, ``config.initializer_range``), bias 0.

    PyTorch's default (Kaiming-uniform) would give a different scale (std 1 / sqrt(3 hidden), 0.021 at
    768 but 0.1 at 32) from the 0.02 of every BERT/RoBERTa layer. Draws from the torch RNG, so the
    caller's seed fixes it.

    Args:
        linear: the MLP's ``nn.Linear``.
        config: the backbone's ``transformers`` config (``initializer_range``; 0.02 if absent).
    """
    std = float(getattr(config, "initializer_range", 0.02))
    with torch.no_grad():
        linear.weight.normal_(mean=0.0, std=std)
        linear.bias.zero_()


def read_record(path: str | os.PathLike) -> EncoderRecord | None:
    """The ``focalcse.json`` record of a saved folder, or None for a folder not saved by this project."""
    f = Path(path) / RECORD_FILE
    if not f.is_file():
        return None
    data = json.loads(f.read_text())
    return EncoderRecord(**data)


def _backbone_pooler_dense(backbone: nn.Module) -> nn.Linear | None:
    pooler = getattr(backbone, "pooler", None)
    dense = getattr(pooler, "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


def _write_sentence_transformers_files(
    folder: Path, eval_pooler: str, hidden: int, max_seq_len: int, mlp: nn.Module | None
) -> None:
    """modules.json & co. so ``SentenceTransformer(folder)`` applies the evaluation pooler."""
    from safetensors.torch import save_file

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "1_Pooling").mkdir()
    mode = "mean" if eval_pooler == "avg" else "cls"
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": hidden, "pooling_mode": mode, "include_prompt": True}, indent=2)
    )
    if eval_pooler == "cls":
        assert mlp is not None
        (folder / "2_Dense").mkdir()
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        (folder / "2_Dense" / "config.json").write_text(
            json.dumps(
                {
                    "in_features": hidden,
                    "out_features": hidden,
                    "bias": True,
                    "activation_function": "torch.nn.modules.activation.Tanh",
                },
                indent=2,
            )
        )
        lin = mlp[0]
        save_file(
            {
                "linear.weight": lin.weight.detach().contiguous().cpu(),
                "linear.bias": lin.bias.detach().contiguous().cpu(),
            },
            str(folder / "2_Dense" / "model.safetensors"),
        )
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_len, "do_lower_case": False})
    )


def eval_max_length(encoder: SentenceEncoder) -> int:
    """Evaluation truncation: the model's position limit (SimCSE evaluates untruncated sentences)."""
    config = encoder.backbone.config
    limit = getattr(config, "max_position_embeddings", 512)
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta"):
        limit -= 2  # RoBERTa's positions start after the padding index
    tok_max = getattr(encoder.tokenizer, "model_max_length", limit) or limit
    return int(min(limit, tok_max))


def tiny_config(vocab_size: int, hidden: int = 32, layers: int = 2, heads: int = 2) -> Any:
    """A small BERT config (random init) for tests and smoke runs."""
    return AutoConfig.for_model(
        "bert",
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=128,
    )
