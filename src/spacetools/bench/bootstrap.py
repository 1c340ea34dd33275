"""Percentile bootstrap intervals: how sure a score is, from the units it was measured on.

One home for every interval the project prints: a run's scores over its samples
(:mod:`spacetools.bench.summary`), the paired difference of two runs (:mod:`spacetools.bench.compare`)
and the reward gain of RL (:mod:`spacetools.train.gains`). Each draws from a generator seeded by the
caller, so the same figures give the same interval on every run. A proportion (a benchmark scored 0 or
1 per sample) gets its Wilson interval instead (:func:`wilson_interval`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000
SEED = 0

Interval = tuple[float, float]


def resample_indices(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, n)`` indices into ``n`` units, drawn with replacement."""
    return rng.integers(0, n, size=(resamples, n))


def percentile_interval(draws: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The central ``confidence`` share of ``draws``."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.asarray(draws, dtype=float), [tail, 1 - tail])
    return float(low), float(high)


def difference_of_means(
    first: np.ndarray,
    second: np.ndarray,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The interval of ``mean(second) - mean(first)`` for two independent groups, each resampled on its own."""
    rng = np.random.default_rng(seed)
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    first_means = first[resample_indices(first.size, resamples, rng)].mean(axis=1)
    second_means = second[resample_indices(second.size, resamples, rng)].mean(axis=1)
    return percentile_interval(second_means - first_means, confidence)


def statistic_intervals(
    n: int,
    statistic: Callable[[np.ndarray], Mapping[str, float]],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Interval]:
    """The interval of every figure ``statistic`` returns, recomputed on resamples of ``n`` units.

    ``statistic`` takes the indices of one resample (units may repeat) and returns named figures; a
    figure a resample cannot give (a benchmark part none of its units belong to) is left out of that
    resample, and its interval is taken over the resamples that give it. No units, no intervals.
    """
    if n < 1:
        return {}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for indices in resample_indices(n, resamples, rng):
        for name, value in statistic(indices).items():
            draws.setdefault(name, []).append(float(value))
    return {name: percentile_interval(np.asarray(values), confidence) for name, values in draws.items()}


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The Wilson score interval of a proportion (``successes`` of ``n``): unlike a bootstrap over 0/1
    units, it is not a point when every unit agrees (20 of 20 gives [0.84, 1], not [1, 1])."""
    from scipy.stats import binomtest

    if n < 1:
        return (0.0, 1.0)
    interval = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


def crosses_zero(interval: Interval) -> bool:
    """Whether ``interval`` holds 0: the difference it bounds is not significant at its confidence."""
    low, high = interval
    return low <= 0.0 <= high
