"""`spacetools serve --mcp` with the `mcp` client, over stdio and over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from spacetools.sim.layout import build_scene
from spacetools.tools import imagecodec

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


@pytest.fixture(scope="module")
def http_url() -> Any:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [*SERVE, "--mcp-transport", "streamable-http", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content if part.type == "text")


async def _exercise(session: ClientSession, scene: dict[str, Any], image: str) -> None:
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert {"open_session", "add_image", "close_session", "sam2-segment_from_point"} <= set(tools)
    assert all("." not in name for name in tools)
    assert "session_id" in tools["depth_estimator-estimate_depth"].input_schema["required"]
    assert "image_index" in tools["depth_estimator-estimate_depth"].input_schema["properties"]

    opened = await session.call_tool("open_session", {"images": [image], "scenes": [scene["spec"]]})
    assert not opened.is_error, _text(opened)
    session_id = _text(opened).split("session_id: ")[1].split()[0]

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
    await session.call_tool("close_session", {"session_id": session_id})
    closed = await session.call_tool(
        "depth_estimator-estimate_depth", {"session_id": session_id, "image_index": 0}
    )
    assert closed.is_error and "closed, expired or unknown" in _text(closed)


@pytest.mark.slow
def test_mcp_over_stdio_with_an_image_file(scene: dict[str, Any]) -> None:
    async def run() -> None:
        async with stdio_session() as session:
            await _exercise(session, scene, scene["path"])

    anyio.run(run)


@pytest.mark.slow
def test_mcp_over_streamable_http_with_a_data_url(scene: dict[str, Any], http_url: str) -> None:
    async def run() -> None:
        async with streamable_http_client(http_url) as streams:
            read, write = streams[0], streams[1]
            async with _session(read, write) as session:
                await _exercise(session, scene, imagecodec.to_data_url(scene["rgb"]))
                # Over HTTP, a file path on the server is not an image source.
                refused = await session.call_tool("open_session", {"images": [scene["path"]]})
                assert refused.is_error and "cannot read the image" in _text(refused)

    anyio.run(run)
