"""No request stalls the server: calls are read off the event loop, their arguments are bounded, and a
call over the in-flight limit, or any request past the connection limit, is refused before its body is
read, with its connection closed."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from serving import GateTool, serving, serving_with_server, wait_for_stats, wait_until

from spacetools.kit import imagecodec
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.call_arguments import MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_ELEMENTS
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import ServerLimits

VALIDATING = threading.Event()  # a call's validation has begun
VALIDATED = threading.Event()  # ... and ended
RELEASE = threading.Event()  # the test lets it end


class SlowArray:
    """An array held elsewhere whose check blocks until the test releases it: a stand-in for the
    seconds a huge argument costs to check, which the test can hold open for as long as it looks."""

    @property
    def shape(self) -> tuple[int, ...]:
        VALIDATING.set()
        RELEASE.wait(10)  # bounds the test on code that validates on the event loop
        VALIDATED.set()
        return (1,)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.zeros(1)


class Untouchable(list):  # type: ignore[type-arg]
    """A list that records being walked: the argument check must stop before it (made longer than
    what is read on the event loop, so that only that check could walk it)."""

    walked = False

    def __iter__(self) -> Iterator[Any]:
        Untouchable.walked = True
        return super().__iter__()


def read_response(raw: socket.socket) -> str:
    """One whole HTTP response (head and body) from a raw connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += raw.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += raw.recv(4096)
    return (head + b"\r\n\r\n" + body).decode()


def post_headers_only(host: str, port: int, path: str) -> tuple[str, bool]:
    """POST headers that announce a body which never comes (only a server that answers before reading
    the body can answer at all); the response, and whether the server then closed the connection."""
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
        )
        head = read_response(raw)
        try:
            closed = raw.recv(1) == b""
        except TimeoutError:  # still open after 30 s
            closed = False
    return head, closed


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def call_echo(arguments: Any) -> str:
    async def scenario() -> str:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            return (await shed.open_session([]).call("echo.echo", arguments)).text

    return asyncio.run(scenario())


def test_health_answers_while_a_call_is_being_validated() -> None:
    VALIDATING.clear(), VALIDATED.clear(), RELEASE.clear()
    shed = Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")])
    with serving(shed) as url, httpx.Client(base_url=url, timeout=30) as http:
        session_id = http.post("/sessions", json={"images": []}).json()["id"]
        # An object of unknown cost to check is checked off the loop, as are large arguments.
        shed.session(session_id).set_variable("held", SlowArray())  # the server is idle meanwhile
        body = [{"name": "echo.describe", "arguments": {"data": "$held"}}]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(http.post, f"/sessions/{session_id}/calls", json=body)
            assert VALIDATING.wait(30)
            health = http.get("/health")
            answered_during_validation = not VALIDATED.is_set()
            RELEASE.set()
            assert health.status_code == 200 and answered_during_validation
            assert pending.result().status_code == 200


def test_the_argument_check_stops_at_the_first_container_too_deep() -> None:
    Untouchable.walked = False
    text = call_echo({"text": nested(MAX_ARGUMENT_DEPTH + 8), "later": Untouchable([0] * 300)})
    assert text == f"Error: the arguments for echo.echo are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    assert not Untouchable.walked


def test_arguments_past_the_element_cap_are_refused_where_the_count_passes_it() -> None:
    Untouchable.walked = False
    text = call_echo({"text": [0] * MAX_ARGUMENT_ELEMENTS, "later": Untouchable([0] * 300)})
    assert text.startswith(
        f"Error: the arguments for echo.echo hold more than {MAX_ARGUMENT_ELEMENTS:,} values"
    )
    assert not Untouchable.walked
    # Just under the cap (the object, the list and its items), the check passes and validation speaks.
    text = call_echo({"text": [0] * (MAX_ARGUMENT_ELEMENTS - 2)})
    assert "hold more than" not in text and "text" in text


LIMITS = ServerLimits(max_body_bytes=64_000, max_call_body_bytes=16_000, max_calls_in_flight=3)


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    deployments = [
        ToolDeployment(tool=EchoTool, backend="inprocess"),
        ToolDeployment(tool=GateTool, backend="inprocess", instances=3, timeout_s=60.0),
    ]
    with serving(toolshed_for(deployments, LIMITS), LIMITS) as url, httpx.Client(base_url=url) as client:
        yield client


