"""The server's limits and hostile input: every refusal is a 401/413/422/429/503 that says why, never a 500."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import typer
from serving import GateTool, serving, wait_for_stats
from typer.testing import CliRunner

from spacetools.cli.serve import serve
from spacetools.kit import imagecodec
from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.client import RemoteToolshed
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import TOKEN_ENV, ServerLimits

IMAGE = np.zeros((6, 8, 3), dtype=np.uint8)  # 144 bytes
TOKEN = "a-token-of-some-length"
LIMITS = ServerLimits(
    max_body_bytes=64_000,
    max_image_pixels=100 * 100,
    max_sessions=4,
    max_session_bytes=1_000,
    max_total_bytes=4_000,
    max_calls_in_flight=3,
    max_queue_wait_s=0.2,
)
DEPLOYMENTS = [
    ToolDeployment(tool=EchoTool, backend="inprocess"),
    ToolDeployment(tool=GateTool, backend="inprocess", instances=1, timeout_s=60.0),
    ToolDeployment(tool=SleepTool, backend="inprocess", instances=1, timeout_s=60.0),
]


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with serving(toolshed_for(DEPLOYMENTS, LIMITS), LIMITS) as url, httpx.Client(base_url=url) as client:
        yield client


def png_header(width: int, height: int) -> str:
    """A PNG data URL whose header claims `width` x `height` and whose pixel data is a few bytes: the
    shape of a decompression bomb, without building one."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png = b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def open_session(http: httpx.Client, images: int = 1) -> httpx.Response:
    return http.post("/sessions", json={"images": [imagecodec.to_data_url(IMAGE)] * images})


