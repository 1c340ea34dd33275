"""One error vocabulary wherever the tools run: the same failing calls raise the same exception types in
process, in worker processes, on Ray and over HTTP (a real uvicorn server on 127.0.0.1), and the same
failing tool calls give the same error results."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from serving import serving

from spacetools.kit.errors import (
    ERRORS,
    BodyTooLargeError,
    ImageTooLargeError,
    InvalidRequestError,
    MemoryLimitError,
    ServerError,
    SpacetoolsError,
    TooManySessionsError,
    UnknownSessionError,
    error_for_code,
)
from spacetools.tools.diagnostics import FaultTool
from spacetools.toolshed import ToolDeployment, ToolProvider
from spacetools.toolshed.client import RemoteToolshed
from spacetools.toolshed.http import toolshed_for
from spacetools.toolshed.limits import ServerLimits

PROVIDERS = ["inprocess", "process", "ray", "http"]
MAX_SESSIONS = 2
MAX_SESSION_BYTES = 100_000
IMAGE = np.zeros((8, 8, 3), dtype=np.uint8)
BIG_IMAGE = np.zeros((200, 200, 3), dtype=np.uint8)  # 120,000 bytes: over the session limit
CloseOnServer = Callable[[str], Awaitable[None]]


def _deployments(backend: str) -> list[ToolDeployment]:
    share: dict[str, Any] = {"num_cpus": 0.1} if backend == "ray" else {}
    return [ToolDeployment(tool=FaultTool, backend=backend, instances=1, timeout_s=30.0, **share)]


@contextlib.asynccontextmanager
async def _provider(kind: str) -> AsyncIterator[tuple[ToolProvider, CloseOnServer]]:
    """A started provider of `kind`, and how to close one of its sessions from the server's side."""
    limits = ServerLimits(max_sessions=MAX_SESSIONS, max_session_bytes=MAX_SESSION_BYTES)
    if kind != "http":
        async with toolshed_for(_deployments(kind), limits) as shed:

            async def close_here(session_id: str) -> None:
                shed.session(session_id).close()

            yield shed, close_here
        return
    with serving(toolshed_for(_deployments("inprocess"), limits), limits) as url:
        async with RemoteToolshed(url, timeout_s=30) as remote:

            async def close_there(session_id: str) -> None:
                (await remote.client.delete(f"/sessions/{session_id}")).raise_for_status()

            yield remote, close_there


@pytest.fixture(params=PROVIDERS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("local_ray")
    return str(request.param)


async def _opened(provider: ToolProvider, images: list[np.ndarray]) -> str:
    """Open a session (a remote one opens on the server by `open()`); its id."""
    return await provider.open_session(images).open()


async def _raised(opening: Awaitable[Any]) -> type[BaseException] | None:
    try:
        await opening
    except Exception as exc:
        return type(exc)
    return None


async def _failures(kind: str) -> dict[str, Any]:
    """The exception type (or error result) each failing call gives on the provider `kind`."""
    async with _provider(kind) as (provider, close_on_server):
        outcomes: dict[str, Any] = {
            "bad image": await _raised(_opened(provider, [IMAGE.astype(np.float32)])),
            "image over the session limit": await _raised(_opened(provider, [BIG_IMAGE])),
        }
        session = provider.open_session([IMAGE])
        session_id = await session.open()
        outcomes["unknown tool"] = (await session.call("fault.raise_eror", {"message": "x"})).text
        outcomes["bad arguments"] = (await session.call("fault.raise_error", {"message": 5})).text
        outcomes["tool error"] = (await session.call("fault.raise_error", {"message": "boom"})).text
        await _opened(provider, [IMAGE])  # the second of MAX_SESSIONS
        outcomes["too many sessions"] = await _raised(_opened(provider, [IMAGE]))
        await close_on_server(session_id)

        async def add_image_and_open() -> str:
            session.add_image(IMAGE)  # a remote session sends it with `open()`
            return await session.open()

        outcomes["unknown session"] = await _raised(add_image_and_open())
        return outcomes


def test_the_same_failures_raise_the_same_types_everywhere(kind: str) -> None:
    outcomes = asyncio.run(_failures(kind))
    assert outcomes == {
        "bad image": InvalidRequestError,
        "image over the session limit": MemoryLimitError,
        "too many sessions": TooManySessionsError,
        "unknown session": UnknownSessionError,
        # A failing tool call stays a result for the model, the same text wherever the tool runs.
        "unknown tool": "Error: unknown tool 'fault.raise_eror'. Did you mean 'fault.raise_error'? "
        "Available tools: fault.crash, fault.hang, fault.raise_error, fault.context, fault.make_array, "
        "fault.echo, fault.describe, fault.random",
        "bad arguments": "Error: invalid arguments for fault.raise_error: message: Input should be a valid "
        "string (got 5)",
        "tool error": "Error: RuntimeError: boom",
    }


def test_refusals_at_the_servers_door_raise_their_types() -> None:
    """What only a server refuses (a body or an image over its limits) raises the vocabulary's types too."""
    limits = ServerLimits(max_body_bytes=50_000, max_call_body_bytes=50_000, max_image_pixels=1_000)
    noise = np.random.default_rng(0).integers(0, 256, (150, 150, 3), dtype=np.uint8)  # ~68 kB as PNG

    async def refusals(url: str) -> list[type[BaseException] | None]:
        async with RemoteToolshed(url, timeout_s=30) as remote:
            return [
                await _raised(remote.open_session([noise]).open()),
                await _raised(remote.open_session([np.zeros((40, 40, 3), dtype=np.uint8)]).open()),
            ]

    with serving(toolshed_for(_deployments("inprocess"), limits), limits) as url:
        assert asyncio.run(refusals(url)) == [BodyTooLargeError, ImageTooLargeError]


def test_each_error_has_its_code_and_comes_back_from_it() -> None:
    assert all(issubclass(error, SpacetoolsError) for error in ERRORS)
    assert len({error.code for error in ERRORS}) == len(ERRORS)
    for error in ERRORS:
        assert error_for_code(error.code, 500) is error
    # An answer without a code (the framework's own) is read by its status; an unknown one is a ServerError.
    assert error_for_code(None, 429) is TooManySessionsError
    assert error_for_code("from_a_newer_server", 418) is ServerError
    assert str(UnknownSessionError("session x is closed")) == "session x is closed"  # not quoted as KeyError
