"""`RemoteToolshed`: the Toolshed served by `spacetools serve`, with the in-process Toolshed's surface.

It is a drop-in for `run_episode(policy, toolshed, task)`: `specs()` and `open_session()` are plain
calls like the Toolshed's, so the server session is opened lazily, by the first call (or by
`await session.open()`), with every image added so far; images added later are uploaded before the
next call. `close()` is a plain call too: it schedules the server-side release, which
`RemoteToolshed.close()` waits for.

Results are `ToolResult`s. Variable values stay in the server (the model only ever uses their names,
as `"$name"`), so `result.variables` maps each stored name to a `None` placeholder; `result.value` is
the tool's structured result. The tools' pictures are mirrored at the server's indices with an empty
attachment: their attachments stay with the server session, where the calls on them run. Calls never
raise: a network failure, a lost session or a refusal (the server's limits) comes back as an error
result (`Error: ConnectionError: …`, `Error: UnknownSessionError: …`). What does raise (`open()`, `start()`,
`fetch_stats()`) raises the errors of `spacetools.kit.errors` that the Toolshed raises in process,
rebuilt from the code in the server's answer.

This module needs httpx and pydantic only: the wire models live in `spacetools.toolshed.wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx
import numpy as np
from pydantic import TypeAdapter

from spacetools.kit import imagecodec
from spacetools.kit.definition import ToolResult, ToolSpec
from spacetools.kit.errors import error_for_code
from spacetools.toolshed.limits import TOKEN_ENV
from spacetools.toolshed.session import check_attachment, check_image, check_session_inputs
from spacetools.toolshed.wire import (
    Attachment,
    CallRequest,
    CallResponse,
    ImageRequest,
    ImageResponse,
    SessionRequest,
    SessionResponse,
    ToolSpecResponse,
)

__all__ = ["RemoteSession", "RemoteToolshed"]

Arguments = Mapping[str, Any] | str | None

_log = logging.getLogger(__name__)
_CALL_RESULTS = TypeAdapter(list[CallResponse])
_SPECS = TypeAdapter(list[ToolSpecResponse])


class RemoteSession:
    """One episode's session on a remote Toolshed; the `Session` API, served over HTTP."""

    def __init__(
        self,
        shed: RemoteToolshed,
        images: list[np.ndarray],
        attachments: list[dict[str, Any]],
        seed: int | None,
    ) -> None:
        self._shed = shed
        self._images = images
        self._attachments = attachments
        self._seed = seed
        self._id: str | None = None
        self._uploaded = 0  # images the server session holds (the first ones of self._images)
        self._arriving: dict[int, np.ndarray] = {}  # tool pictures whose predecessors are still running
        self._sync_lock = asyncio.Lock()
        self._closed = False

    @property
    def id(self) -> str | None:
        """The server's session id; None until the session is opened (by the first call)."""
        return self._id

    @property
    def images(self) -> list[np.ndarray]:
        """The conversation's images, addressed by `image_index`."""
        return self._images

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def add_image(self, image: np.ndarray, attachment: Attachment = None) -> int:
        """Append an image to the conversation (uploaded before the next call); returns its `image_index`.

        `attachment` is the image's metadata for the tools."""
        index = len(self._images)
        check_image(image, index)
        checked = check_attachment(attachment, index)
        self._images.append(image)
        self._attachments.append(checked)
        return index

    async def open(self) -> str:
        """Open the server session if needed and upload pending images; returns the session id."""
        async with self._sync_lock:
            if self._closed:
                raise RuntimeError("the session is closed")
            client = self._shed.client
            if self._id is None:
                count = len(self._images)
                urls = await asyncio.gather(
                    *(asyncio.to_thread(imagecodec.to_data_url, image) for image in self._images[:count])
                )
                opening = SessionRequest(
                    images=list(urls), attachments=list(self._attachments[:count]), seed=self._seed
                )
                response = await client.post("/sessions", json=opening.model_dump())
                _raise_for_status(response)
                self._id = SessionResponse.model_validate_json(response.content).id
                self._uploaded = count
            while self._uploaded < len(self._images):
                url = await asyncio.to_thread(imagecodec.to_data_url, self._images[self._uploaded])
                adding = ImageRequest(image=url, attachment=self._attachments[self._uploaded])
                response = await client.post(f"/sessions/{self._id}/images", json=adding.model_dump())
                _raise_for_status(response)
                index = ImageResponse.model_validate_json(response.content).index
                if index != self._uploaded:
                    raise RuntimeError(f"the server gave image index {index}, expected {self._uploaded}")
                self._uploaded += 1
            return self._id

    async def call(self, name: str, arguments: Arguments = None) -> ToolResult:
        """Call a tool method; failures (the tool's or the network's) come back as error results."""
        return (await self.call_many([(name, arguments)]))[0]

    async def call_many(self, calls: Sequence[tuple[str, Arguments]]) -> list[ToolResult]:
        """Run the calls of one turn in parallel on the server; results in call order."""
        try:
            session_id = await self.open()
            body = [
                CallRequest(name=name, arguments=_jsonable(arguments)).model_dump()
                for name, arguments in calls
            ]
            # ASCII with escapes: model text may hold lone surrogates, which JSON allows and UTF-8 does not.
            content = json.dumps(body, ensure_ascii=True)
            deadline = asyncio.get_running_loop().time() + self._shed.timeout_s
            while True:
                response = await self._shed.client.post(
                    f"/sessions/{session_id}/calls",
                    params={"images": self._shed.fetch_images},
                    content=content,
                    headers={"content-type": "application/json"},
                )
                # 503: the server is at its limit of calls in flight; wait as it asks, within our timeout.
                wait_s = _retry_after_s(response)
                if wait_s is None or asyncio.get_running_loop().time() + wait_s > deadline:
                    break
                await asyncio.sleep(wait_s)
            _raise_for_status(response)
            # json, not pydantic's parser: tool text may hold lone surrogates (sent escaped, as JSON allows).
            results = _CALL_RESULTS.validate_python(json.loads(response.content))
            converted = [await _to_tool_result(result) for result in results]
        except Exception as exc:  # every failure must reach the model as text, never end the episode
            return [ToolResult.error(_describe(exc)) for _ in calls]
        self._mirror_tool_images(converted)
        return converted

    def _mirror_tool_images(self, results: list[ToolResult]) -> None:
        """The server session kept the tools' pictures; hold them here at the same indices.

        A turn's calls run in parallel and may answer in any order, so a picture whose predecessors
        have not arrived yet waits in `_arriving` until the indices before it are filled.
        """
        for result in results:
            fetched = len(result.images) == len(result.image_indices)
            if not fetched or any(index < len(self._images) for index in result.image_indices):
                result.image_indices = []  # pictures not fetched (or out of step): not mirrored here
                continue
            self._arriving.update(zip(result.image_indices, result.images, strict=True))
        while self._uploaded == len(self._images) and len(self._images) in self._arriving:
            self._images.append(self._arriving.pop(len(self._images)))
            self._attachments.append({})
            self._uploaded += 1

    def close(self) -> None:
        """Release the session; the server-side release runs in the background."""
        if self._closed:
            return
        self._closed = True
        if self._id is not None:
            self._shed._release_later(self._id)

    async def aclose(self) -> None:
        """Release the session and wait until the server has released it."""
        if self._closed:
            return
        self._closed = True
        if self._id is not None:
            await self._shed._release(self._id)


