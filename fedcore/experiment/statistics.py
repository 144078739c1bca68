"""Statistics across seeds: mean, standard deviation and a 95% interval per setting, and paired tests.

Seeds pair the runs: seed ``s`` of two settings shares the data split, the initial model and every
random stream that does not depend on the setting, so a setting is compared with the baseline by the
per-seed differences (paired t test and Wilcoxon signed-rank test, from :mod:`scipy.stats`), not by
two independent means.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import math
import warnings

import attrs


@attrs.frozen(kw_only=True)
class Spread:
    """``n`` values: mean, sample standard deviation (ddof = 1) and the 95% t interval of the mean."""

    n: int
    mean: float
    std: float | None
    low: float | None
    high: float | None


@attrs.frozen(kw_only=True)
class Paired:
    """A setting minus the baseline over the seeds both have: the mean difference and two tests' p-values.

    ``t_p`` is None when the differences do not vary beyond rounding (the t statistic is undefined);
    ``wilcoxon_p`` is 1.0 when every difference is zero; both are None with fewer than two pairs."""

    n: int
    mean_diff: float
    t: float | None
    t_p: float | None
    wilcoxon_p: float | None


def spread(values: Sequence[float]) -> Spread:
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("spread of no values")
    mean = math.fsum(values) / n
    if n == 1:
        return Spread(n=1, mean=mean, std=None, low=None, high=None)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return Spread(n=n, mean=mean, std=std, low=mean - half, high=mean + half)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def paired(baseline: Mapping[int, float], other: Mapping[int, float]) -> Paired | None:
    """``other - baseline`` over the seeds both have; None when they share no seed."""
    from scipy import stats

    seeds = sorted(set(baseline) & set(other))
    if not seeds:
        return None
    a = [float(baseline[s]) for s in seeds]
    b = [float(other[s]) for s in seeds]
    diffs = [y - x for x, y in zip(a, b)]
    mean_diff = math.fsum(diffs) / len(diffs)
    t = t_p = w_p = None
    if len(seeds) >= 2:
        if max(diffs) - min(diffs) > 1e-12 * max(1.0, abs(mean_diff)):  # equal up to rounding: t is undefined
            result = stats.ttest_rel(b, a)
            t, t_p = _finite(result.statistic), _finite(result.pvalue)
        if all(d == 0 for d in diffs):
            w_p = 1.0
        else:
            with warnings.catch_warnings():  # scipy warns that small samples get the exact distribution
                warnings.simplefilter("ignore")
                w_p = _finite(stats.wilcoxon(b, a).pvalue)
    return Paired(n=len(seeds), mean_diff=mean_diff, t=t, t_p=t_p, wilcoxon_p=w_p)


__all__ = ["Paired", "Spread", "paired", "spread"]
