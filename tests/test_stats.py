"""summarize and paired_ttest against hand formulas and a textbook example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from focalcse.eval.stats import paired_ttest, summarize

# --------------------------------------------------------------------------------------------------
# Hand formulas (no numpy std, no ttest_rel)
# --------------------------------------------------------------------------------------------------


def hand_mean(x: list[float]) -> float:
    return sum(x) / len(x)


def hand_sample_std(x: list[float]) -> float:
    mu = hand_mean(x)
    return math.sqrt(sum((v - mu) ** 2 for v in x) / (len(x) - 1))


def hand_paired(treatment: list[float], baseline: list[float], alpha: float) -> dict[str, float]:
    """t = mean(d) / (sd(d)/sqrt(n)); p = 2 t.sf(|t|, n-1); CI = mean(d) +- t.ppf(1-alpha/2, n-1) sd/sqrt(n)."""
    d = [a - b for a, b in zip(treatment, baseline)]
    n = len(d)
    mean_d = hand_mean(d)
    se = hand_sample_std(d) / math.sqrt(n)
    t = mean_d / se
    p = 2 * sps.t.sf(abs(t), n - 1)
    half_width = sps.t.ppf(1 - alpha / 2, n - 1) * se
    return {"t": t, "p": p, "mean": mean_d, "low": mean_d - half_width, "high": mean_d + half_width}


# --------------------------------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 10])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summarize_matches_hand_formula(n: int, seed: int) -> None:
    x = (76 + 2 * np.random.default_rng(seed).standard_normal(n)).tolist()
    s = summarize(x)
    assert s.n == n
    assert s.mean == pytest.approx(hand_mean(x), rel=1e-12)
    assert s.std == pytest.approx(hand_sample_std(x), rel=1e-10)


def test_summarize_textbook_example() -> None:
    # Mean 5; squared deviations sum to 32, so the sample std is sqrt(32/7) (population std would be 2).
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9])
    assert s.mean == 5.0
    assert s.std == pytest.approx(math.sqrt(32 / 7), rel=1e-12)
    assert s.std == pytest.approx(2.138090, abs=1e-6)
    assert s.to_dict() == {"mean": 5.0, "std": s.std, "n": 8}


def test_summarize_single_value_has_zero_std() -> None:
    s = summarize([77.3])
    assert (s.mean, s.std, s.n) == (77.3, 0.0, 1)


def test_summarize_empty_raises() -> None:
    with pytest.raises(ValueError):
        summarize([])


# --------------------------------------------------------------------------------------------------
# paired_ttest
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
@pytest.mark.parametrize("n", [2, 3, 5, 10])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_ttest_matches_hand_formula(n: int, seed: int, alpha: float) -> None:
    rng = np.random.default_rng(seed)
    baseline = (76 + 1.5 * rng.standard_normal(n)).tolist()
    treatment = [b + 0.8 + 0.7 * e for b, e in zip(baseline, rng.standard_normal(n))]
    got = paired_ttest(treatment, baseline, alpha=alpha)
    want = hand_paired(treatment, baseline, alpha)
    assert got.n == n
    assert got.alpha == alpha
    assert got.statistic == pytest.approx(want["t"], rel=1e-9)
    assert got.p_value == pytest.approx(want["p"], rel=1e-8, abs=1e-15)
    assert got.mean_diff == pytest.approx(want["mean"], rel=1e-12)
    assert got.ci_low == pytest.approx(want["low"], rel=1e-9, abs=1e-12)
    assert got.ci_high == pytest.approx(want["high"], rel=1e-9, abs=1e-12)
    assert got.significant is bool(want["p"] < alpha)
    # The CI excludes 0 exactly when the two-sided test rejects at the same alpha.
    assert got.significant == (got.ci_low > 0 or got.ci_high < 0)


def test_paired_ttest_textbook_example() -> None:
    # d = [1, 2, 1, 0, 3]: mean 1.4, sum of squared deviations 5.2, s^2 = 1.3, se = sqrt(1.3/5) = sqrt(0.26),
    # t = 1.4 / 0.509902 = 2.7456 on 4 df; table t_{0.975,4} = 2.776, t_{0.95,4} = 2.132,
    # so p is just above 0.05 (not significant at 5%, significant at 10%).
    treatment = [5.0, 7.0, 8.0, 6.0, 9.0]
    baseline = [4.0, 5.0, 7.0, 6.0, 6.0]
    res = paired_ttest(treatment, baseline)
    assert res.n == 5
    assert res.mean_diff == pytest.approx(1.4, rel=1e-12)
    assert res.statistic == pytest.approx(1.4 / math.sqrt(0.26), rel=1e-10)
    assert res.statistic == pytest.approx(2.745626, abs=1e-6)
    assert 0.05 < res.p_value < 0.06
    assert res.significant is False
    # 95% CI: 1.4 +- 2.776445 * 0.509902 = 1.4 +- 1.415716.
    assert res.ci_low == pytest.approx(1.4 - 2.776445 * math.sqrt(0.26), abs=1e-5)
    assert res.ci_high == pytest.approx(1.4 + 2.776445 * math.sqrt(0.26), abs=1e-5)
    assert res.ci_low < 0 < res.ci_high

    res10 = paired_ttest(treatment, baseline, alpha=0.10)
    assert res10.significant is True
    assert res10.p_value == pytest.approx(res.p_value, rel=1e-12)
    assert res10.ci_low == pytest.approx(1.4 - 2.131847 * math.sqrt(0.26), abs=1e-5)
    assert res10.ci_low > 0


def test_paired_ttest_is_antisymmetric() -> None:
    a, b = [78.1, 77.0, 79.4, 76.8], [76.5, 76.9, 77.2, 76.0]
    fwd, rev = paired_ttest(a, b), paired_ttest(b, a)
    assert rev.statistic == pytest.approx(-fwd.statistic)
    assert rev.p_value == pytest.approx(fwd.p_value)
    assert rev.mean_diff == pytest.approx(-fwd.mean_diff)
    assert (rev.ci_low, rev.ci_high) == pytest.approx((-fwd.ci_high, -fwd.ci_low))


@pytest.mark.parametrize(("treatment", "baseline"), [([], []), ([77.0], [76.0])])
def test_paired_ttest_fewer_than_two_pairs_is_nan(treatment: list[float], baseline: list[float]) -> None:
    res = paired_ttest(treatment, baseline)
    assert res.n == len(treatment)
    assert math.isnan(res.statistic) and math.isnan(res.p_value)
    assert math.isnan(res.ci_low) and math.isnan(res.ci_high)
    assert res.significant is False
    if treatment:
        assert res.mean_diff == pytest.approx(1.0)
    else:
        assert math.isnan(res.mean_diff)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_paired_ttest_zero_differences_is_nan_and_not_significant() -> None:
    x = [76.0, 77.5, 78.25]
    with np.errstate(all="ignore"):
        res = paired_ttest(x, list(x))
    assert math.isnan(res.statistic) and math.isnan(res.p_value)
    assert res.mean_diff == 0.0
    assert res.significant is False


@pytest.mark.parametrize(
    ("treatment", "baseline"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0]),
        ([1.0], [1.0, 2.0]),
        ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]]),
    ],
)
def test_paired_ttest_bad_shapes_raise(treatment, baseline) -> None:
    with pytest.raises(ValueError):
        paired_ttest(treatment, baseline)


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.05, 1.5, float("nan")])
def test_paired_ttest_alpha_out_of_range_raises(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        paired_ttest([1.0, 2.0, 3.0], [0.5, 1.0, 2.5], alpha=alpha)


def test_paired_ttest_to_dict() -> None:
    d = paired_ttest([5.0, 7.0, 8.0, 6.0, 9.0], [4.0, 5.0, 7.0, 6.0, 6.0]).to_dict()
    assert set(d) == {"statistic", "p_value", "mean_diff", "ci_low", "ci_high", "n", "alpha", "significant"}
    assert d["n"] == 5 and d["alpha"] == 0.05 and d["significant"] is False
