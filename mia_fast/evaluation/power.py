"""Power: the smallest effect a verdict could have seen at a run's sizes.

A negative verdict ("no method is above chance", "no sign that the split leaks") is true of the sample and says
little of the benchmark unless the sample could have seen the effect. With 100 + 100 texts, a method at AUROC 0.58
is called at chance more often than not. Every verdict therefore carries its **minimum detectable AUROC**: the
true AUROC at which its test, at its level (Holm-adjusted over the columns it is taken over), rejects with
probability ``POWER``.

For an AUROC test: the critical AUROC is ``z(1 - alpha)`` null standard deviations above chance, the null being the
permutation null of a fixed score column (the rank-sum null, standard deviation ``sqrt((m + n + 1) / (12 m n))``)
or the refitted null a blind baseline draws (whose mean, a little below 0.5 for a classifier scored out of fold, is
taken as its chance, and whose own ``1 - alpha`` quantile the threshold never falls below); the observed AUROC
under a true AUROC ``A`` spreads by Hanley and McNeil's (1982) standard error, widened by as much as the drawn
null is wider than the rank-sum null. ``A`` solves
``A - z(POWER) se(A) = critical``. A margin over another AUROC ``b`` (the
paired-bootstrap CI of the difference above 0) needs ``A - b`` above ``(z(1 - alpha) + z(POWER))`` times the
standard error of the difference, taken as if the two columns were independent (paired columns that agree have a
smaller one, so the figure errs high). For dataset inference's one-sided t-test, the standardised shift ``d`` it
detects at that power (the noncentral t), as the AUROC of two normal samples that far apart, ``Phi(d / sqrt 2)``.

Each figure is checked by simulation in the tests: at it, about ``POWER`` of 2,000 draws of the run's sizes are
detected by the report's own test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

POWER = 0.8


def _z(probability: float) -> float:
    from scipy.stats import norm  # noqa: PLC0415 (scipy: slow at start-up; only a verdict's power needs it)

    return float(norm.ppf(probability))


def rank_sum_null_sd(members: int, nonmembers: int) -> float:
    """The standard deviation of the AUROC of a fixed score column under shuffled labels (Mann-Whitney, no ties)."""
    return math.sqrt((members + nonmembers + 1) / (12 * members * nonmembers))


def hanley_mcneil_se(auroc: float, members: int, nonmembers: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUROC estimated from ``members`` and ``nonmembers``."""
    q1, q2 = auroc / (2 - auroc), 2 * auroc**2 / (1 + auroc)
    variance = (auroc * (1 - auroc) + (members - 1) * (q1 - auroc**2) + (nonmembers - 1) * (q2 - auroc**2)) / (
        members * nonmembers
    )
    return math.sqrt(max(variance, 0.0))


def _solve(excess: Callable[[float], float]) -> float | None:
    """The AUROC in [0.5, 1] where the increasing ``excess`` crosses 0; None where even AUROC 1 falls short."""
    low, high = 0.5, 1.0
    if excess(high) <= 0:
        return None
    if excess(low) >= 0:
        return low
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) < 0 else (low, middle)
    return high


def min_detectable_auroc(
    members: int,
    nonmembers: int,
    alpha: float,
    power: float = POWER,
    null: Sequence[float] | None = None,
    smallest_p: float = 0.0,
) -> float | None:
    """The true AUROC that a one-sided test at level ``alpha`` detects with probability ``power`` on ``members`` and
    ``nonmembers`` texts; ``null``: AUROCs drawn under the test's null (default: the rank-sum null, in closed form).

    A drawn null's threshold is the larger of ``z(1 - alpha)`` standard deviations and its own ``1 - alpha``
    quantile above its mean: on a few texts a refitted classifier separates some shuffles perfectly, and a null
    with more than ``alpha`` of its mass at AUROC 1 can detect nothing. Taken above the null's own mean (a refitted
    null sits a little below 0.5), the figure is in AUROC above chance; a drawn null tighter than the rank-sum one
    (tied scores) counts as the rank-sum one. None where none would be: even AUROC 1 falls short, the null does not
    vary (a column that scores every text alike sees nothing), or the smallest p-value the test can give,
    ``smallest_p`` (one over the shuffles plus one, or over the distinct labellings), is above ``alpha``."""
    if smallest_p > alpha:
        return None
    rank_sum = rank_sum_null_sd(members, nonmembers)
    excess = _z(1 - alpha) * rank_sum
    spread = 1.0
    if null is not None and len(null) >= 2:
        drawn = np.asarray(null, dtype=np.float64)
        quantile = float(np.quantile(drawn, 1 - alpha, method="higher"))
        if drawn.std() == 0 or quantile >= 1 - 1e-12:  # it never moves, or too often separates perfectly
            return None
        # A null tighter than the rank-sum one comes of tied scores (texts the column cannot tell apart), not of a
        # keener test: it never makes the figure smaller.
        spread = max(1.0, float(drawn.std(ddof=1)) / rank_sum)
        excess = max(excess * spread, quantile - drawn.mean())
    critical = 0.5 + excess
    z_power = _z(power)
    return _solve(lambda a: a - z_power * spread * hanley_mcneil_se(a, members, nonmembers) - critical)


def min_detectable_margin_auroc(
    baseline_auroc: float, members: int, nonmembers: int, alpha: float = 0.025, power: float = POWER
) -> float | None:
    """The true AUROC at which a column's margin over a column of ``baseline_auroc`` on the same texts shows (the
    difference's interval above 0, a one-sided ``alpha``) with probability ``power``, the two taken as independent.
    None where even AUROC 1 falls short."""
    z = _z(1 - alpha) + _z(power)
    baseline_se = hanley_mcneil_se(min(max(baseline_auroc, 0.5), 1.0), members, nonmembers)

    def excess(a: float) -> float:
        return a - baseline_auroc - z * math.hypot(hanley_mcneil_se(a, members, nonmembers), baseline_se)

    return _solve(excess)


def min_detectable_shift_auroc(first: int, second: int, alpha: float, power: float = POWER) -> float | None:
    """For a one-sided two-sample t-test on ``first`` and ``second`` values at level ``alpha``: the AUROC of two
    normal samples of equal variance (``Phi(d / sqrt 2)`` for a shift of ``d`` standard deviations) at which it
    rejects with probability ``power`` (the noncentral t, equal variances). None below 2 values per sample."""
    from scipy.optimize import brentq  # noqa: PLC0415 (scipy: slow at start-up; only a verdict's power needs it)
    from scipy.stats import nct, norm, t  # noqa: PLC0415 (scipy: as above)

    if min(first, second) < 2:
        return None
    df = first + second - 2
    critical = t.ppf(1 - alpha, df)
    scale = math.sqrt(first * second / (first + second))
    d = brentq(lambda shift: nct.sf(critical, df, shift * scale) - power, 0.0, 50.0)
    return float(norm.cdf(d / math.sqrt(2)))


def sizes_text(members: int, nonmembers: int) -> str:
    return f"{members:,} + {nonmembers:,} texts"