class RemoteToolshed:
    """A client of a Toolshed server, usable wherever the rollout takes a started `Toolshed`."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        fetch_images: bool = True,
        token: str | None = None,
    ) -> None:
        """
        Args:
            base_url: The server's address, e.g. ``http://127.0.0.1:8765``.
            timeout_s: Most seconds one request may take (a turn's calls are one request each, queueing
                included).
            fetch_images: Whether call results carry the images tools made (the rollout records them).
            token: The server's bearer token (default: the SPACETOOLS_TOOLSHED_TOKEN environment variable).
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.fetch_images = fetch_images
        self._client: httpx.AsyncClient | None = None
        self._specs: list[ToolSpec] | None = None
        self._releases: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client (after `start()`)."""
        if self._client is None:
            raise RuntimeError("the RemoteToolshed is not started: use `async with` or `await start()`")
        return self._client

    async def start(self) -> None:
        """Connect and fetch the tool specs; `ConnectionError` when the server cannot be reached."""
        if self._client is not None:
            return
        client = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout_s, headers=self._headers)
        try:
            response = await client.get("/tools/specs")
            _raise_for_status(response)
            specs = _SPECS.validate_json(response.content)
        except Exception as exc:
            await client.aclose()
            raise ConnectionError(
                f"cannot use the Toolshed server at {self.base_url}: {_describe(exc)}"
            ) from exc
        self._specs = [ToolSpec(**spec.model_dump()) for spec in specs]
        self._client = client

    async def close(self) -> None:
        """Wait for pending session releases, then close the connection."""
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> RemoteToolshed:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def specs(self) -> list[ToolSpec]:
        """The specs of every tool method the server serves (fetched by `start()`)."""
        if self._specs is None:
            raise RuntimeError("the RemoteToolshed is not started: use `async with` or `await start()`")
        return list(self._specs)

    def open_session(
        self,
        images: Sequence[np.ndarray],
        attachments: Sequence[Attachment] | None = None,
        seed: int | None = None,
    ) -> RemoteSession:
        """A session for one episode, opened on the server by its first call.

        `attachments` holds each image's metadata for the tools."""
        images, checked = check_session_inputs(images, attachments)
        return RemoteSession(self, images, checked, seed)

    async def fetch_stats(self) -> dict[str, Any]:
        """The server's live statistics (`Toolshed.stats()` there)."""
        response = await self.client.get("/stats")
        _raise_for_status(response)
        stats: dict[str, Any] = response.json()
        return stats

    def _release_later(self, session_id: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # closed from plain code: the async client cannot run, so release directly
            with contextlib.suppress(httpx.HTTPError):
                httpx.delete(
                    f"{self.base_url}/sessions/{session_id}", timeout=self.timeout_s, headers=self._headers
                )
            return
        task = loop.create_task(self._release(session_id))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, session_id: str) -> None:
        try:
            response = await self.client.delete(f"/sessions/{session_id}")
            if response.status_code not in (204, 404):  # 404: already expired there
                _raise_for_status(response)
        except Exception as exc:  # the server's session time to live reclaims it anyway
            _log.warning("could not release session %s: %s", session_id, _describe(exc))


