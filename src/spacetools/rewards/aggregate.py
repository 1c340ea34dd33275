"""Benchmark-level metrics, as the paper reports them, from per-sample score dicts.

Each result starts with ``headline`` (the number the paper's tables show), then the benchmark's own
figures (percentages, see :mod:`spacetools.rewards.metrics`), ``n`` and ``parse_rate``.
"""

from __future__ import annotations

import numpy as np

from spacetools.rewards.benchmarks import BENCHMARK_GROUPS, BENCHMARKS
from spacetools.rewards.metrics import Aggregator, Rows, flag

#: Every key ``aggregate`` takes: the registered data sources and the groups of several.
BENCHMARK_KEYS: tuple[str, ...] = (*BENCHMARKS, *BENCHMARK_GROUPS)


def _aggregator(benchmark_key: str) -> Aggregator:
    if benchmark_key in BENCHMARK_GROUPS:
        return BENCHMARK_GROUPS[benchmark_key][1]
    if benchmark_key in BENCHMARKS:
        return BENCHMARKS[benchmark_key].aggregator
    raise ValueError(f"unknown benchmark {benchmark_key!r}; known: {', '.join(BENCHMARK_KEYS)}")


def aggregate(benchmark_key: str, rows: Rows) -> dict[str, float]:
    """The paper's metrics for one benchmark from its rows (the dicts ``compute_score`` returned).

    ``benchmark_key`` is a data source, or a group such as ``"refspatial"`` for the three RefSpatial
    splits together (then each row needs its ``data_source``). ValueError for an unknown key or no rows.
    """
    aggregator = _aggregator(benchmark_key)
    if not rows:
        raise ValueError(f"no rows to aggregate for benchmark {benchmark_key!r}")
    figures = aggregator(rows)
    parse_rate = 100.0 * float(np.mean([flag(row, "parse_ok") for row in rows]))
    return {"headline": figures.pop("headline"), **figures, "n": len(rows), "parse_rate": parse_rate}
