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
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer

from focalcse.atomic import staged_dir
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
        hidden = backbone.config.hidden_size
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if pooler == "cls" else None
        if self.mlp is not None:
            init_mlp(self.mlp[0], backbone.config)

    # ---------------------------------------------------------------- loading
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
    ) -> SentenceEncoder:
        """Load a backbone (hub id, folder, or ``all-MiniLM-L6-v2``) and attach a pooler.

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
        """
        path = resolve_backbone(name_or_path)
        record = read_record(path)
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
        enc = cls(backbone, tokenizer, pooler, mlp_only_train, max_seq_len, source=str(name_or_path))
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

    def tokenize(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            sentences, padding=True, truncation=True, max_length=self.max_seq_len, return_tensors="pt"
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor
    ) -> torch.Tensor:
        """(B, L) token ids -> (B, d) sentence vectors with the pooler for the current mode."""
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
        with staged_dir(path) as tmp:
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
            record = EncoderRecord(
                eval_pooler=eval_pooler,
                train_pooler=self.pooler,
                mlp_only_train=self.mlp_only_train,
                max_seq_len=self.max_seq_len,
                backbone=self.source,
                extra=extra,
            )
            (tmp / RECORD_FILE).write_text(json.dumps(asdict(record), indent=2) + "\n")
            _write_sentence_transformers_files(
                tmp, eval_pooler, self.backbone.config.hidden_size, eval_max_length(self), self.mlp
            )
        return path


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
