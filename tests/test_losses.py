"""InfoNCE and Focal-InfoNCE against an independent float64 reference written from the paper's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from focalcse.losses import FocalInfoNCE, InfoNCE, build_loss, focal_logits, loss_names

TEMPERATURES = [0.01, 0.05, 0.1, 1.0]
MARGINS = [0.0, 0.1, 0.3, 0.5]
DATA_KINDS = ["random", "near_duplicate_views", "near_duplicate_rows"]


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny tensors: one intra-op thread avoids thread-pool overhead (20x slower on a busy 2-core box)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# --------------------------------------------------------------------------------------------------
# Independent reference: explicit loops in float64, nothing from focalcse, no F.cross_entropy.
# --------------------------------------------------------------------------------------------------


def reference_cosine(z1: np.ndarray, z2: np.ndarray) -> list[list[float]]:
    """s[i][j] = <z1_i, z2_j> / (|z1_i| |z2_j|), computed entry by entry."""
    n = z1.shape[0]
    norms1 = [math.sqrt(float(np.dot(z1[i], z1[i]))) for i in range(n)]
    norms2 = [math.sqrt(float(np.dot(z2[j], z2[j]))) for j in range(n)]
    return [[float(np.dot(z1[i], z2[j])) / (norms1[i] * norms2[j]) for j in range(n)] for i in range(n)]


def _neg_log_softmax_at(exponents: list[float], target: int) -> float:
    """-log(e^{a_target} / sum_j e^{a_j}) with the max subtracted (log-sum-exp) for stability."""
    top = max(exponents)
    log_denominator = top + math.log(sum(math.exp(a - top) for a in exponents))
    return log_denominator - exponents[target]


def reference_infonce(z1: np.ndarray, z2: np.ndarray, tau: float) -> float:
    """Mean over i of l_i = -log(exp(s_ii/tau) / sum_j exp(s_ij/tau)) (SimCSE Eq. 1)."""
    s = reference_cosine(z1, z2)
    n = len(s)
    losses = []
    for i in range(n):
        exponents = [s[i][j] / tau for j in range(n)]
        losses.append(_neg_log_softmax_at(exponents, i))
    return sum(losses) / n


def reference_focal(z1: np.ndarray, z2: np.ndarray, tau: float, m: float) -> float:
    """Mean over i of Eq. 2: -log(e^{s_ii^2/tau} / (sum_{j!=i} e^{s_ij(s_ij+m)/tau} + e^{s_ii^2/tau}))."""
    return reference_focal_from_cosine(reference_cosine(z1, z2), tau, m)


def reference_focal_from_cosine(s: list[list[float]], tau: float, m: float) -> float:
    n = len(s)
    losses = []
    for i in range(n):
        exponents = []
        for j in range(n):
            if j == i:
                exponents.append(s[i][i] ** 2 / tau)  # positive: s_p^2 / tau
            else:
                exponents.append(s[i][j] * (s[i][j] + m) / tau)  # negative: s_n (s_n + m) / tau
        losses.append(_neg_log_softmax_at(exponents, i))
    return sum(losses) / n


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


def make_views(n: int, d: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two (n, d) float64 views: independent, nearly equal views, or a batch with two near-equal rows."""
    rng = np.random.default_rng(seed + 1000 * n + d)
    z1 = rng.standard_normal((n, d))
    if kind == "random":
        z2 = rng.standard_normal((n, d))
    elif kind == "near_duplicate_views":
        z2 = z1 + 1e-6 * rng.standard_normal((n, d))
    elif kind == "near_duplicate_rows":
        z2 = z1 + 0.3 * rng.standard_normal((n, d))
        z1[1] = z1[0] + 1e-6 * rng.standard_normal(d)
        z2[1] = z2[0] + 1e-6 * rng.standard_normal(d)
    else:
        raise AssertionError(kind)
    return z1, z2


