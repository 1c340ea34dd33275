"""`GET /metrics`: the Toolshed's statistics in the Prometheus text format, read back with its parser."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.http import create_app


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
    p50 = samples[("spacetools_toolshed_tool_latency_seconds", (("quantile", "0.5"), ("tool", "echo")))]
    assert 0 < p50 < 5
