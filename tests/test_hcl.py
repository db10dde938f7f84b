"""HCL (Robinson et al., 2021) against an independent float64 transcription of the reference code."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from focalcse.core.losses.hcl import HCL
from focalcse.losses import InfoNCE, build_loss, loss_spec


def reference_hcl(z1, z2, tau: float, beta: float, tau_plus: float, offset: int = 0) -> torch.Tensor:
    """joshr17/HCL image/main.py ``criterion`` (estimator "hard"), written out in float64 with SimCSE's
    negatives: row i (first view) against every second view but its own (column i + offset)."""
    a = F.normalize(z1.double(), dim=-1)
    b = F.normalize(z2.double(), dim=-1)
    sim = a @ b.T  # (n, m)
    n, m = sim.shape
    own = torch.zeros(n, m, dtype=torch.bool)
    own[torch.arange(n), torch.arange(n) + offset] = True
    neg = torch.exp(sim / tau).masked_select(~own).view(n, m - 1)
    pos = torch.exp(sim[own] / tau)
    q = m - 1  # the reference's N (2 * batch_size - 2 there; SimCSE's N - 1 negatives here)
    imp = (beta * neg.log()).exp()
    reweight_neg = (imp * neg).sum(dim=-1) / imp.mean(dim=-1)
    ng = (-tau_plus * q * pos + reweight_neg) / (1 - tau_plus)
    ng = torch.clamp(ng, min=q * math.e ** (-1 / tau))  # always, as the reference (main.py:47)
    return (-torch.log(pos / (pos + ng))).mean()


def _views(n: int = 12, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=g)
    return z1, z1 + 0.8 * torch.randn(n, d, generator=g)  # correlated views, like dropout noise


@pytest.mark.parametrize(
    ("tau", "beta", "tau_plus"),
    [
        (0.05, 0.1, 0.1),
        (0.05, 1.0, 0.0),
        (0.05, 0.5, 0.1),
        (0.1, 2.0, 0.0),
        (0.5, 1.0, 0.3),
        (0.05, 0.0, 0.1),
    ],
)
def test_value_and_gradient_match_the_reference(tau: float, beta: float, tau_plus: float) -> None:
    z1, z2 = _views()
    ours_in = [z.double().requires_grad_() for z in (z1, z2)]
    ref_in = [z.double().requires_grad_() for z in (z1, z2)]
    ours = HCL(tau, beta=beta, tau_plus=tau_plus)(*ours_in)
    ref = reference_hcl(*ref_in, tau, beta, tau_plus)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    ours.backward()
    ref.backward()
    for g_ours, g_ref in zip(ours_in, ref_in):
        torch.testing.assert_close(g_ours.grad, g_ref.grad, rtol=1e-8, atol=1e-12)
    # float32 inputs (the training path) agree to float32 precision
    torch.testing.assert_close(
        HCL(tau, beta=beta, tau_plus=tau_plus)(z1, z2).double(), ref.detach(), rtol=1e-4, atol=1e-5
    )


def test_the_clamp_binds_only_with_debiasing() -> None:
    # identical views: every positive is 1, so a large tau+ drives the debiased N_g below the floor
    z = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).double()
    tau, q = 0.5, 5
    floor = math.log(q) - 1 / tau
    ref = reference_hcl(z, z, tau, beta=1.0, tau_plus=0.9)
    ours = HCL(tau, beta=1.0, tau_plus=0.9)(z, z)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    # at the floor the loss is log(1 + Q e^{-1/tau} / e^{1/tau}) for each row
    torch.testing.assert_close(ours, torch.tensor(math.log1p(math.exp(floor - 1 / tau)), dtype=torch.float64))


def test_defaults_match_the_reference_with_the_clamp_binding_on_some_rows() -> None:
    # the defaults (beta 0.1, tau_plus 0.1 at tau 0.05) against a plain-torch float64 hand computation
    # of each row's loss, on views whose positives range from near-identical (the clamp binds) to far
    # apart (it does not), so both sides of max(., Q e^{-1/tau}) are exercised
    g = torch.Generator().manual_seed(0)
    n, d, tau, beta, tau_plus = 12, 16, 0.05, 0.1, 0.1
    z1 = torch.randn(n, d, generator=g, dtype=torch.float64)
    z2 = z1 + torch.linspace(0.05, 3.0, n, dtype=torch.float64)[:, None] * torch.randn(
        n, d, generator=g, dtype=torch.float64
    )
    loss = HCL(tau)
    assert (loss.beta, loss.tau_plus) == (beta, tau_plus)
    # by hand: rows of cosines, the positive on the diagonal, Q = n - 1 negatives per row
    sim = (z1 / z1.norm(dim=1, keepdim=True)) @ (z2 / z2.norm(dim=1, keepdim=True)).T
    per_row, clamped = [], []
    for i in range(n):
        s_p = sim[i, i]
        s_n = torch.cat([sim[i, :i], sim[i, i + 1 :]])
        q = n - 1
        w = torch.exp(beta * s_n / tau) / torch.exp(beta * s_n / tau).mean()
        ng = (-tau_plus * q * torch.exp(s_p / tau) + (w * torch.exp(s_n / tau)).sum()) / (1 - tau_plus)
        floor = q * math.exp(-1 / tau)
        clamped.append(bool(ng < floor))
        ng = max(ng, torch.tensor(floor, dtype=torch.float64))
        per_row.append(-torch.log(torch.exp(s_p / tau) / (torch.exp(s_p / tau) + ng)))
    assert any(clamped) and not all(clamped)
    torch.testing.assert_close(loss(z1, z2), torch.stack(per_row).mean(), rtol=1e-10, atol=1e-12)


def test_beta_zero_without_debiasing_is_infonce_exactly() -> None:
    for seed in range(3):
        z1, z2 = _views(seed=seed)
        a = [z.clone().requires_grad_() for z in (z1, z2)]
        b = [z.clone().requires_grad_() for z in (z1, z2)]
        hcl, infonce = HCL(0.05, beta=0.0, tau_plus=0.0)(*a), InfoNCE(0.05)(*b)
        assert torch.equal(hcl, infonce)
        hcl.backward()
        infonce.backward()
        assert all(torch.equal(x.grad, y.grad) for x, y in zip(a, b))


def test_global_batch_columns_with_an_offset() -> None:
    # a rank's rows against every rank's second views (the DDP path): positives at i + offset
    z1, z2 = _views(n=12)
    rows, offset = z1[4:8].double(), 4
    sim = F.normalize(rows, dim=-1) @ F.normalize(z2.double(), dim=-1).T  # (4, 12)
    ours = HCL(0.05, beta=1.0, tau_plus=0.1).loss_from_sim(sim, positive_offset=offset)
    torch.testing.assert_close(
        ours, reference_hcl(rows, z2, 0.05, 1.0, 0.1, offset=offset), rtol=1e-10, atol=1e-12
    )


def test_harder_negatives_weigh_more() -> None:
    # the weights grow with the similarity of a negative: beta > 0 raises the loss of a batch whose
    # negatives are uneven (a hard one among easy ones) above InfoNCE's
    z1, z2 = _views()
    for beta in (0.1, 1.0):
        assert HCL(0.05, beta=beta, tau_plus=0.0)(z1, z2) > InfoNCE(0.05)(z1, z2)


def test_registry_spec_and_validation() -> None:
    spec = loss_spec("hcl")
    # beta 0.1 keeps the reference's beta / tau = 1.0 / 0.5 at tau 0.05; tau_plus 0.1 is the reference's
    assert spec.defaults == {"beta": 0.1, "tau_plus": 0.1}
    assert (HCL().beta, HCL().tau_plus) == (0.1, 0.1)
    loss = build_loss("hcl", 0.05, beta=0.5, m=0.3)  # m belongs to another loss: ignored
    assert (loss.temperature, loss.beta, loss.tau_plus) == (0.05, 0.5, 0.1)
    with pytest.raises(ValueError, match="tau_plus"):
        HCL(0.05, tau_plus=1.0)
    with pytest.raises(ValueError, match="beta"):
        HCL(0.05, beta=-1.0)


def test_the_report_states_hcls_departures_with_the_items_values(tmp_path) -> None:
    """The hcl set's report lists what HCL does differently from joshr17/HCL, with the values the
    items train with (an edited beta shows in the sentence), and a set without HCL lists none."""
    import yaml

    from focalcse.config import load_params
    from focalcse.paramsets import compose_set
    from focalcse.report.recipe import recipe

    repo = Path(__file__).resolve().parents[1]
    lines = [d for d in recipe(load_params(repo / "params.yaml")).departures if "joshr17/HCL" in d]
    assert lines == []
    raw = compose_set(repo, "hcl")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    (line,) = [d for d in recipe(load_params(path)).departures if "joshr17/HCL" in d]
    assert line.startswith("HCL (Robinson et al.) against joshr17/HCL @7b4647f")
    assert "N - 1 per row" in line and "2N - 2" in line
    assert "beta = 0.1 at tau = 0.05" in line and "tau+ = 0.1" in line and "clamp" in line
    raw["loss_overrides"] = {**(raw.get("loss_overrides") or {}), "hcl": {"beta": 0.25}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    (line,) = [d for d in recipe(load_params(path)).departures if "joshr17/HCL" in d]
    assert "beta = 0.25 at tau = 0.05" in line


def test_a_loss_spec_with_departures_must_name_its_reference(tmp_path) -> None:
    from focalcse.core.losses import LossRegistryError, read_spec

    base = '"name": "x", "class": "X", "label": "X", "color": "#000000"'
    bad = tmp_path / "x.py"
    bad.write_text(f'SPEC = {{{base}, "departures": ["one"]}}\n')
    with pytest.raises(LossRegistryError, match="needs the 'reference'"):
        read_spec(bad, "x")
    bad.write_text(f'SPEC = {{{base}, "departure": ["one"]}}\n')
    with pytest.raises(LossRegistryError, match="unknown key"):
        read_spec(bad, "x")
    bad.write_text(f'SPEC = {{{base}, "reference": "r", "departures": "one"}}\n')
    with pytest.raises(LossRegistryError, match="list of sentences"):
        read_spec(bad, "x")
