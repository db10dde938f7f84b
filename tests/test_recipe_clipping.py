"""Gradient clipping as SimCSE's trainer (HF ``max_grad_norm``): the pre-clip global norm is recorded
and logged, the optimizer sees the gradient scaled to ``max_grad_norm``, and the GradCache path
records the plain path's norm. The DDP case is in ``test_distributed.py``.

The references are computed here, by hand, on a deep copy of the model: dropout is off in the tiny
config, so the forward is deterministic and no RNG has to be replayed.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import focalcse.core.training as training
from focalcse.config import TrainConfig
from focalcse.core.model import SentenceEncoder, tiny_config
from focalcse.core.training import NonFiniteLossError, batch_order, train

BATCH, TAU = 8, 0.05
CLIP = 1e-3  # the tiny random model's gradient norm is ~6e-3: the default bound 1.0 would never bind
EPS = 1e-6  # clip_grad_norm_'s (and HF Trainer's) coefficient is max_norm / (norm + 1e-6)


def _encoder(tokenizer) -> SentenceEncoder:
    """A tiny BERT + MLP pooler without dropout (one training step is then a pure function)."""
    cfg = tiny_config(tokenizer.vocab_size)
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
    torch.manual_seed(11)
    return SentenceEncoder.from_config(cfg, tokenizer, pooler="cls")


@pytest.fixture
def encoder(minilm_tokenizer) -> SentenceEncoder:
    return _encoder(minilm_tokenizer)


def _corpus(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``n`` token-id lists of 3-10 tokens ([CLS] ... [SEP]): padding varies within a batch."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n,), generator=gen).tolist()
    return [[101, *torch.randint(1000, vocab, (k,), generator=gen).tolist(), 102] for k in lengths]


def _cfg(**changes) -> TrainConfig:
    base = dict(loss="infonce", temperature=TAU, batch_size=BATCH, lr=1e-3, eval_at_start=False, seed=3)
    return TrainConfig(**{**base, **changes})


def _reference_grads(encoder: SentenceEncoder, corpus: list[list[int]]) -> list[torch.Tensor]:
    """Gradients of SimCSE's loss on the whole ``corpus`` as one batch, on a copy of ``encoder``:
    padding by a loop, the two views as one (2N, L) forward, InfoNCE written out.

    The rows are taken in the trainer's (seeded) order: the loss does not depend on it, but float32
    sums do, and the [CLS] embedding's gradient cancels to ~1e-7 over the rows.
    """
    model = copy.deepcopy(encoder).train()
    (order,) = batch_order(len(corpus), len(corpus), epochs=1, seed=_cfg().seed)
    corpus = [corpus[i] for i in order]
    width = max(len(r) for r in corpus)
    ids = torch.zeros((len(corpus), width), dtype=torch.long)  # (N, L), pad id 0
    mask = torch.zeros_like(ids)
    for i, row in enumerate(corpus):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    n = len(corpus)
    z = model(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, mask]))  # (2N, d)
    sim = F.normalize(z[:n], dim=-1) @ F.normalize(z[n:], dim=-1).T  # (N, N)
    F.cross_entropy(sim / TAU, torch.arange(n)).backward()
    return [p.grad for p in model.parameters() if p.grad is not None]


def _norm(grads: list[torch.Tensor]) -> float:
    return float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))


def _atol(grads: list[torch.Tensor]) -> float:
    """Absolute tolerance: 1e-6 of the largest gradient. The trainer runs the unpadded forward
    (focalcse.core.unpad), the reference the padded one, so small gradients differ by rounding that no
    relative tolerance matches (the attention key biases' are 0 in exact arithmetic: softmax ignores a
    per-query constant). Seen: 2.3e-10 apart against a largest gradient of 8.2e-4 (2.8e-7 of it)."""
    return 1e-6 * max(float(g.abs().max()) for g in grads)


def _capture_optimizer_grads(monkeypatch) -> list[list[torch.Tensor]]:
    """Every gradient the optimizer's ``step`` sees (one list per step, parameter order)."""
    seen: list[list[torch.Tensor]] = []
    real_setup = training._setup

    def setup(*args, **kwargs):
        loop = real_setup(*args, **kwargs)

        def before_step(optimizer, args, kwargs) -> None:
            seen.append([p.grad.detach().clone() for p in loop.encoder.parameters() if p.grad is not None])

        loop.optimizer.register_step_pre_hook(before_step)
        return loop

    monkeypatch.setattr(training, "_setup", setup)
    return seen


def test_recorded_grad_norm_is_the_pre_clip_global_norm(encoder, minilm_tokenizer, tmp_path) -> None:
    corpus = _corpus(BATCH, minilm_tokenizer.vocab_size)  # one batch: the whole corpus
    ref = _norm(_reference_grads(encoder, corpus))
    assert ref > CLIP, "clipping should bind here, so pre- and post-clip norms differ"
    logged: list[tuple[dict, int]] = []
    result = train(
        encoder,
        corpus,
        _cfg(max_steps=1, max_grad_norm=CLIP),
        tmp_path / "m",
        log_metrics=lambda m, s: logged.append((m, s)),
        progress=False,
    )
    (entry,) = result.history
    assert set(entry) == {"step", "loss", "lr", "grad_norm"}
    assert entry["grad_norm"] == pytest.approx(ref, rel=1e-5)
    assert logged == [({"loss": entry["loss"], "lr": entry["lr"], "grad_norm": entry["grad_norm"]}, 1)]


