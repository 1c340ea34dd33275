"""What a tool's router counts: calls, errors, timeouts, restarts, recent latencies and histograms."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spacetools.kit.definition import ToolResult

__all__ = ["LATENCY_BUCKETS_S", "Histogram", "ToolStats", "percentiles_ms"]

_LATENCY_WINDOW = 10_000
#: The weight of the newest call in a tool's moving average of service time (about the last 20 calls).
_SERVICE_WEIGHT = 0.05
# Histogram bounds, seconds: from a vision op's millisecond to a model call's minute (Prometheus `le`).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class Histogram:
    """Observations counted per bucket since the router started, for Prometheus' histogram type (which a
    scraper can sum over servers and turn into any quantile, unlike recent percentiles)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))  # the last: +Inf
    sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.sum_s += seconds

    def snapshot(self) -> dict[str, Any]:
        """Cumulative counts per upper bound (`None`: +Inf), the sum and the count of observations."""
        cumulative, total = [], 0
        for bound, count in zip((*LATENCY_BUCKETS_S, None), self.counts, strict=True):
            total += count
            cumulative.append([bound, total])
        return {"buckets": cumulative, "sum_s": self.sum_s, "count": total}


@dataclass
class ToolStats:
    """Counters, recent latencies and latency histograms of one tool."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    restarts: int = 0
    failed_restarts: int = 0
    queue_timeouts: int = 0
    cancelled: int = 0
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    waits_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    latency_histogram: Histogram = field(default_factory=Histogram)
    wait_histogram: Histogram = field(default_factory=Histogram)
    #: Recent time an instance spends on a call (a moving average; None before the first call).
    service_s: float | None = None

    def record(self, result: ToolResult, latency_s: float, wait_s: float | None = None) -> None:
        """Count one finished call (`wait_s` is None when the call never reached an instance)."""
        self.calls += 1
        self.errors += int(result.is_error)
        self.latencies_s.append(latency_s)
        self.latency_histogram.observe(latency_s)
        if wait_s is not None:
            self.waits_s.append(wait_s)
            self.wait_histogram.observe(wait_s)
            service_s = latency_s - wait_s
            self.service_s = (
                service_s
                if self.service_s is None
                else self.service_s + _SERVICE_WEIGHT * (service_s - self.service_s)
            )


def percentiles_ms(samples: deque[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(np.fromiter(samples, dtype=float), [50, 90, 99]) * 1000.0
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3)}
