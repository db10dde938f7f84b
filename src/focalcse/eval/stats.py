"""Statistics over seeds: pure functions on arrays (scipy underneath), no I/O: summaries, the paired
t-test and its power (the smallest difference n seeds detect, the seeds a difference needs), the
Holm–Bonferroni adjustment of a family of p-values, and value ranges."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import integrate, optimize, special
from scipy import stats as sps

POWER = 0.8  # the conventional target power of the detectable-difference and seeds-needed figures


@dataclass(frozen=True)
class Summary:
    mean: float
    std: float  # sample standard deviation (ddof=1); 0.0 for a single value
    n: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class PairedTest:
    """Paired t-test of ``treatment - baseline`` over matched seeds."""

    statistic: float
    p_value: float
    mean_diff: float  # mean of treatment - baseline
    ci_low: float  # 95% (1 - alpha) confidence interval of the mean difference
    ci_high: float
    n: int
    alpha: float
    significant: bool

    def to_dict(self) -> dict[str, float | bool | int]:
        return asdict(self)


@dataclass(frozen=True)
class Span:
    """The range of a set of values (e.g. one score over seeds)."""

    low: float
    high: float
    n: int

    @property
    def width(self) -> float:
        return self.high - self.low


def span(values: Sequence[float]) -> Span:
    """min, max and count of ``values``."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("span needs at least one value")
    return Span(float(x.min()), float(x.max()), int(x.size))


def summarize(values: Sequence[float]) -> Summary:
    """Mean and sample std (ddof=1) of per-seed values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summarize needs at least one value")
    std = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    return Summary(float(np.mean(x)), std, int(x.size))


def paired_ttest(treatment: Sequence[float], baseline: Sequence[float], alpha: float = 0.05) -> PairedTest:
    """Two-sided paired t-test (``scipy.stats.ttest_rel``) and the (1 - alpha) CI of the mean difference.

    ``treatment[i]`` and ``baseline[i]`` must come from the same seed. With fewer than two pairs, or
    all differences zero, the statistic and p-value are NaN; equal non-zero differences (zero variance)
    give t = ±inf and p = 0, as scipy returns them.
    """
    a, b = np.asarray(treatment, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be 1-D and of equal length, got {a.shape} and {b.shape}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n = int(a.size)
    diff = a - b
    mean_diff = float(diff.mean()) if n else math.nan
    if n < 2:
        return PairedTest(math.nan, math.nan, mean_diff, math.nan, math.nan, n, alpha, False)
    res = sps.ttest_rel(a, b)
    ci = res.confidence_interval(confidence_level=1 - alpha)
    p = float(res.pvalue)
    return PairedTest(
        float(res.statistic), p, mean_diff, float(ci.low), float(ci.high), n, alpha, bool(p < alpha)
    )


def paired_power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test (``ttest_rel``) at level ``alpha`` with ``n`` pairs whose
    true mean difference is ``effect`` paired standard deviations (Cohen's d_z).

    The statistic T = mean(d) / (sd(d) / sqrt(n)) follows a noncentral t with n - 1 degrees of
    freedom and noncentrality ``effect`` * sqrt(n) when the differences are normal, so
    power = P(T > t_crit) + P(T < -t_crit), t_crit = t_{1 - alpha/2, n - 1}. NaN for n < 2.
    """
    if n < 2 or not math.isfinite(effect):
        return math.nan
    df, nc = n - 1, abs(effect) * math.sqrt(n)
    crit = float(sps.t.ppf(1 - alpha / 2, df))
    value = float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))
    if math.isfinite(value):
        return value

    return _power_integral(crit, df, nc)


def _power_integral(crit: float, df: int, nc: float) -> float:
    """P(|T| > crit) for T noncentral t(df, nc), as the integral over V ~ chi2(df) of
    P(|Z + nc| > crit * sqrt(V / df)), Z standard normal: what :func:`paired_power` uses where scipy's
    nct gives NaN, far in its tail (e.g. df = 1, nc > ~8). The integrand uses the normal CDF ufunc and
    the chi2 density written out (log form), not the distribution objects: the root finding of
    :func:`detectable_difference` evaluates it thousands of times."""
    half = df / 2
    log_norm = half * math.log(2.0) + math.lgamma(half)

    def given(v: float) -> float:
        if v <= 0.0:  # a single point: no mass
            return 0.0
        s = math.sqrt(v / df)
        tails = float(special.ndtr(nc - crit * s) + special.ndtr(-crit * s - nc))
        return tails * math.exp((half - 1) * math.log(v) - v / 2 - log_norm)

    return float(min(1.0, integrate.quad(given, 0, math.inf, limit=200)[0]))


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest true mean difference that the paired t-test over ``n`` pairs detects with
    probability ``power`` at level ``alpha`` when the paired differences have standard deviation
    ``sd``: d* x sd, where d* solves :func:`paired_power` (d*, n, alpha) = power (root finding).
    0 when sd is 0; NaN for n < 2 or a non-finite sd."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    high = 1.0
    while paired_power(high, n, alpha) < power:  # bracket the root; power rises with the effect
        high *= 2
    effect = optimize.brentq(lambda d: paired_power(d, n, alpha) - power, 0.0, high, xtol=1e-12)
    return float(effect * sd)


def seeds_needed(
    difference: float, sd: float, alpha: float = 0.05, power: float = POWER, max_n: int = 1_000_000
) -> int | None:
    """The fewest pairs (seeds) with which the paired t-test detects a true mean difference
    ``difference`` with probability ``power`` at level ``alpha`` when the paired differences have
    standard deviation ``sd`` (:func:`paired_power` >= power). 2 when sd is 0 and the difference is
    not; None for a zero difference, a non-finite input, or more than ``max_n``."""
    if not (math.isfinite(difference) and math.isfinite(sd)) or difference == 0:
        return None
    if sd == 0:
        return 2
    effect = abs(difference) / sd
    if paired_power(effect, max_n, alpha) < power:
        return None
    low, high = 1, 2  # power(low) < power <= power(high), power rising with n
    while paired_power(effect, high, alpha) < power:
        low, high = high, min(2 * high, max_n)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if paired_power(effect, mid, alpha) >= power else (mid, high)
    return high


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values of one family of tests, in the input order.

    With the m defined p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value is
    p̃_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); rejecting where p̃ < alpha controls the
    family-wise error rate at alpha (Holm, 1979). Tied p-values get the same adjusted value. NaN
    entries (an undefined test) stay NaN and are not counted in m, as R's ``p.adjust`` does.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"holm needs a 1-D family of p-values, got shape {p.shape}")
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p[(p < 0) | (p > 1)].tolist()}")
    out = np.full_like(p, np.nan)
    defined = np.flatnonzero(~np.isnan(p))  # indices of the m tests that count
    m = defined.size
    if m == 0:
        return out
    order = defined[np.argsort(p[defined], kind="stable")]  # (m,) ascending p
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])  # (m - j + 1) p_(j), j = 1..m
    out[order] = np.maximum.accumulate(scaled)
    return out
