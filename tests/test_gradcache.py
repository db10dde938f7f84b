"""GradCache chunking gives the gradients of the plain computation: exactly in float64 with dropout on
(the RNG replay reproduces every dropout mask), to float rounding in float32 and under bf16 autocast."""

from __future__ import annotations

import contextlib

import pytest
import torch

from focalcse.core import gradcache
from focalcse.core.gradcache import cached_contrastive_loss, two_view_loss
from focalcse.losses import build_loss, loss_names

N, L, VOCAB = 12, 10, 100  # 12 sentences -> a (24, 10) two-view batch


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (N, L), generator=gen)  # (N, L)
    mask = torch.ones_like(ids)
    mask[::3, 6:] = 0  # some padding
    return torch.cat([ids, ids]), torch.cat([mask, mask])  # (2N, L): two views


def _encoder(dtype: torch.dtype = torch.float64, dropout: float = 0.1) -> torch.nn.Module:
    from focalcse.core.model import SentenceEncoder, tiny_config

    cfg = tiny_config(VOCAB)  # hidden 32, 2 layers
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = dropout
    torch.manual_seed(1)
    return SentenceEncoder.from_config(cfg, None, pooler="cls").to(dtype).train()


def _reference(encoder, loss_fn, ids, mask, chunk: int, seed: int, bf16: bool = False):
    """Plain autograd over the same chunks in the same order (hence the same dropout masks)."""
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        z = torch.cat(
            [encoder(input_ids=ids[s], attention_mask=mask[s]) for s in gradcache._chunks(len(ids), chunk)]
        )  # (2N, d)
        z = z.float() if z.dtype == torch.bfloat16 else z
        loss = loss_fn(z[:N], z[N:])
    loss.backward()  # outside autocast, as the training loop does
    return loss.detach(), _grads(encoder), torch.get_rng_state()


def _cached(encoder, loss_fn, ids, mask, chunk: int, seed: int):
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = cached_contrastive_loss(encoder, loss_fn, ids, mask, chunk)
    loss.backward()
    return loss.detach(), _grads(encoder), torch.get_rng_state()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("loss_name", ["infonce", "focal_infonce"])
@pytest.mark.parametrize("chunk", [5, 8, 24])
def test_float64_exact_with_dropout(batch, loss_name, chunk) -> None:
    ids, mask = batch
    encoder, loss_fn = _encoder(), build_loss(loss_name, 0.05, m=0.3)
    ref_loss, ref_grads, ref_rng = _reference(encoder, loss_fn, ids, mask, chunk, seed=3)
    loss, grads, rng = _cached(encoder, loss_fn, ids, mask, chunk, seed=3)
    assert len(grads) == len(ref_grads) > 30
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert _max_diff(grads, ref_grads) < 1e-10
    assert torch.equal(rng, ref_rng), "the process RNG must continue as after the plain forward"


def test_rng_replay_is_what_makes_it_exact(batch, monkeypatch) -> None:
    ids, mask = batch
    encoder, loss_fn = _encoder(), build_loss("focal_infonce", 0.05, m=0.3)
    _, ref_grads, _ = _reference(encoder, loss_fn, ids, mask, 8, seed=3)
    monkeypatch.setattr(gradcache.RandState, "replay", lambda self: contextlib.nullcontext())
    _, grads, _ = _cached(encoder, loss_fn, ids, mask, 8, seed=3)
    assert _max_diff(grads, ref_grads) > 1e-3  # other dropout masks in the re-forward


def test_float32_matches_one_full_batch_forward(batch) -> None:
    """Without dropout, chunked embeddings equal the full-batch ones: compare with the plain step."""
    ids, mask = batch
    encoder, loss_fn = _encoder(torch.float32, dropout=0.0), build_loss("focal_infonce", 0.05, m=0.3)
    encoder.zero_grad(set_to_none=True)
    plain = two_view_loss(encoder, loss_fn, ids, mask, chunk_size=0)
    plain.backward()
    ref = _grads(encoder)
    encoder.zero_grad(set_to_none=True)
    loss = two_view_loss(encoder, loss_fn, ids, mask, chunk_size=7)
    loss.backward()
    torch.testing.assert_close(loss, plain.detach(), atol=1e-6, rtol=1e-6)
    for key, g in ref.items():  # gradients reach ~20 (1/tau): relative bound
        torch.testing.assert_close(encoder.get_parameter(key).grad, g, atol=1e-5, rtol=1e-5, msg=key)