def _raise_for_status(response: httpx.Response) -> None:
    """The error of `spacetools.kit.errors` that the server's answer names by its code (or its status),
    as the Toolshed in this process would raise it."""
    if response.is_success:
        return
    try:
        body = response.json()
        detail, code = body.get("detail", response.text), body.get("code")
    except (json.JSONDecodeError, AttributeError):
        detail, code = response.text, None
    error = error_for_code(code if isinstance(code, str) else None, response.status_code)
    raise error(f"HTTP {response.status_code} from {response.request.url.path}: {detail}")


async def _to_tool_result(result: CallResponse) -> ToolResult:
    images = [await asyncio.to_thread(imagecodec.decode, url) for url in result.images]
    return ToolResult(
        text=result.text,
        images=images,
        variables=dict.fromkeys(result.variables),
        is_error=result.is_error,
        value=result.value,
        image_indices=list(result.image_indices),
    )


def _retry_after_s(response: httpx.Response) -> float | None:
    """The seconds a 503 asks to wait before retrying, or None when the response is not one."""
    if response.status_code != 503:
        return None
    try:
        return min(max(float(response.headers.get("retry-after", "1")), 0.0), 60.0)
    except ValueError:
        return 1.0


def _jsonable(arguments: Arguments) -> dict[str, Any] | str | None:
    return dict(arguments) if isinstance(arguments, Mapping) else arguments


def _describe(exc: BaseException) -> str:
    """`Kind: message`, with httpx's transport failures named as the builtins a reader knows."""
    if isinstance(exc, httpx.TimeoutException):
        return f"TimeoutError: the Toolshed server did not answer in time ({type(exc).__name__}: {exc})"
    kind = "ConnectionError" if isinstance(exc, httpx.TransportError) else type(exc).__name__
    return f"{kind}: {exc}" if str(exc) else kind
