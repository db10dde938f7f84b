"""The training forward without padding: a BERT/RoBERTa encoder run on the real tokens only.

A right-padded (B, L) batch of the 32-token training setting is about a fifth padding, and the
encoder's dense layers (the Q/K/V and output projections, the FFN, the layer norms, dropout) spend
their time in proportion to the tokens they see. :func:`packed_hidden` runs those layers on the
batch's real tokens packed into one (T, d) matrix, as unpadded encoders do (MosaicBERT, ModernBERT,
NVIDIA's BERT), and re-pads only around attention, where each sentence must see its own tokens:
Q, K and V are scattered straight into the head-major (B, heads, L, d_head) layout the batched matmuls
read (:meth:`Packing.to_heads`), attention runs with the padding mask, and the result is gathered back
to (T, d) (:meth:`Packing.from_heads`). Re-padding to (B, L, d) and transposing instead costs a strided
copy of each of Q, K, V and the output, forward and backward (docs/performance.md).

It calls the backbone's own weights (a saved model is the plain ``transformers`` folder), in the
order ``transformers``' ``BertModel`` / ``RobertaModel`` apply them:

* embeddings: word + token type (0) + position, LayerNorm, dropout. BERT's position is the column;
  RoBERTa's is ``padding_idx`` + the mask's cumulative sum over the row (``create_position_ids_from_input_ids``);
* each layer: the ``query``, ``key`` and ``value`` projections, attention (:func:`_attend`: SDPA
  without dropout, written out in float32 with it), then dense, :func:`dropout` and LayerNorm of
  ``attention.output``, ``intermediate``, and dense, :func:`dropout` and LayerNorm of ``output``.

In fp32 the last hidden states and all parameter gradients equal the padded ``transformers`` forward
within float rounding (tests/test_unpad.py, against ``transformers``, for BERT-, RoBERTa- and
MiniLM-shaped models). Dropout draws its masks over (T, d) instead of (B, L, d) tensors, so a training
run with dropout is a different (equally likely) draw from the padded one, and as deterministic.

Which encoders: :func:`unpad_unsupported` says why a backbone cannot (another architecture, a decoder,
cross-attention, chunked feed-forward, a non-absolute position embedding); those train padded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from focalcse.core.backbones import unpad_unsupported_config


def unpad_unsupported(backbone: nn.Module) -> str | None:
    """None if :func:`packed_hidden` can run ``backbone``; otherwise why not. The config's part is
    :func:`focalcse.core.backbones.unpad_unsupported_config` (what the trainer decides by)."""
    config = getattr(backbone, "config", None)
    reason = unpad_unsupported_config(config.to_dict() if config is not None else {})
    if reason is None and (not hasattr(backbone, "embeddings") or not hasattr(backbone, "encoder")):
        return f"{type(backbone).__name__} has no embeddings/encoder modules"
    return reason


# The packed token count is rounded up to a multiple of this by taking in a few padding tokens
# (~1 % of a 32-token batch of 128 rows): a different (T, d) shape at every step makes oneDNN build and
# cache new GEMM primitives each time, and the process grew by ~30 MB per step (3.7 GB after 64 steps
# of all-MiniLM-L6-v2 in bf16, against a flat 1.8 GB padded); with the rounding the shapes repeat.
PACK_MULTIPLE = 64


class Packing:
    """Which tokens of a (B, L) batch the packed forward computes: ``index`` (T,) into the flattened
    batch, row-major. The real tokens, plus the first padding positions (row-major) needed to make T a
    multiple of ``multiple`` (or every position, if fewer). The extra padding tokens are computed as
    ``transformers`` computes padding tokens, are never attended to (the key mask is the attention
    mask), and nothing downstream reads them, so they change no real token's value or gradient."""

    def __init__(self, attention_mask: torch.Tensor, multiple: int = PACK_MULTIPLE) -> None:
        self.mask = attention_mask.bool()  # (B, L)
        self.batch, self.width = self.mask.shape
        flat = self.mask.reshape(-1)
        real = int(flat.sum())
        extra = min(flat.numel(), -(-real // multiple) * multiple) - real
        if extra:
            flat = flat.clone()
            flat[(~flat).nonzero().squeeze(1)[:extra]] = True
        self.index = flat.nonzero().squeeze(1)  # (T,)
        self._head_rows: dict[int, torch.Tensor] = {}

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """(B, L, ...) -> (T, ...): the computed tokens only."""
        return padded.reshape(self.batch * self.width, *padded.shape[2:])[self.index]

    def repad(self, packed: torch.Tensor) -> torch.Tensor:
        """(T, ...) -> (B, L, ...) with zeros at the positions not computed (differentiable)."""
        flat = packed.new_zeros(self.batch * self.width, *packed.shape[1:])
        return flat.index_copy(0, self.index, packed).view(self.batch, self.width, *packed.shape[1:])

    def head_rows(self, heads: int) -> torch.Tensor:
        """(T * heads,): for each computed token and head, in that order, its row in a head-major
        (B, heads, L, d_head) tensor viewed as (B * heads * L, d_head)."""
        rows = self._head_rows.get(heads)
        if rows is None:
            b, col = self.index // self.width, self.index % self.width
            h = torch.arange(heads, device=self.index.device)
            rows = ((b[:, None] * heads + h) * self.width + col[:, None]).reshape(-1)
            self._head_rows[heads] = rows
        return rows

    def to_heads(self, packed: torch.Tensor, heads: int) -> torch.Tensor:
        """(T, heads * d_head) -> contiguous (B, heads, L, d_head), zeros at the positions not computed:
        the layout attention's batched matmuls read, written in one scatter (no transposed copy)."""
        head = packed.shape[1] // heads
        flat = packed.new_zeros(self.batch * heads * self.width, head)
        flat = flat.index_copy(0, self.head_rows(heads), packed.reshape(-1, head))
        return flat.view(self.batch, heads, self.width, head)

    def from_heads(self, padded: torch.Tensor) -> torch.Tensor:
        """(B, heads, L, d_head) -> (T, heads * d_head): the computed tokens, heads concatenated."""
        heads, head = padded.shape[1], padded.shape[3]
        rows = padded.reshape(-1, head).index_select(0, self.head_rows(heads))
        return rows.view(-1, heads * head)


def _positions(backbone: nn.Module, packing: Packing) -> torch.Tensor:
    """Each computed token's position id, as the backbone's embeddings compute it for the padded batch."""
    mask = packing.mask.long()
    if backbone.config.model_type == "roberta":
        # create_position_ids_from_input_ids: padding_idx + cumsum over the row's real tokens
        return packing.pack(torch.cumsum(mask, dim=1) * mask + backbone.embeddings.padding_idx)
    columns = torch.arange(packing.width, device=mask.device).expand(packing.batch, -1)
    return packing.pack(columns)


def _embed(backbone: nn.Module, input_ids: torch.Tensor, packing: Packing) -> torch.Tensor:
    emb = backbone.embeddings
    ids = packing.pack(input_ids)  # (T,)
    x = emb.word_embeddings(ids) + emb.token_type_embeddings(torch.zeros_like(ids))
    x = x + emb.position_embeddings(_positions(backbone, packing))
    return dropout(emb.LayerNorm(x), emb.dropout.p, emb.training)  # (T, d)


def keep_mask(shape: tuple[int, ...], p: float, device: torch.device | str) -> torch.Tensor:
    """A boolean dropout mask of ``shape``: each element True (kept) with probability
    1 - ceil(p * 2**32) / 2**32, independently, from 32 random bits per element.

    The bits come from the default generator's 64-bit draws (``random_`` over the full int64 range),
    each split into two int32 halves; an element is kept when its half is at least
    ``-2**31 + ceil(p * 2**32)``. On the CPU one 64-bit draw costs about what one ``torch.rand`` float
    costs, so two elements per draw take about 0.6 of ``torch.rand(shape) >= p``'s time
    (docs/performance.md), and the keep probability is exact to 2**-32 (``torch.rand``'s float32 draw:
    2**-24)."""
    n = 1
    for size in shape:
        n *= size
    words = torch.empty((n + 1) // 2, dtype=torch.int64, device=device).random_(-(2**63), None)
    return (words.view(torch.int32)[:n] >= _threshold(p)).view(shape)


def _threshold(p: float) -> int:
    """The int32 value at and above which an element is kept: -2**31 + ceil(p * 2**32), exactly."""
    num, den = p.as_integer_ratio()
    return -(2**31) + -(-num * 2**32 // den)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout as ``nn.Dropout``: each element kept with probability 1 - p (to 2**-32) and
    scaled by 1 / (1 - p), from :func:`keep_mask`'s integer draw. Same distribution as
    ``torch.nn.functional.dropout``, whose ``bernoulli_`` mask costs about twice the time on CPU
    (docs/performance.md); a different draw from the same RNG."""
    if not training or p == 0.0:
        return x
    return (x * keep_mask(x.shape, p, x.device)).mul_(1.0 / (1.0 - p))


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor, p: float, scale: float
):
    """Softmax attention of (B, H, L, dh) tensors with a (B, 1, 1, L) boolean key mask and dropout ``p``
    on the probabilities. Without dropout: SDPA. With it: written out, because CPU SDPA with dropout
    falls back to a slower path, in three passes over the (B, H, L, L) scores: one batched GEMM that
    also applies the scale and adds the key mask as a 0 / -inf bias (``baddbmm``), the softmax, and the
    dropout mask's product; the dropout's 1 / (1 - p) is the weighted sum's GEMM factor. The
    written-out attention computes in float32 and returns the inputs' dtype, as SDPA does internally
    for bf16 inputs, so bf16 training keeps SDPA's precision (bf16 scores and softmax would double its
    error)."""
    if p == 0.0:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    b, h, length, d = q.shape
    with torch.autocast(q.device.type, enabled=False):
        bias = torch.zeros(attn_mask.shape, dtype=torch.float32, device=q.device)
        bias = bias.masked_fill_(~attn_mask, float("-inf")).expand(b, h, 1, length).reshape(b * h, 1, length)
        qf, kf, vf = (t.float().reshape(b * h, length, d) for t in (q, k, v))
        probs = torch.softmax(torch.baddbmm(bias, qf, kf.transpose(1, 2), alpha=scale), dim=-1)
        probs = probs * keep_mask(probs.shape, p, q.device)
        out = torch.baddbmm(_ZERO.to(q.device), probs, vf, beta=0.0, alpha=1.0 / (1.0 - p))
        return out.view(b, h, length, d).to(q.dtype)


_ZERO = torch.zeros((), dtype=torch.float32)  # baddbmm's ignored input (beta 0): a bare weighted sum


def _add_norm(block: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``BertSelfOutput`` / ``BertOutput``: dense, dropout, LayerNorm(. + residual)."""
    h = dropout(block.dense(h), block.dropout.p, block.training)
    return block.LayerNorm(h + residual)


def _attention(layer: nn.Module, x: torch.Tensor, packing: Packing, attn_mask: torch.Tensor) -> torch.Tensor:
    """The layer's self-attention block on packed tokens: (T, d) -> (T, d) after its output LayerNorm."""
    sa = layer.attention.self
    heads = sa.num_attention_heads

    p = sa.dropout.p if sa.training else 0.0
    q, k, v = (packing.to_heads(proj(x), heads) for proj in (sa.query, sa.key, sa.value))
    ctx = packing.from_heads(_attend(q, k, v, attn_mask, p, sa.scaling))  # (T, d)
    return _add_norm(layer.attention.output, ctx, x)


def packed_hidden(backbone: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last hidden states of a (B, L) batch, computed on its real tokens (and the few padding tokens
    :class:`Packing` adds): (B, L, d). At padding positions the values are, as in ``transformers``,
    ones nothing downstream reads (zeros where not computed)."""
    packing = Packing(attention_mask)
    attn_mask = packing.mask[:, None, None, :]  # (B, 1, 1, L): each query sees its row's real keys
    x = _embed(backbone, input_ids, packing)
    packing.head_rows(backbone.config.num_attention_heads)  # built once, before the layers read it
    for layer in backbone.encoder.layer:
        x = encoder_layer(layer, x, packing, attn_mask)
    return packing.repad(x)


def encoder_layer(
    layer: nn.Module, x: torch.Tensor, packing: Packing, attn_mask: torch.Tensor
) -> torch.Tensor:
    """One ``BertLayer`` on packed tokens: (T, d) -> (T, d). A module-level function so that a caller
    can swap in a compiled one (``benchmarks/profile_step.py --compile`` measures ``torch.compile``'s)."""
    a = _attention(layer, x, packing, attn_mask)
    return _add_norm(layer.output, layer.intermediate(a), a)