def calls(http: httpx.Client, session_id: str, body: Any, **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    headers = {"content-type": "application/json"}
    return http.post(f"/sessions/{session_id}/calls", content=content, headers=headers, **kwargs)


def test_a_body_over_the_limit_is_a_413(http: httpx.Client) -> None:
    session_id = open_session(http).json()["id"]
    response = calls(http, session_id, [{"name": "echo.echo", "arguments": {"text": "x" * 70_000}}])
    assert response.status_code == 413 and "Content Too Large" in response.text


@pytest.mark.parametrize("size", [(101, 100), (14_000, 14_000), (2**31 - 1, 2**31 - 1)])
def test_an_image_over_the_pixel_limit_is_refused_from_its_header(
    http: httpx.Client, size: tuple[int, int]
) -> None:
    response = http.post("/sessions", json={"images": [png_header(*size)]})
    assert response.status_code == 413
    detail = response.json()["detail"]
    # Ours, or Pillow's own limit, which comes first for the very largest.
    assert "pixels is over the limit of 10,000 pixels" in detail or "too large to decode" in detail
    session_id = open_session(http).json()["id"]
    added = http.post(f"/sessions/{session_id}/images", json={"image": png_header(*size)})
    assert added.status_code == 413


def test_images_count_in_the_session_and_total_memory(http: httpx.Client) -> None:
    too_many = open_session(http, images=7)  # 1,008 bytes of images > 1,000 per session
    assert too_many.status_code == 413 and "over the limit of 1,000 bytes per session" in too_many.text
    session_id = open_session(http, images=6).json()["id"]  # 864 bytes
    added = http.post(f"/sessions/{session_id}/images", json={"image": imagecodec.to_data_url(IMAGE)})
    assert added.status_code == 413
    sessions = http.get("/stats").json()["sessions"]
    assert sessions["image_bytes"] == 864 and sessions["open"] == 1
    for _ in range(3):  # 4 x 864 bytes would pass the total of 4,000
        assert open_session(http, images=6).status_code in (201, 413)
    assert http.get("/stats").json()["sessions"]["image_bytes"] <= LIMITS.max_total_bytes


def test_open_sessions_are_capped_with_a_429(http: httpx.Client) -> None:
    opened = [open_session(http).json()["id"] for _ in range(LIMITS.max_sessions)]
    refused = open_session(http)
    assert refused.status_code == 429 and "maximum of 4 open sessions" in refused.json()["detail"]
    assert http.delete(f"/sessions/{opened[0]}").status_code == 204
    assert open_session(http).status_code == 201


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[{"name": "echo.echo", "arguments": {"text": ' + "1" * 4301 + "}}]", "4300 digits"),
        ('[{"name": "echo.echo", "arguments": ' + "[" * 1000 + "]" * 1000 + "}]", "nested too deeply"),
    ],
)
def test_json_python_cannot_read_is_a_422(http: httpx.Client, body: str, message: str) -> None:
    response = calls(http, open_session(http).json()["id"], body)
    assert response.status_code == 422 and message in response.json()["detail"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"text": ' + "1" * 4301 + "}", "Error: the arguments for echo.echo are not valid JSON: Exceeds"),
        (
            '{"text": ' + "[" * 1000 + "]" * 1000 + "}",
            "Error: the arguments for echo.echo are not valid JSON",
        ),
        ({"text": json.loads("[" * 40 + "]" * 40)}, "Error: the arguments for echo.echo are nested deeper"),
        ({"text": "\ud800"}, "\ud800"),
    ],
)
def test_hostile_arguments_are_error_results_or_echoed_back(arguments: Any, expected: str) -> None:
    async def scenario(url: str) -> str:
        async with RemoteToolshed(url) as shed:
            return (await shed.open_session([]).call("echo.echo", arguments)).text

    with serving(toolshed_for(DEPLOYMENTS[:1], LIMITS), LIMITS) as url:
        text = asyncio.run(scenario(url))
    assert text.startswith(expected)


def test_calls_past_the_admission_limit_are_a_503_with_retry_after(http: httpx.Client) -> None:
    session_id = open_session(http).json()["id"]
    too_many = calls(http, session_id, [{"name": "echo.echo", "arguments": {"text": "x"}}] * 4)
    assert too_many.status_code == 503 and too_many.headers["retry-after"] == "1"
    assert "limit of 3 tool calls in flight" in too_many.json()["detail"]


def test_the_client_retries_a_503_as_the_server_asks() -> None:
    async def scenario(url: str, http: httpx.Client) -> list[str]:
        async with RemoteToolshed(url, timeout_s=60) as shed:
            session = shed.open_session([])
            await session.open()
            GateTool.opened.clear()
            first = asyncio.ensure_future(session.call_many([("gate.wait", {"label": "a"})] * 3))
            await asyncio.to_thread(wait_for_stats, http, lambda stats: stats["calls_in_flight"] == 3)
            second = asyncio.ensure_future(session.call("echo.echo", {"text": "after"}))
            await asyncio.to_thread(wait_for_stats, http, lambda stats: stats["calls_refused"] >= 1)
            GateTool.opened.set()
            return [result.text for result in [*await first, await second]]

    limits = LIMITS
    deployments = [DEPLOYMENTS[0], ToolDeployment(tool=GateTool, backend="inprocess", instances=3)]
    with serving(toolshed_for(deployments, limits), limits) as url, httpx.Client(base_url=url) as http:
        assert asyncio.run(scenario(url, http)) == ["a", "a", "a", "after"]


def test_a_call_that_waits_too_long_for_an_instance_times_out_in_the_queue(http: httpx.Client) -> None:
    session_id = open_session(http).json()["id"]
    GateTool.opened.clear()
    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(calls, http, session_id, [{"name": "gate.wait", "arguments": {"label": "a"}}])
        wait_for_stats(http, lambda stats: stats["tools"]["gate"]["busy"] == 1)
        (queued,) = calls(http, session_id, [{"name": "gate.wait", "arguments": {"label": "b"}}]).json()
        GateTool.opened.set()
        assert holding.result().json()[0]["text"] == "a"
    assert queued["is_error"] and queued["text"] == (
        "Error: TimeoutError: gate.wait waited 0.2 s for a free gate instance; the tool is overloaded, "
        "try again later"
    )
    assert http.get("/stats").json()["tools"]["gate"]["queue_timeouts"] == 1


def test_a_client_that_disconnects_cancels_its_call(http: httpx.Client) -> None:
    session_id = open_session(http).json()["id"]
    with pytest.raises(httpx.ReadTimeout):
        calls(http, session_id, [{"name": "sleep.sleep", "arguments": {"seconds": 60}}], timeout=0.5)
    # The router records the cancel before the admission middleware, outside it, lets go of the call:
    # wait for both (a call that stayed counted would time this out).
    stats = wait_for_stats(
        http,
        lambda stats: stats["tools"]["sleep"]["cancelled"] == 1 and stats["calls_in_flight"] == 0,
    )
    assert stats["tools"]["sleep"]["busy"] == 0
    (answered,) = calls(http, session_id, [{"name": "sleep.sleep", "arguments": {"seconds": 0}}]).json()
    assert answered["text"] == "slept 0 s"  # on the instance that replaced the abandoned one


def test_a_token_is_required_when_set() -> None:
    limits = LIMITS.model_copy(update={"token": TOKEN})
    with serving(toolshed_for(DEPLOYMENTS[:1], limits), limits) as url:
        assert httpx.get(f"{url}/health").status_code == 200  # liveness probes need no token
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = httpx.get(f"{url}/tools", headers=headers)
            assert refused.status_code == 401 and "Authorization: Bearer" in refused.json()["detail"]
        assert httpx.get(f"{url}/tools", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200

        async def echo(token: str | None) -> str:
            async with RemoteToolshed(url, token=token) as shed:
                return (await shed.open_session([IMAGE]).call("echo.echo", {"text": "in"})).text

        assert asyncio.run(echo(TOKEN)) == "in"
        with pytest.raises(ConnectionError, match="HTTP 401"):
            asyncio.run(echo(None))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--host", "0.0.0.0"], "exposes the tools to the network: set a bearer token"),
        (["--host", "0.0.0.0", "--token", "short"], "at least 16 characters"),
        (["--max-sessions", "0"], "--max-sessions"),
    ],
)
def test_serve_refuses_an_exposed_server_without_a_token(
    arguments: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    app = typer.Typer()
    app.command()(serve)
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split())


def test_the_client_needs_no_web_framework() -> None:
    command = (
        "import sys, spacetools.toolshed.client; print(sorted({'fastapi', 'starlette'} & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
