"""`GET /metrics`: the Toolshed's statistics in the Prometheus text format, read back with its parser;
latencies as histograms."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.http import create_app
from spacetools.toolshed.stats import Histogram


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_follow_the_calls_made() -> None:
    shed = Toolshed(
        [
            ToolDeployment(tool=EchoTool, backend="inprocess"),
            ToolDeployment(
                tool=SleepTool, backend="inprocess", batch_size=2, batch_window_ms=200, max_instances=2
            ),
        ]
    )
    with TestClient(create_app(shed)) as http:
        session_id = http.post("/sessions", json={"images": []}).json()["id"]
        calls = [
            {"name": "echo.echo", "arguments": {"text": "a"}},
            {"name": "echo.echo", "arguments": {}},
            {"name": "sleep.sleep", "arguments": {"seconds": 0.01}},
            {"name": "sleep.sleep", "arguments": {"seconds": 0.02}},
            {"name": "nope.nope", "arguments": {}},
        ]
        assert http.post(f"/sessions/{session_id}/calls", json=calls).status_code == 200
        response = http.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples = _samples(response.text)
    echo = (("backend", "inprocess"), ("tool", "echo"))
    assert samples[("spacetools_toolshed_tool_calls_total", echo)] == 2
    assert samples[("spacetools_toolshed_tool_errors_total", echo)] == 1
    assert samples[("spacetools_toolshed_tool_instances", (("tool", "sleep"),))] >= 1
    sleep_method = (("method", "sleep.sleep"), ("tool", "sleep"))
    assert samples[("spacetools_toolshed_batches_total", sleep_method)] == 1
    assert samples[("spacetools_toolshed_batched_calls_total", sleep_method)] == 2
    assert samples[("spacetools_toolshed_autoscale_bound", (("bound", "max"), ("tool", "sleep")))] == 2
    assert samples[("spacetools_toolshed_sessions_open", ())] == 1
    assert samples[("spacetools_toolshed_unknown_tool_calls_total", ())] == 1
    # Latency is a histogram: cumulative buckets up to +Inf, which holds every call, and the seconds summed.
    echo_tool = (("tool", "echo"),)
    buckets = {
        labels[0][1]: value
        for (name, labels), value in samples.items()
        if name == "spacetools_toolshed_tool_latency_seconds_bucket" and labels[1:] == echo_tool
    }
    assert buckets["+Inf"] == samples[("spacetools_toolshed_tool_latency_seconds_count", echo_tool)] == 2
    counts = [buckets[bound] for bound in sorted(buckets, key=float)]
    assert counts == sorted(counts) and counts[0] <= 2
    assert 0 < samples[("spacetools_toolshed_tool_latency_seconds_sum", echo_tool)] < 5
    # The two sleeps ran as one batch: one wait for an instance.
    assert samples[("spacetools_toolshed_tool_queue_wait_seconds_count", (("tool", "sleep"),))] == 1
    assert not any("quantile" in dict(labels) for _, labels in samples)


def test_a_latency_falls_in_the_first_bucket_whose_bound_it_does_not_exceed() -> None:
    histogram = Histogram()
    for seconds in (0.0005, 0.001, 0.0011, 0.5, 1000.0):
        histogram.observe(seconds)
    snapshot = histogram.snapshot()
    cumulative = dict((bound, count) for bound, count in snapshot["buckets"])
    assert (cumulative[0.001], cumulative[0.0025], cumulative[0.5], cumulative[60.0]) == (2, 3, 4, 4)
    assert cumulative[None] == snapshot["count"] == 5
    assert snapshot["sum_s"] == pytest.approx(1000.5026)
