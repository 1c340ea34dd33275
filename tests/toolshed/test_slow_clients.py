"""Slow clients are cut off, and cannot lock others out: a real server on 127.0.0.1, raw sockets that
send their headers one byte at a time or a body at 1 byte/s; `/health` answers meanwhile. And a burst
is let in only as far as the tools can start its calls within their queue wait."""

from __future__ import annotations

import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serving import GateTool, serving, serving_with_server, wait_for_stats, wait_until

from slow_client import SLOW_HEADERS, body_request, drip, read_until_closed
from spacetools.kit.definition import ToolResult
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.admission import BEGAN_AT, CallAdmission
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.router import ToolRouter

DEPLOYMENTS = [ToolDeployment(tool=EchoTool, backend="inprocess")]
#: A second loopback address: a client other than the slow ones, as far as the server can tell.
OTHER_CLIENT = "127.0.0.2"


def health_from(url: str, source: str) -> int:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as client:
        return client.get(f"{url}/health").status_code


def test_headers_sent_a_byte_at_a_time_are_cut_off_and_one_client_cannot_take_every_connection() -> None:
    limits = ServerLimits(header_timeout_s=1.0, max_connections=16, max_connections_per_client=4)
    with serving_with_server(toolshed_for(DEPLOYMENTS, limits), limits) as (url, server):
        connections = server.server_state.connections
        with ThreadPoolExecutor(4) as pool:
            slow = [pool.submit(drip, url, SLOW_HEADERS, 0.05) for _ in range(4)]
            wait_until(lambda: len(connections) >= 4 or all(f.done() for f in slow), "4 slow connections")
            # The slow client's next connection is refused at once; another client is served.
            host, port = url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=30) as fifth:
                # Its request, sent before the refusal, is dropped unread, not met with a reset.
                fifth.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                refused = read_until_closed(fifth).decode()
            assert health_from(url, OTHER_CLIENT) == 200
            answers = [future.result().decode() for future in slow]
        for answer in answers:
            assert answer.startswith("HTTP/1.1 408"), answer
            assert "the request headers did not arrive within 1 s" in answer
        assert refused.startswith("HTTP/1.1 503") and "retry-after: 1" in refused.lower()
        assert "4 connections open, the most one client may" in refused
        # Cut off, the slow client's connections no longer count: it is served again.
        wait_until(lambda: not connections, "the slow connections closed")
        assert httpx.get(f"{url}/health").status_code == 200


@pytest.mark.parametrize("route", ["/sessions", "/sessions/{id}/images", "/sessions/{id}/calls"])
def test_a_body_at_one_byte_a_second_is_cut_off_on_every_route(route: str) -> None:
    limits = ServerLimits(body_timeout_s=1.0, call_body_timeout_s=30.0)
    with serving(toolshed_for(DEPLOYMENTS, limits), limits) as url:
        session_id = httpx.post(f"{url}/sessions", json={"images": []}).json()["id"]
        path = route.format(id=session_id)
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(drip, url, b'{"images": [' + b" " * 100, 1.0, head=body_request(path))
            health = [httpx.get(f"{url}/health").status_code]
            answer = slow.result().decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "the request body did not arrive within 1 s" in answer
        assert health == [200]
        stats = httpx.get(f"{url}/stats").json()
        assert stats["calls_in_flight"] == 0  # a cut-off call gives its place back


def test_health_is_served_past_the_connection_limit() -> None:
    limits = ServerLimits(max_connections=2, max_connections_per_client=16)
    with serving_with_server(toolshed_for(DEPLOYMENTS, limits), limits) as (url, server):
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(3)]
        try:
            wait_until(lambda: len(server.server_state.connections) >= 3, "3 idle connections")
            assert httpx.get(f"{url}/tools").status_code == 503
            assert httpx.get(f"{url}/health").status_code == 200
        finally:
            for raw in idle:
                raw.close()


def test_an_idle_kept_alive_connection_is_closed() -> None:
    limits = ServerLimits(keep_alive_timeout_s=0.5)
    with serving(toolshed_for(DEPLOYMENTS, limits), limits) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            received = read_until_closed(raw).decode()
        assert received.startswith("HTTP/1.1 200") and received.count("HTTP/1.1") == 1


def test_a_call_expected_to_wait_past_its_queue_wait_is_refused_at_once() -> None:
    limits = ServerLimits(max_queue_wait_s=15.0)
    deployments = [ToolDeployment(tool=GateTool, backend="inprocess", instances=1, timeout_s=60.0)]
    toolshed = toolshed_for(deployments, limits)
    # As if the gate's calls had each taken 10 s: one queued call may wait 10 s, two 20 s (over 15 s).
    toolshed.router("gate").stats.record(ToolResult(text="past"), latency_s=10.0, wait_s=0.0)
    with serving(toolshed, limits) as url, httpx.Client(base_url=url, timeout=60) as http:
        session_id = http.post("/sessions", json={"images": []}).json()["id"]
        path = f"/sessions/{session_id}/calls"
        GateTool.opened.clear()
        with ThreadPoolExecutor(2) as pool:
            held = []
            for count in (1, 2):
                body = [{"name": "gate.wait", "arguments": {"label": str(count)}}]
                held.append(pool.submit(http.post, path, json=body))
                wait_for_stats(http, lambda stats, count=count: stats["calls_in_flight"] == count)
            refused = http.post(path, json=[{"name": "gate.wait", "arguments": {"label": "3"}}])
            GateTool.opened.set()
            assert [future.result().json()[0]["text"] for future in held] == ["1", "2"]
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "gate is expected to start this call in 20.0 s" in refused.json()["detail"]
        stats = http.get("/stats").json()
        assert stats["calls_refused_by_expected_wait"] == 1 and stats["calls_in_flight"] == 0
        # With the queue empty again the same call is let in.
        assert http.post(path, json=[{"name": "gate.wait", "arguments": {"label": "4"}}]).status_code == 200


def test_the_time_a_request_spent_arriving_counts_against_its_queue_wait() -> None:
    router = ToolRouter(
        "slow", lambda: EchoTool(), instances=1, timeout_s=5.0, backend="inprocess", max_queue_wait_s=1.5
    )
    router.stats.record(ToolResult(text="past"), latency_s=1.0, wait_s=0.0)
    admission = CallAdmission(10, lambda _name: router)
    assert admission.admit_calls(["slow.echo"], {}) is None  # takes the instance
    arrived_late = {"extensions": {BEGAN_AT: time.perf_counter() - 1.0}}
    refusal = admission.admit_calls(["slow.echo"], arrived_late)
    # 1 s of expected wait past the ~0.5 s left (the tenths read the clock, so they are not asserted).
    assert refusal is not None and re.search(r"past the 0\.[0-5] s left of its queue wait", refusal)
    assert admission.admit_calls(["slow.echo"], {}) is None  # 1 s of wait fits 1.5 s
    admission.release_calls(["slow.echo"])
    admission.release_calls(["slow.echo"])
    assert admission.refused_by_wait == 1
    assert admission.admit_calls(["slow.echo"], arrived_late) is None  # released: nothing ahead
