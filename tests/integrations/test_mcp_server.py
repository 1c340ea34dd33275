"""`spacetools serve --mcp` with the `mcp` client, over stdio and over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from PIL import Image
from typer.testing import CliRunner

from slow_client import SLOW_HEADERS, body_request, drip
from spacetools.cli.main import app
from spacetools.integrations.mcp.server import create_mcp_server, streamable_http_app
from spacetools.kit import imagecodec
from spacetools.sim.layout import build_scene
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import TOKEN_ENV, ServerLimits
from spacetools.toolshed.slow_clients import server_options

SERVE = [
    sys.executable,
    "-m",
    "spacetools.cli.main",
    "serve",
    "--mcp",
    "--toolset",
    "v1",
    "--profile",
    "exact",
]
ClientFactory = Callable[[], AbstractAsyncContextManager[ClientSession]]
# The streamable HTTP server runs with the HTTP Toolshed's protections, at limits a test can reach.
TOKEN = "an-mcp-token-of-32-characters!!!"
MAX_IMAGE_PIXELS = 400_000  # the 640x480 scene fits, 700x700 does not
MAX_BODY_BYTES = 4_000_000


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A simulated scene: its image (array and PNG file), spec JSON and true depth at the centre."""
    with build_scene(7) as world:
        view = world.render()
        path = tmp_path_factory.mktemp("mcp") / "scene.png"
        Image.fromarray(view.rgb).save(path)
        height, width = view.depth.shape
        return {
            "rgb": view.rgb,
            "path": str(path),
            "spec": world.spec.model_dump_json(),
            "depth": float(view.depth[height // 2, width // 2]),
        }


@asynccontextmanager
async def _session(read: Any, write: Any) -> AsyncIterator[ClientSession]:
    async with ClientSession(read, write, read_timeout_seconds=120) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session() -> AsyncIterator[ClientSession]:
    parameters = StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=dict(os.environ))
    async with stdio_client(parameters) as (read, write), _session(read, write) as session:
        yield session


@asynccontextmanager
async def http_session(url: str, token: str = TOKEN) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client,
        streamable_http_client(url, http_client=client) as streams,
        _session(streams[0], streams[1]) as session,
    ):
        yield session


@pytest.fixture(scope="module")
def http_log(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tmp_path_factory.mktemp("mcp-log") / "server.log"


@pytest.fixture(scope="module")
def http_url(http_log: Any) -> Any:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        *SERVE,
        *("--mcp-transport", "streamable-http", "--port", str(port), "--token", TOKEN),
        *("--max-image-pixels", str(MAX_IMAGE_PIXELS), "--max-sessions", "1"),
        *("--max-body-bytes", str(MAX_BODY_BYTES)),
    ]
    log = http_log.open("w")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content if part.type == "text")