@pytest.mark.parametrize("max_grad_norm", [CLIP, 1e-4])
def test_optimizer_sees_the_gradient_clipped_to_max_grad_norm(
    encoder, minilm_tokenizer, tmp_path, monkeypatch, max_grad_norm
) -> None:
    corpus = _corpus(BATCH, minilm_tokenizer.vocab_size)
    ref = _reference_grads(encoder, corpus)
    ref_norm = _norm(ref)
    assert ref_norm > max_grad_norm
    seen = _capture_optimizer_grads(monkeypatch)
    result = train(
        encoder, corpus, _cfg(max_steps=1, max_grad_norm=max_grad_norm), tmp_path / "m", progress=False
    )
    (grads,) = seen
    scale = max_grad_norm / (ref_norm + EPS)
    assert _norm(grads) == pytest.approx(ref_norm * scale, rel=1e-5)
    assert _norm(grads) == pytest.approx(max_grad_norm, rel=1e-3)  # EPS is 2e-4 of this tiny norm
    atol = _atol(ref) * scale
    for got, want in zip(grads, ref, strict=True):  # the same direction, scaled
        torch.testing.assert_close(got, want * scale, rtol=1e-5, atol=atol)
    assert result.history[0]["grad_norm"] == pytest.approx(ref_norm, rel=1e-5)  # recorded before clipping


@pytest.mark.parametrize("max_grad_norm", [0.0, 1e6])
def test_no_clipping_leaves_the_gradient_untouched(
    encoder, minilm_tokenizer, tmp_path, monkeypatch, max_grad_norm
) -> None:
    """``max_grad_norm`` 0 turns clipping off (the norm is still recorded); a bound above the norm does
    nothing either."""
    corpus = _corpus(BATCH, minilm_tokenizer.vocab_size)
    ref = _reference_grads(encoder, corpus)
    seen = _capture_optimizer_grads(monkeypatch)
    result = train(
        encoder, corpus, _cfg(max_steps=1, max_grad_norm=max_grad_norm), tmp_path / "m", progress=False
    )
    (grads,) = seen
    for got, want in zip(grads, ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=_atol(ref))
    assert result.history[0]["grad_norm"] == pytest.approx(_norm(ref), rel=1e-5)
    assert _norm(grads) == pytest.approx(_norm(ref), rel=1e-5)


def test_gradcache_records_the_plain_paths_grad_norm(minilm_tokenizer, tmp_path) -> None:
    """GradCache's gradients accumulate inside ``loss.backward()``: the norm clipped after it is the
    full batch's, step after step (the clipped updates keep both runs together)."""
    corpus = _corpus(3 * BATCH, minilm_tokenizer.vocab_size, seed=1)
    runs = {}
    for chunk in (0, 5):  # 16 sequences per batch in chunks of 5, 5, 5, 1
        cfg = _cfg(grad_cache_chunk=chunk, max_grad_norm=CLIP)
        runs[chunk] = train(
            _encoder(minilm_tokenizer), corpus, cfg, tmp_path / f"c{chunk}", progress=False
        ).history
    assert len(runs[0]) == 3
    assert runs[0][0]["grad_norm"] > CLIP  # clipping binds, so a wrong norm would change later steps
    # same weights; chunked forwards sum in another order: 3.1e-5 apart on an Intel Xeon (AVX-512
    # kernels), below 1e-5 on an AMD EPYC; a wrong norm (one chunk's, or a sum of squares) is far off
    assert runs[5][0]["grad_norm"] == pytest.approx(runs[0][0]["grad_norm"], rel=1e-4)
    # later steps: chunked forwards round differently, and the updates carry that over
    for key in ("grad_norm", "loss"):
        torch.testing.assert_close(
            torch.tensor([h[key] for h in runs[5]]),
            torch.tensor([h[key] for h in runs[0]]),
            rtol=1e-4,
            atol=0,
        )


def test_non_finite_grad_norm_raises_before_the_step(
    encoder, minilm_tokenizer, tmp_path, monkeypatch
) -> None:
    def nan_gradient_loss(name, temperature, **hyper):
        def loss(z1, z2):
            # value 0 (finite), gradient sqrt'(0) * 0 = inf * 0 = NaN
            return torch.sqrt((z1 - z1.detach()).pow(2).sum())

        return loss

    monkeypatch.setattr(training, "build_loss", nan_gradient_loss)
    before = copy.deepcopy(encoder.state_dict())
    with pytest.raises(NonFiniteLossError, match="gradient norm is nan at step 1"):
        train(encoder, _corpus(BATCH, minilm_tokenizer.vocab_size), _cfg(), tmp_path / "m", progress=False)
    after = encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the optimizer step was not taken