def test_call_bodies_have_their_own_smaller_limit(http: httpx.Client) -> None:
    session_id = http.post("/sessions", json={"images": []}).json()["id"]
    body = json.dumps([{"name": "echo.echo", "arguments": {"text": "x" * 20_000}}])
    headers = {"content-type": "application/json"}
    refused = http.post(f"/sessions/{session_id}/calls", content=body, headers=headers)
    assert refused.status_code == 413
    # A session body of that size (an image of noise, about 26 KB) is under the general limit: it is read.
    noise = np.random.default_rng(0).integers(0, 256, size=(80, 80, 3), dtype=np.uint8)
    session = {"images": [imagecodec.to_data_url(noise)]}
    assert 16_000 < len(json.dumps(session)) < 64_000
    assert http.post("/sessions", json=session).status_code == 201


def test_a_call_over_the_in_flight_limit_is_refused_before_its_body_is_read(http: httpx.Client) -> None:
    session_id = http.post("/sessions", json={"images": []}).json()["id"]
    GateTool.opened.clear()
    with ThreadPoolExecutor(3) as pool:
        held = [
            pool.submit(
                http.post,
                f"/sessions/{session_id}/calls",
                json=[{"name": "gate.wait", "arguments": {"label": str(index)}}],
                timeout=60,
            )
            for index in range(3)
        ]
        wait_for_stats(http, lambda stats: stats["calls_in_flight"] == 3)
        host, port = http.base_url.host, http.base_url.port
        assert port is not None
        head, closed = post_headers_only(host, port, f"/sessions/{session_id}/calls")
        GateTool.opened.set()
        assert [future.result().json()[0]["text"] for future in held] == ["0", "1", "2"]
    status_line, *headers = head.split("\r\n\r\n")[0].split("\r\n")
    assert status_line.startswith("HTTP/1.1 503")
    assert "retry-after: 1" in [header.lower() for header in headers]
    assert "limit of 3 tool calls in flight" in head
    # The body was never read, so the connection cannot carry another request: the server closes it.
    assert "connection: close" in [header.lower() for header in headers] and closed
    assert http.get("/stats").json()["calls_refused"] == 1


def test_a_request_past_the_connection_limit_is_refused_before_its_body_is_read() -> None:
    # All from one client, which by default may hold only half of them.
    limits = ServerLimits(max_connections=3, max_connections_per_client=3)
    deployments = [ToolDeployment(tool=GateTool, backend="inprocess", instances=3, timeout_s=60.0)]
    with serving_with_server(toolshed_for(deployments, limits), limits) as (url, server):
        session_id = httpx.post(f"{url}/sessions", json={"images": []}).json()["id"]
        state = server.server_state
        wait_until(lambda: not state.connections, "the session's connection closed")
        GateTool.opened.clear()
        body = [{"name": "gate.wait", "arguments": {"label": "held"}}]
        with ThreadPoolExecutor(3) as pool:
            held = [
                pool.submit(httpx.post, f"{url}/sessions/{session_id}/calls", json=body, timeout=60)
                for _ in range(3)
            ]
            wait_until(lambda: len(state.connections) == len(state.tasks) == 3, "3 calls held")
            host, port = url.removeprefix("http://").split(":")
            head, closed = post_headers_only(host, int(port), f"/sessions/{session_id}/calls")
            GateTool.opened.set()
            assert [future.result().json()[0]["text"] for future in held] == ["held"] * 3
        assert head.startswith("HTTP/1.1 503") and closed
        assert "connection: close" in head.lower()
        # A cap, not a break: once the held connections close, requests are served again.
        wait_until(lambda: not state.connections, "the held connections closed")
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_call_body_that_does_not_arrive_is_a_408() -> None:
    limits = ServerLimits(call_body_timeout_s=0.5)
    with serving(toolshed_for([ToolDeployment(tool=EchoTool, backend="inprocess")], limits), limits) as url:
        session_id = httpx.post(f"{url}/sessions", json={"images": []}).json()["id"]
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(
                f"POST /sessions/{session_id}/calls HTTP/1.1\r\nHost: {host}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[".encode()
            )
            head = read_response(raw)
        assert head.startswith("HTTP/1.1 408") and "did not arrive within 0.5 s" in head
        assert httpx.get(f"{url}/stats").json()["calls_in_flight"] == 0