def test_bf16_autocast_is_replayed(batch) -> None:
    """The re-forward runs inside backward, outside the caller's autocast block: it must re-enter it
    and reproduce the cached bf16 embeddings bit for bit."""
    ids, mask = batch
    encoder, loss_fn = _encoder(torch.float32), build_loss("focal_infonce", 0.05, m=0.3)
    outputs: list[torch.Tensor] = []
    handle = encoder.register_forward_hook(lambda mod, args, out: outputs.append(out.detach().clone()))
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cached_contrastive_loss(encoder, loss_fn, ids, mask, 8)
    loss.backward()
    handle.remove()
    cached, replayed = outputs[:3], outputs[3:]  # 3 chunks of 8, then their re-forwards
    assert all(o.dtype == torch.bfloat16 for o in outputs)
    assert all(torch.equal(a, b) for a, b in zip(cached, replayed))
    grads = _grads(encoder)
    ref_loss, ref_grads, _ = _reference(encoder, loss_fn, ids, mask, 8, seed=5, bf16=True)
    torch.testing.assert_close(loss, ref_loss, atol=0, rtol=0)
    # The plain path sums the chunks' gradients in bf16 (autocast's cached weight casts are shared),
    # GradCache in float32: equal to bf16 rounding.
    flat = torch.cat([grads[k].flatten() for k in ref_grads])
    ref_flat = torch.cat([g.flatten() for g in ref_grads.values()])
    assert ((flat - ref_flat).norm() / ref_flat.norm()).item() < 1e-2
    # One chunk is the plain step itself: identical.
    ref_loss, ref_grads, _ = _reference(encoder, loss_fn, ids, mask, len(ids), seed=5, bf16=True)
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cached_contrastive_loss(encoder, loss_fn, ids, mask, len(ids))
    loss.backward()
    assert torch.equal(loss, ref_loss) and _max_diff(_grads(encoder), ref_grads) == 0.0


class _BagOfEmbeddings(torch.nn.Module):
    """A model without any op that autocast runs in bf16: under autocast, its gradients show the
    precision of the loss's gradient alone."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.emb = torch.nn.Embedding(VOCAB, 16)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return (self.emb(input_ids) * attention_mask.unsqueeze(-1)).sum(1)  # (B, 16)


@pytest.mark.parametrize("loss_name", loss_names())
def test_loss_gradient_is_fp32_under_bf16_autocast(batch, loss_name) -> None:
    """GradCache takes ``dL/dz`` inside the caller's autocast block, where backward ops would run in
    bf16: it must be the fp32 gradient of the plain path (backward outside autocast)."""
    ids, mask = batch
    model, loss_fn = _BagOfEmbeddings(), build_loss(loss_name, 0.05)
    z = model(input_ids=ids, attention_mask=mask)  # (2N, 16), fp32 outside autocast
    loss_fn(z[:N], z[N:]).backward()
    ref = model.emb.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cached_contrastive_loss(model, loss_fn, ids, mask, 5)
    loss.backward()
    torch.testing.assert_close(model.emb.weight.grad, ref, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


def test_upstream_gradient_scales_and_accumulates(batch) -> None:
    ids, mask = batch
    encoder, loss_fn = _encoder(), build_loss("infonce", 0.05)
    _, grads, _ = _cached(encoder, loss_fn, ids, mask, 8, seed=3)
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    (2.0 * cached_contrastive_loss(encoder, loss_fn, ids, mask, 8)).backward()
    torch.manual_seed(3)
    cached_contrastive_loss(encoder, loss_fn, ids, mask, 8).backward()  # accumulates into .grad
    assert _max_diff(_grads(encoder), {k: 3.0 * g for k, g in grads.items()}) < 1e-10


def test_rejects_bad_input(batch) -> None:
    ids, mask = batch
    encoder, loss_fn = _encoder(), build_loss("infonce", 0.05)
    with pytest.raises(ValueError, match="two-view"):
        cached_contrastive_loss(encoder, loss_fn, ids[:3], mask[:3], 2)
    with pytest.raises(ValueError, match="chunk_size"):
        cached_contrastive_loss(encoder, loss_fn, ids, mask, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_dropout_replay(batch) -> None:
    """The CUDA generator's state is replayed too (dropout on the GPU draws from it, not the CPU's)."""
    ids, mask = (t.cuda() for t in batch)
    encoder, loss_fn = _encoder(torch.float64).cuda(), build_loss("focal_infonce", 0.05, m=0.3)
    ref_loss, ref_grads, _ = _reference(encoder, loss_fn, ids, mask, 8, seed=3)
    loss, grads, _ = _cached(encoder, loss_fn, ids, mask, 8, seed=3)
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert _max_diff(grads, ref_grads) < 1e-10
