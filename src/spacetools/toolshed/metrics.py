"""Prometheus metrics: the Toolshed's statistics (`Toolshed.stats()`) in the Prometheus text format.

Served as `GET /metrics` beside `GET /stats`. Counters keep Prometheus' `_total` suffix; call latency and
queue wait are histograms (`_bucket{le=...}`, `_sum`, `_count` since the server started), so a scraper
sums them over servers and takes any quantile (`histogram_quantile`); `/stats` keeps recent percentiles.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_PREFIX = "spacetools_toolshed"
_TOOL_COUNTERS = {
    "calls": "Tool calls finished (errors included).",
    "errors": "Tool calls that ended in an error result.",
    "timeouts": "Tool calls that ran past the deployment's timeout.",
    "crashes": "Instances that died.",
    "restarts": "Instances started to replace dead or hung ones.",
}
_TOOL_GAUGES = {
    "instances": "Instances in the pool.",
    "queue_depth": "Calls waiting for a free instance.",
    "busy": "Instances running a call.",
    "idle": "Instances waiting for a call.",
    "standby": "Instances started outside the pool, ready to join it.",
}


def render_metrics(stats: dict[str, Any]) -> bytes:
    """The Prometheus text exposition of a `Toolshed.stats()` dictionary."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatsCollector(stats))
    return generate_latest(registry)


class _StatsCollector(Collector):
    def __init__(self, stats: dict[str, Any]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        tools: dict[str, dict[str, Any]] = self._stats["tools"]
        for key, help_text in _TOOL_COUNTERS.items():
            counter = CounterMetricFamily(f"{_PREFIX}_tool_{key}", help_text, labels=["tool", "backend"])
            for name, tool in tools.items():
                counter.add_metric([name, tool["backend"]], tool[key])
            yield counter
        for key, help_text in _TOOL_GAUGES.items():
            gauge = GaugeMetricFamily(f"{_PREFIX}_tool_{key}", help_text, labels=["tool"])
            for name, tool in tools.items():
                gauge.add_metric([name], tool[key])
            yield gauge
        for key, help_text in (
            ("latency", "Call latency (queue wait included), seconds."),
            ("queue_wait", "Wait for a free instance, seconds."),
        ):
            histogram = HistogramMetricFamily(f"{_PREFIX}_tool_{key}_seconds", help_text, labels=["tool"])
            for name, tool in tools.items():
                counts = tool[f"{key}_histogram"]
                buckets = [
                    ("+Inf" if bound is None else floatToGoString(bound), count)
                    for bound, count in counts["buckets"]
                ]
                histogram.add_metric([name], buckets, counts["sum_s"])
            yield histogram
        yield from self._batching(tools)
        yield from self._autoscaling(tools)
        yield from self._sessions()

    def _batching(self, tools: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        batches = CounterMetricFamily(f"{_PREFIX}_batches", "Batches run.", labels=["tool", "method"])
        calls = CounterMetricFamily(
            f"{_PREFIX}_batched_calls", "Calls run inside batches.", labels=["tool", "method"]
        )
        for name, tool in tools.items():
            for batcher in tool.get("batching", []):
                batches.add_metric([name, batcher["method"]], batcher["batches"])
                calls.add_metric([name, batcher["method"]], batcher["calls"])
        yield batches
        yield calls

    def _autoscaling(self, tools: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        bounds = GaugeMetricFamily(
            f"{_PREFIX}_autoscale_bound", "Autoscaling bounds of a pool.", labels=["tool", "bound"]
        )
        for name, tool in tools.items():
            if "autoscale" in tool:
                bounds.add_metric([name, "min"], tool["autoscale"]["min"])
                bounds.add_metric([name, "max"], tool["autoscale"]["max"])
        yield bounds

    def _sessions(self) -> Iterator[Metric]:
        sessions = self._stats["sessions"]
        yield GaugeMetricFamily(f"{_PREFIX}_sessions_open", "Open sessions.", value=sessions["open"])
        yield CounterMetricFamily(
            f"{_PREFIX}_sessions_expired", "Sessions closed by their time to live.", value=sessions["expired"]
        )
        yield GaugeMetricFamily(
            f"{_PREFIX}_variable_bytes", "Bytes held by session variables.", value=sessions["variable_bytes"]
        )
        yield CounterMetricFamily(
            f"{_PREFIX}_variable_evictions", "Variables evicted by memory caps.", value=sessions["evictions"]
        )
        yield CounterMetricFamily(
            f"{_PREFIX}_unknown_tool_calls",
            "Calls naming no served tool method.",
            value=self._stats["unknown_tool_calls"],
        )