async def _exercise(session: ClientSession, scene: dict[str, Any], image: str) -> None:
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert {"open_session", "add_image", "close_session", "sam2-segment_from_point"} <= set(tools)
    assert all("." not in name for name in tools)
    assert "session_id" in tools["depth_estimator-estimate_depth"].input_schema["required"]
    assert "image_index" in tools["depth_estimator-estimate_depth"].input_schema["properties"]

    opened = await session.call_tool(
        "open_session", {"images": [image], "attachments": [{"scene": scene["spec"]}]}
    )
    assert not opened.is_error, _text(opened)
    assert opened.structured_content is not None and opened.structured_content["image_count"] == 1
    session_id = opened.structured_content["session_id"]

    depth = await session.call_tool(
        "depth_estimator-estimate_depth", {"session_id": session_id, "image_index": 0}
    )
    assert not depth.is_error, _text(depth)
    # A variable the first call stored, read by a second call in the same session.
    value = await session.call_tool(
        "vision_ops-index_at", {"session_id": session_id, "data": "$depth_map", "u": 0.5, "v": 0.5}
    )
    assert float(_text(value).split(" is ")[-1].split()[0].rstrip("m")) == pytest.approx(
        scene["depth"], abs=1e-3
    )
    assert value.structured_content is not None and value.structured_content["text"] == _text(value)

    crop = await session.call_tool(
        "vision_ops-point_crop",
        {"session_id": session_id, "image_index": 0, "points": "[(0.25, 0.25), (0.5, 0.75)]"},
    )
    (picture,) = [part for part in crop.content if part.type == "image"]
    height, width = scene["rgb"].shape[:2]
    expected = scene["rgb"][height // 4 : 3 * height // 4, width // 4 : width // 2]
    np.testing.assert_array_equal(imagecodec.decode(base64.b64decode(picture.data)), expected)
    # The crop joined the session under the index the text names: crop it again, whole.
    index = int(re.search(r"now image_index (\d+)\.\]", _text(crop))[1])
    assert index == 2  # image 0, the depth picture (1), the crop (2): each picture kept once
    again = await session.call_tool(
        "vision_ops-point_crop",
        {"session_id": session_id, "image_index": index, "points": "[(0, 0), (1, 1)]"},
    )
    (same,) = [part for part in again.content if part.type == "image"]
    np.testing.assert_array_equal(imagecodec.decode(base64.b64decode(same.data)), expected)

    # Malformed calls are results the client reads, not broken connections.
    no_session = await session.call_tool("depth_estimator-estimate_depth", {"image_index": 0})
    assert no_session.is_error and "session_id" in _text(no_session)
    bad_type = await session.call_tool(
        "depth_estimator-estimate_depth", {"session_id": session_id, "image_index": "x"}
    )
    assert bad_type.is_error and _text(bad_type).startswith("Error:")

    failed = await session.call_tool(
        "depth_estimator-estimate_depth", {"session_id": session_id, "image_index": 9}
    )
    assert failed.is_error and _text(failed).startswith("Error:")
    ended = await session.call_tool("close_session", {"session_id": session_id})
    assert ended.structured_content == {"session_id": session_id, "closed": True}
    closed = await session.call_tool(
        "depth_estimator-estimate_depth", {"session_id": session_id, "image_index": 0}
    )
    assert closed.is_error and "closed, expired or unknown" in _text(closed)


@pytest.mark.slow
def test_mcp_over_stdio_with_an_image_file(scene: dict[str, Any]) -> None:
    async def run() -> None:
        async with stdio_session() as session:
            await _exercise(session, scene, scene["path"])
            # A new scene by seed: the scene build_scene makes, in a session the tools work on.
            made = await session.call_tool("new_scene", {"seed": 7})
            assert not made.is_error, _text(made)
            data = made.structured_content
            assert data is not None and data["image_index"] == 0 and len(data["objects"]) >= 3
            (picture,) = [part for part in made.content if part.type == "image"]
            np.testing.assert_array_equal(imagecodec.decode(base64.b64decode(picture.data)), scene["rgb"])
            value = await session.call_tool(
                "depth_estimator-estimate_depth", {"session_id": data["session_id"], "image_index": 0}
            )
            assert not value.is_error, _text(value)
            bad = await session.call_tool("new_scene", {"seed": "seven"})
            assert bad.is_error and "integer seed" in _text(bad)

    anyio.run(run)


@pytest.mark.slow
def test_mcp_over_streamable_http_with_a_data_url(scene: dict[str, Any], http_url: str) -> None:
    async def run() -> None:
        async with http_session(http_url) as session:
            await _exercise(session, scene, imagecodec.to_data_url(scene["rgb"]))
            # Over HTTP, a file path on the server is not an image source.
            refused = await session.call_tool("open_session", {"images": [scene["path"]]})
            assert refused.is_error and "cannot read the image" in _text(refused)

    anyio.run(run)


@pytest.mark.slow
def test_mcp_over_http_requires_the_token_and_caps_bodies(http_url: str) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(http_url, json=initialize, headers=headers).status_code == 401
    wrong = {**headers, "Authorization": "Bearer " + "x" * len(TOKEN)}
    assert httpx.post(http_url, json=initialize, headers=wrong).status_code == 401
    right = {**headers, "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    too_big = httpx.post(http_url, content=b" " * (MAX_BODY_BYTES + 1), headers=right)
    assert too_big.status_code == 413


@pytest.mark.slow
def test_mcp_over_http_has_the_image_and_session_limits(
    scene: dict[str, Any], http_url: str, http_log: Any
) -> None:
    async def run() -> None:
        async with http_session(http_url) as session:
            large = imagecodec.to_data_url(np.zeros((700, 700, 3), np.uint8))  # a few KB of PNG
            refused = await session.call_tool("open_session", {"images": [large]})
            assert refused.is_error
            assert f"700x700 pixels is over the limit of {MAX_IMAGE_PIXELS:,} pixels" in _text(refused)

            first = await session.call_tool(
                "open_session", {"images": [imagecodec.to_data_url(scene["rgb"])]}
            )
            assert not first.is_error, _text(first)
            second = await session.call_tool(
                "open_session", {"images": [imagecodec.to_data_url(scene["rgb"])]}
            )
            assert second.is_error and "maximum of 1 open sessions" in _text(second)
            session_id = (first.structured_content or {})["session_id"]
            await session.call_tool("close_session", {"session_id": session_id})

            # Hostile names: the answers say what was wrong; the log keeps a short line of each.
            name = "Z" * 100_000
            unknown = await session.call_tool(name, {})
            assert unknown.is_error and "Unknown tool" in _text(unknown)
            bogus = await session.call_tool(
                "depth_estimator-estimate_depth", {"session_id": "Q" * 100_000, "image_index": 0}
            )
            assert bogus.is_error and "(100,000 characters) is closed" in _text(bogus)

    anyio.run(run)
    log = http_log.read_text()
    assert "characters)" in log  # the refusals were logged, cut short
    assert log.count("Z") < 1_000 and log.count("Q") < 1_000


def test_mcp_over_http_beyond_loopback_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    arguments = ["serve", "--mcp", "--mcp-transport", "streamable-http", "--host", "0.0.0.0"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    assert "exposes the tools to the network" in " ".join(result.output.split())


def test_mcp_over_http_cuts_off_slow_clients() -> None:
    """`serve --mcp --mcp-transport streamable-http` runs uvicorn with the Toolshed's settings."""
    limits = ServerLimits(header_timeout_s=1.0, body_timeout_s=1.0)
    toolshed = toolshed_for([ToolDeployment(tool=EchoTool, backend="inprocess")], limits)
    app = streamable_http_app(create_mcp_server(toolshed, limits=limits), limits, "127.0.0.1")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", **server_options(limits)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.02)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        headers_late = drip(url, SLOW_HEADERS, 0.05).decode()
        body_late = drip(url, b"{" + b" " * 50, 1.0, head=body_request("/mcp")).decode()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
    assert headers_late.startswith("HTTP/1.1 408") and "headers did not arrive within 1 s" in headers_late
    assert body_late.startswith("HTTP/1.1 408") and "body did not arrive within 1 s" in body_late
