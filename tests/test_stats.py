"""summarize, span, paired_ttest and holm against hand formulas, textbook examples and a brute-force
Holm written from its definition; the significance document's Holm values against holm()."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from focalcse.eval.significance import significance
from focalcse.eval.stats import holm, paired_ttest, span, summarize

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


# --------------------------------------------------------------------------------------------------
# span
# --------------------------------------------------------------------------------------------------


def test_span_is_min_max_and_width() -> None:
    r = span([76.4, 75.9, 76.48])
    assert (r.low, r.high, r.n) == (75.9, 76.48, 3) and r.width == pytest.approx(0.58)
    assert span([1.0]).width == 0.0
    with pytest.raises(ValueError):
        span([])


# --------------------------------------------------------------------------------------------------
# holm: against the definition, by brute force
# --------------------------------------------------------------------------------------------------


def brute_holm(p: list[float]) -> list[float]:
    """From the definition: with the m defined p sorted ascending, adjusted p_(i) =
    max_{j <= i} min(1, (m - j + 1) p_(j)); NaN stays NaN and is not counted. Written with loops over
    every (i, j) pair, independent of the vectorised implementation (tied p-values come out equal
    whatever their order: the later one's extra term (m - j + 1) p is smaller)."""
    defined = [i for i, x in enumerate(p) if not math.isnan(x)]
    m = len(defined)
    ranked = sorted(defined, key=lambda i: p[i])  # ranked[k] is the index of p_(k+1)
    out = [math.nan] * len(p)
    for pos_i, idx in enumerate(ranked, start=1):
        out[idx] = max(min(1.0, (m - j + 1) * p[ranked[j - 1]]) for j in range(1, pos_i + 1))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_holm_matches_the_definition_on_random_families(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    p = rng.random(m) ** 3  # many small p-values, so the cap at 1 and the running max both matter
    if seed % 3 == 0:  # ties
        p[rng.integers(0, m, size=m // 2 + 1)] = p[0]
    if seed % 4 == 1:  # exact values that stress rounding: 0, 1 and repeated round numbers
        p[: min(m, 3)] = [0.0, 1.0, 0.01][: min(m, 3)]
    if seed % 5 == 2 and m > 1:  # an undefined test
        p[int(rng.integers(0, m))] = np.nan
    got = holm(p.tolist())
    want = brute_holm(p.tolist())
    assert np.allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)
    # monotone in p, never below p, at most 1
    ok = ~np.isnan(p)
    assert np.all(got[ok] >= p[ok] - 1e-15) and np.all(got[ok] <= 1.0)
    order = np.argsort(p[ok], kind="stable")
    assert np.all(np.diff(got[ok][order]) >= -1e-15)


def test_holm_hand_worked_example() -> None:
    # p = (0.01, 0.04, 0.03, 0.005), m = 4. Sorted: 0.005, 0.01, 0.03, 0.04.
    #   0.005 * 4 = 0.02; 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04 -> running max 0.06.
    # At alpha 0.05 raw p rejects all four, Holm only the first two.
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert (got < 0.05).tolist() == [True, False, False, True]
    # the cap at 1 and a tie: (0.3, 0.3, 0.9): 0.9, max(0.9, 0.6) = 0.9, min(1, 0.9) -> 0.9
    assert holm([0.3, 0.9, 0.3]).tolist() == pytest.approx([0.9, 0.9, 0.9])
    assert holm([0.6, 0.7]).tolist() == [1.0, 1.0]
    # NaN (an undefined test) is kept and not counted: m = 2 here
    got = holm([float("nan"), 0.02, 0.04])
    assert math.isnan(got[0]) and got[1:].tolist() == pytest.approx([0.04, 0.04])
    assert holm([]).size == 0 and math.isnan(holm([float("nan")])[0])


@pytest.mark.parametrize("bad", [[0.5, 1.5], [-0.1], [[0.1, 0.2]]])
def test_holm_refuses_values_that_are_not_a_family_of_p_values(bad) -> None:
    with pytest.raises(ValueError):
        holm(bad)


def test_significance_holm_values_are_holm_of_each_familys_raw_p() -> None:
    """significance(): per backbone and treatment loss, p_holm over (tasks + avg) is holm() of their
    raw p-values; alignment / uniformity are a family of their own; the decisions follow alpha."""
    rng = np.random.default_rng(7)
    tasks = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
    runs = []
    for backbone in ("a", "b"):
        for loss, shift in (("infonce", 0.0), ("focal_infonce", 0.6), ("hcl", -0.3)):
            for seed in (1, 2, 3, 4):
                scores = {
                    t: 75 + shift * (i + 1) / 4 + 0.3 * rng.standard_normal() for i, t in enumerate(tasks)
                }
                scores["avg"] = float(np.mean(list(scores.values())))
                runs.append({**scores, "alignment": 0.2 + 0.01 * rng.random(), "uniformity": -2.0,
                             "wmean": {"avg": 74.0},
                             "meta": {"backbone": backbone, "loss": loss, "seed": seed}})  # fmt: skip
    doc = significance(
        runs, ["a", "b"], ["infonce", "focal_infonce", "hcl"], [1, 2, 3, 4], tasks, "infonce", 0.05
    )
    family = [*tasks, "avg"]
    assert doc["holm_family"] == family and len(family) == 8
    decisions = set()
    for backbone in ("a", "b"):
        for loss in ("focal_infonce", "hcl"):
            tests = doc["backbones"][backbone]["ttest"][loss]
            raw = [tests[k]["p_value"] for k in family]
            assert [tests[k]["p_holm"] for k in family] == pytest.approx(brute_holm(raw), rel=1e-12)
            assert [tests[k]["p_holm"] for k in family] == pytest.approx(holm(raw).tolist(), rel=1e-12)
            for k in family:
                assert tests[k]["significant_holm"] == (tests[k]["p_holm"] < 0.05)
                decisions.add((tests[k]["significant"], tests[k]["significant_holm"]))
            # alignment / uniformity: their own family of two; uniformity is constant here (its test
            # undefined, NaN), so the family counts one test and alignment keeps its raw p
            assert doc["holm_family_geometry"] == ["alignment", "uniformity"]
            assert math.isnan(tests["uniformity"]["p_value"]) and math.isnan(tests["uniformity"]["p_holm"])
            assert tests["alignment"]["p_holm"] == tests["alignment"]["p_value"]
    assert (True, False) in decisions  # some raw-significant test that Holm does not keep


# ---------------------------------------------------------------- power of the paired t-test
def test_paired_power_matches_scipys_monte_carlo_power_of_ttest_rel() -> None:
    """The noncentral-t formula against scipy.stats.power: ttest_rel's rejection rate on simulated
    normal paired differences (fixed seed; 20 000 resamples give a standard error <= 0.0036)."""
    from focalcse.eval.stats import paired_power

    rng = np.random.default_rng(7)
    # (8.0, 2): where scipy's nct gives NaN and paired_power integrates instead
    for effect, n in ((0.0, 3), (1.0, 3), (2.5, 3), (0.8, 5), (0.5, 12), (8.0, 2)):
        result = sps.power(
            lambda x, y, axis=-1: sps.ttest_rel(x, y, axis=axis).pvalue,  # vectorized: all resamples at once
            (lambda size, mu=effect: rng.normal(mu, 1.0, size), lambda size: np.zeros(size)),
            (n, n),
            significance=0.05,
            n_resamples=20_000,
            vectorized=True,
        )
        assert paired_power(effect, n) == pytest.approx(float(result.power), abs=0.015), (effect, n)


def test_the_power_integral_equals_scipys_noncentral_t_where_that_is_defined() -> None:
    """The fallback integral (chi2 density written out, the normal CDF ufunc) against boost's
    noncentral t in scipy, over the degrees of freedom and noncentralities where scipy gives a number."""
    from focalcse.eval.stats import _power_integral

    checked = 0
    for df in (1, 2, 3, 5, 9, 29):
        crit = float(sps.t.ppf(0.975, df))
        for nc in (0.0, 0.5, 2.0, 5.0, 7.5, 12.0):
            expected = float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))
            if math.isfinite(expected):
                assert _power_integral(crit, df, nc) == pytest.approx(expected, abs=1e-9), (df, nc)
                checked += 1
    assert checked >= 30


def test_detectable_difference_and_seeds_needed_invert_the_power() -> None:
    from focalcse.eval.stats import detectable_difference, paired_power, seeds_needed

    for n in (2, 3, 5, 10, 40):
        mdd = detectable_difference(0.4, n)
        assert paired_power(mdd / 0.4, n) == pytest.approx(0.8, abs=1e-9)
        assert paired_power(0.99 * mdd / 0.4, n) < 0.8  # the smallest such difference
    assert detectable_difference(1.0, 10) / 1.0 < detectable_difference(1.0, 5)  # more seeds, less
    # Cohen's d_z = 1 and 0.5 at alpha 0.05, 80 % power: 10 and 34 pairs (G*Power's paired t-test)
    assert (seeds_needed(1.0, 1.0), seeds_needed(0.5, 1.0), seeds_needed(-0.5, 1.0)) == (10, 34, 34)
    for diff, sd in ((1.64, 0.5), (0.3, 0.4), (0.11, 0.033)):
        n = seeds_needed(diff, sd)
        assert paired_power(diff / sd, n) >= 0.8 > paired_power(diff / sd, n - 1) or n == 2
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(1.0, 0.0) == 2
    assert detectable_difference(0.0, 3) == 0.0 and math.isnan(detectable_difference(1.0, 1))


def test_significance_tests_carry_spread_and_detectable_difference() -> None:
    from focalcse.eval.significance import compare
    from focalcse.eval.stats import detectable_difference

    treat = {1: {"avg": 77.3}, 2: {"avg": 77.0}, 3: {"avg": 77.5}}
    base = {1: {"avg": 76.2}, 2: {"avg": 76.3}, 3: {"avg": 76.4}}
    _, tests = compare(treat, base, ["avg"], 0.05)
    diffs = [1.1, 0.7, 1.1]
    assert tests["avg"]["sd_diff"] == pytest.approx(np.std(diffs, ddof=1))
    assert tests["avg"]["mdd_80"] == pytest.approx(detectable_difference(np.std(diffs, ddof=1), 3))
    _, single = compare({1: {"avg": 1.0}}, {1: {"avg": 0.0}}, ["avg"], 0.05)
    assert math.isnan(single["avg"]["sd_diff"]) and math.isnan(single["avg"]["mdd_80"])