def _t(x: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(x, dtype=dtype)


# --------------------------------------------------------------------------------------------------
# Values against the reference
# --------------------------------------------------------------------------------------------------


# What can break the maths is the data (ties, near-duplicates) and the temperature (overflow at 0.01,
# a flat softmax at 1.0); the batch size and width are looped over inside each case (the smallest
# batch, an odd one, a wide one), as they exercise the same code.
SHAPES = [(2, 4), (3, 16), (33, 64)]


@pytest.mark.parametrize("kind", DATA_KINDS)
@pytest.mark.parametrize("tau", TEMPERATURES)
def test_infonce_matches_reference_float64(tau: float, kind: str) -> None:
    for n, d in SHAPES:
        z1, z2 = make_views(n, d, kind)
        got = InfoNCE(tau)(_t(z1), _t(z2)).item()
        want = reference_infonce(z1, z2, tau)
        assert got == pytest.approx(want, rel=1e-10, abs=1e-10), f"n={n} d={d}"


@pytest.mark.parametrize("kind", DATA_KINDS)
@pytest.mark.parametrize("tau", TEMPERATURES)
def test_focal_matches_reference_float64(tau: float, kind: str) -> None:
    for n, d in SHAPES:
        z1, z2 = make_views(n, d, kind)
        cosine = reference_cosine(z1, z2)
        for m in MARGINS:
            got = FocalInfoNCE(tau, m)(_t(z1), _t(z2)).item()
            want = reference_focal_from_cosine(cosine, tau, m)
            assert got == pytest.approx(want, rel=1e-10, abs=1e-10), f"n={n} d={d} m={m}"


@pytest.mark.parametrize("kind", DATA_KINDS)
@pytest.mark.parametrize("tau", TEMPERATURES)
@pytest.mark.parametrize("n", [3, 33])
def test_float32_inputs_match_float64_reference(n: int, tau: float, kind: str) -> None:
    z1, z2 = make_views(n, 16, kind)
    z1_32, z2_32 = _t(z1, torch.float32), _t(z2, torch.float32)
    # The reference sees exactly the float32-rounded inputs, so only the arithmetic precision differs.
    z1_ref, z2_ref = z1_32.double().numpy(), z2_32.double().numpy()
    got = InfoNCE(tau)(z1_32, z2_32)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(reference_infonce(z1_ref, z2_ref, tau), rel=1e-4, abs=1e-4)
    cosine = reference_cosine(z1_ref, z2_ref)
    for m in MARGINS:
        got = FocalInfoNCE(tau, m)(z1_32, z2_32).item()
        want = reference_focal_from_cosine(cosine, tau, m)
        assert got == pytest.approx(want, rel=1e-4, abs=1e-4), f"m={m}"


def test_infonce_equals_simcse_cross_entropy() -> None:
    """SimCSE: cross-entropy over cos(z1_i, z2_j)/tau with labels arange(N)."""
    gen = torch.Generator().manual_seed(0)
    z1 = torch.randn(16, 32, generator=gen, dtype=torch.float64)
    z2 = torch.randn(16, 32, generator=gen, dtype=torch.float64)
    for tau in TEMPERATURES:
        cos = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1)  # (N, N)
        want = F.cross_entropy(cos / tau, torch.arange(16))
        torch.testing.assert_close(InfoNCE(tau)(z1, z2), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", MARGINS)
def test_focal_differs_from_infonce(m: float) -> None:
    z1, z2 = make_views(8, 16, "random")
    tau = 0.05
    focal_ref = reference_focal(z1, z2, tau, m)
    infonce_ref = reference_infonce(z1, z2, tau)
    assert abs(focal_ref - infonce_ref) > 1e-3
    assert FocalInfoNCE(tau, m)(_t(z1), _t(z2)).item() != pytest.approx(
        InfoNCE(tau)(_t(z1), _t(z2)).item(), abs=1e-3
    )


def test_loss_is_invariant_to_embedding_scale() -> None:
    z1, z2 = make_views(8, 16, "random")
    for loss in (InfoNCE(0.05), FocalInfoNCE(0.05, 0.3)):
        base = loss(_t(z1), _t(z2))
        torch.testing.assert_close(loss(_t(3.7 * z1), _t(0.01 * z2)), base, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------------
# Numerical stability
# --------------------------------------------------------------------------------------------------


def _loss_and_grads(loss: torch.nn.Module, z1: torch.Tensor, z2: torch.Tensor):
    z1 = z1.clone().requires_grad_(True)
    z2 = z2.clone().requires_grad_(True)
    value = loss(z1, z2)
    value.backward()
    return value, z1.grad, z2.grad


LOSSES_SMALL_TAU = [
    pytest.param(lambda: InfoNCE(0.01), id="infonce"),
    pytest.param(lambda: FocalInfoNCE(0.01, 0.3), id="focal"),
    pytest.param(lambda: FocalInfoNCE(0.01, 0.5), id="focal_m0.5"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make_loss", LOSSES_SMALL_TAU)
def test_identical_views_small_tau_finite(make_loss, dtype: torch.dtype) -> None:
    z = torch.randn(16, 32, generator=torch.Generator().manual_seed(1), dtype=dtype)
    value, g1, g2 = _loss_and_grads(make_loss(), z, z.clone())
    assert torch.isfinite(value)
    assert torch.isfinite(g1).all() and torch.isfinite(g2).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make_loss", LOSSES_SMALL_TAU)
def test_all_rows_identical_small_tau_finite(make_loss, dtype: torch.dtype) -> None:
    n = 16
    z = torch.randn(1, 32, generator=torch.Generator().manual_seed(2), dtype=dtype).repeat(n, 1)
    loss = make_loss()
    value, g1, g2 = _loss_and_grads(loss, z, z.clone())
    assert torch.isfinite(value)
    assert torch.isfinite(g1).all() and torch.isfinite(g2).all()
    # Every cosine is 1: InfoNCE -> log N; Focal -> log(1 + (N-1) e^{m/tau}) (positive 1/tau, negatives (1+m)/tau).
    m = getattr(loss, "m", None)
    want = math.log(n) if m is None else m / 0.01 + math.log(math.exp(-m / 0.01) + (n - 1))
    rel = 1e-5 if dtype == torch.float32 else 1e-9
    assert value.item() == pytest.approx(want, rel=rel)


@pytest.mark.parametrize("make_loss", LOSSES_SMALL_TAU)
def test_large_norm_inputs_finite(make_loss) -> None:
    gen = torch.Generator().manual_seed(3)
    z1 = 1e4 * torch.randn(16, 32, generator=gen)
    z2 = 1e4 * torch.randn(16, 32, generator=gen)
    loss = make_loss()
    for a, b in ((z1, z2), (z1, z1.clone())):
        value, g1, g2 = _loss_and_grads(loss, a, b)
        assert torch.isfinite(value)
        assert torch.isfinite(g1).all() and torch.isfinite(g2).all()
    # Same value as the unit-scale inputs (the loss normalises).
    assert loss(z1, z2).item() == pytest.approx(loss(z1 / 1e4, z2 / 1e4).item(), rel=1e-4)


# --------------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loss",
    [InfoNCE(0.05), InfoNCE(1.0), FocalInfoNCE(0.05, 0.3), FocalInfoNCE(0.1, 0.0), FocalInfoNCE(1.0, 0.5)],
    ids=repr,
)
def test_gradcheck(loss: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(4)
    z1 = torch.randn(4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(loss, (z1, z2), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("m", MARGINS)
@pytest.mark.parametrize("tau", [0.05, 0.1, 1.0])
@pytest.mark.parametrize("n", [2, 5])
def test_focal_gradient_matches_eq5(n: int, tau: float, m: float) -> None:
    """dl_i/ds_ii = (2 s_ii/tau)(e^{s_ii^2/tau}/Z_i - 1); dl_i/ds_ij = (e^{s_ij(s_ij+m)/tau}/Z_i)(2 s_ij + m)/tau."""
    gen = torch.Generator().manual_seed(5)
    sim = (torch.rand(n, n, generator=gen, dtype=torch.float64) * 1.98 - 0.99).requires_grad_(True)
    s = sim.detach().tolist()
    for i in range(n):
        logits = focal_logits(sim, tau, m)
        loss_i = F.cross_entropy(logits[i : i + 1], torch.tensor([i]))
        (grad,) = torch.autograd.grad(loss_i, sim)

        z_i = math.exp(s[i][i] ** 2 / tau) + sum(
            math.exp(s[i][j] * (s[i][j] + m) / tau) for j in range(n) if j != i
        )
        want_row = []
        for j in range(n):
            if j == i:
                want_row.append((2 * s[i][i] / tau) * (math.exp(s[i][i] ** 2 / tau) / z_i - 1))
            else:
                want_row.append(math.exp(s[i][j] * (s[i][j] + m) / tau) / z_i * (2 * s[i][j] + m) / tau)
        torch.testing.assert_close(
            grad[i], torch.tensor(want_row, dtype=torch.float64), rtol=1e-10, atol=1e-12
        )
        other_rows = torch.cat([grad[:i], grad[i + 1 :]])
        assert torch.count_nonzero(other_rows) == 0


# --------------------------------------------------------------------------------------------------
# Errors and construction
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [0.0, -0.05, float("nan")])
def test_nonpositive_temperature_raises(tau: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        InfoNCE(tau)
    with pytest.raises(ValueError, match="temperature"):
        FocalInfoNCE(tau, 0.3)


@pytest.mark.parametrize("m", [-0.1, -1e-9, float("nan")])
def test_negative_margin_raises(m: float) -> None:
    with pytest.raises(ValueError, match="m must be"):
        FocalInfoNCE(0.05, m)


@pytest.mark.parametrize(
    ("shape1", "shape2"),
    [((4, 8), (4, 9)), ((4, 8), (5, 8)), ((5, 8), (4, 8)), ((8,), (8,)), ((2, 4, 8), (2, 4, 8))],
)
@pytest.mark.parametrize("loss", [InfoNCE(0.05), FocalInfoNCE(0.05, 0.3)], ids=["infonce", "focal"])
def test_mismatched_shapes_raise(loss: torch.nn.Module, shape1: tuple, shape2: tuple) -> None:
    with pytest.raises(ValueError):
        loss(torch.randn(*shape1), torch.randn(*shape2))


def test_build_loss() -> None:
    assert type(build_loss("infonce", 0.05)) is InfoNCE
    focal = build_loss("focal_infonce", 0.07, m=0.2)
    assert type(focal) is FocalInfoNCE
    assert (focal.temperature, focal.m) == (0.07, 0.2)
    with pytest.raises(ValueError) as excinfo:
        build_loss("nope", 0.05)
    message = str(excinfo.value)
    assert "nope" in message
    for name in loss_names():
        assert name in message


# --------------------------------------------------------------------------------------------------
# fp32 loss math under mixed precision (SimCSE's cosine similarity runs in fp32 under autocast)
# --------------------------------------------------------------------------------------------------

# HCL's defaults debias (tau_plus 0.1, the clamped N_g); without debiasing it takes its other branch
# (a cross-entropy): both branches are checked.
EXTRA_HYPER = {"hcl": [{}, {"tau_plus": 0.0}]}


def _registered_losses() -> list:
    return [
        pytest.param(name, hyper, id=name + "".join(f"-{k}{v}" for k, v in hyper.items()))
        for name in loss_names()
        for hyper in EXTRA_HYPER.get(name, [{}])
    ]


def _bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _two_views(n: int = 16, d: int = 32, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """Two correlated views: positives' cosine ~0.55, negatives' ~0 +- 0.18, losses 0.2-0.6 at tau 0.05
    (closer views give losses ~1e-5, where the comparison would say little)."""
    gen = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=gen)
    return z1, z1 + 1.5 * torch.randn(n, d, generator=gen)


def _assert_rel(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-6) -> None:
    # relative to the tensor's scale: elements near 0 have no meaningful relative error
    torch.testing.assert_close(got, want, rtol=rel, atol=rel * float(want.abs().max()))


@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16], ids=["fp32-leaves", "bf16-tensors"])
@pytest.mark.parametrize(("name", "hyper"), _registered_losses())
def test_loss_math_is_fp32_under_bf16_autocast(name: str, hyper: dict, input_dtype: torch.dtype) -> None:
    """Inside bf16 autocast every registered loss gives the value and the gradients of the same loss
    computed in fp32 outside autocast (on the same input values), to 1e-6."""
    loss = build_loss(name, 0.05, **hyper)
    v1, v2 = (v.to(input_dtype) for v in _two_views())
    # reference: fp32 leaves holding the inputs' values, no autocast
    r1, r2 = (v.detach().float().clone().requires_grad_() for v in (v1, v2))
    want = loss(r1, r2)
    want.backward()
    z1, z2 = (v.detach().clone().requires_grad_() for v in (v1, v2))
    with _bf16_autocast():
        got = loss(z1, z2)
    got.backward()  # outside autocast, as the training step does
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    for g, r in ((z1.grad, r1.grad), (z2.grad, r2.grad)):
        assert g.dtype == input_dtype
        # a bf16 input gets its gradient in bf16: the fp32 gradient, rounded once
        _assert_rel(g.float(), r.to(input_dtype).float())


@pytest.mark.parametrize(("name", "hyper"), _registered_losses())
def test_global_batch_path_is_fp32_under_bf16_autocast(name: str, hyper: dict) -> None:
    """The DDP path (``cosine_matrix`` of the local rows against the gathered columns, then
    ``loss_from_sim`` with an offset) is fp32 under autocast too, also for a bf16 cosine matrix."""
    from focalcse.core.losses.base import cosine_matrix

    loss = build_loss(name, 0.05, **hyper)
    z1, z2 = _two_views(n=10)
    rows, cols, offset = z1[3:7], z2, 3  # rank 1 of a 10-sentence global batch: local rows 3..6
    r1, r2 = rows.clone().requires_grad_(), cols.clone().requires_grad_()
    want = loss.loss_from_sim(cosine_matrix(r1, r2), positive_offset=offset)
    want.backward()
    g1, g2 = rows.clone().requires_grad_(), cols.clone().requires_grad_()
    with _bf16_autocast():
        sim = cosine_matrix(g1, g2)  # (4, 10)
        got = loss.loss_from_sim(sim, positive_offset=offset)
    got.backward()
    assert sim.dtype == got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    _assert_rel(g1.grad, r1.grad)
    _assert_rel(g2.grad, r2.grad)
    sim_bf16 = cosine_matrix(rows, cols).bfloat16()  # e.g. from a caller that cast it
    with _bf16_autocast():
        got = loss.loss_from_sim(sim_bf16, positive_offset=offset)
    want = loss.loss_from_sim(sim_bf16.float(), positive_offset=offset)
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want.item(), rel=1e-6)
