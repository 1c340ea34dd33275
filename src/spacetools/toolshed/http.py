"""The Toolshed over HTTP: a FastAPI app that serves one Toolshed to rollout processes elsewhere.

Tools then run decoupled from the RL or evaluation loop: the loop talks to this app through
`spacetools.toolshed.client.RemoteToolshed`. The wire format, defined here and shared with the client:

- Images travel as base64 data URIs (`data:image/png;base64,…`; JPEG is accepted on upload).
- Variables never leave the server: a call result lists the names it stored, the model refers to them
  as `"$name"` in later calls of the same session, and the server resolves them.
- Tool failures are results with `is_error` true, never HTTP errors. HTTP errors mean the request
  itself is wrong: 404 for a session that is closed, expired or never existed, 422 for a malformed body.

Endpoints: `GET /health`, `GET /tools` (OpenAI function schemas), `GET /tools/hermes` (the prompt's
`<tools>` block), `POST /sessions`, `POST /sessions/{id}/calls[?images=true]`,
`POST /sessions/{id}/images`, `DELETE /sessions/{id}`, `GET /stats`, `GET /metrics` (Prometheus).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException, Query, Response, status
from fastapi.responses import PlainTextResponse
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, Field

from spacetools.tools.definition import ToolResult, hermes_tools_block
from spacetools.toolshed.metrics import CONTENT_TYPE, render_metrics
from spacetools.toolshed.session import check_image
from spacetools.toolshed.shed import Session, Toolshed

__all__ = [
    "CallRequest",
    "CallResponse",
    "HealthResponse",
    "ImageRequest",
    "ImageResponse",
    "SessionRequest",
    "SessionResponse",
    "create_app",
    "decode_image",
    "encode_image",
]

_ACCEPTED_MEDIA_TYPES = ("image/png", "image/jpeg")


def encode_image(image: np.ndarray) -> str:
    """A `(H, W, 3)` uint8 RGB array as a lossless `data:image/png;base64,…` URI."""
    check_image(image)
    buffer = io.BytesIO()
    # Level 1: these images are sent once and read once, so speed matters more than size.
    Image.fromarray(image, "RGB").save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(uri: str) -> np.ndarray:
    """A PNG or JPEG base64 data URI as a `(H, W, 3)` uint8 RGB array; `ValueError` saying what is wrong."""
    header, comma, payload = uri.partition(",")
    media_type = header.removeprefix("data:").removesuffix(";base64")
    if not comma or not header.startswith("data:") or not header.endswith(";base64"):
        raise ValueError(f"expected a base64 data URI like 'data:image/png;base64,…', got {uri[:40]!r}")
    if media_type not in _ACCEPTED_MEDIA_TYPES:
        raise ValueError(
            f"unsupported image type {media_type!r}; send one of {', '.join(_ACCEPTED_MEDIA_TYPES)}"
        )
    try:
        with Image.open(io.BytesIO(base64.b64decode(payload, validate=True))) as picture:
            return np.asarray(picture.convert("RGB"), dtype=np.uint8)
    except (binascii.Error, UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"the {media_type} data URI does not hold a readable image: {exc}") from None


class SessionRequest(BaseModel):
    """`POST /sessions`: open a session for one episode."""

    images: list[str] = Field(description="The task's images as PNG or JPEG base64 data URIs.")
    scenes: list[str | None] | None = Field(
        default=None, description="The scene spec JSON of each image (None where it has none)."
    )
    seed: int | None = Field(default=None, description="The session seed; enters every call's random seed.")


class SessionResponse(BaseModel):
    """The id of a new session and how many images it holds."""

    id: str
    image_count: int


class ImageRequest(BaseModel):
    """`POST /sessions/{id}/images`: append an image to the conversation."""

    image: str = Field(description="A PNG or JPEG base64 data URI.")
    scene: str | None = Field(default=None, description="The image's scene spec JSON, if simulated.")


class ImageResponse(BaseModel):
    """The `image_index` the added image got."""

    index: int


class CallRequest(BaseModel):
    """One tool call of `POST /sessions/{id}/calls` (the body is a list of these)."""

    name: str = Field(description='The public tool method name, e.g. "echo.echo".')
    # Any JSON, not only objects: the Toolshed answers other shapes with the error result the model
    # would get in process, rather than the request failing as a whole.
    arguments: Any = Field(
        default=None, description='A JSON object (or its text); "$name" strings refer to variables.'
    )


class CallResponse(BaseModel):
    """The result of one call, as the model and the rollout see it."""

    text: str
    is_error: bool
    variables: list[str] = Field(description="Names of the variables stored (their values stay here).")
    images: list[str] = Field(default_factory=list, description="PNG data URIs; only with ?images=true.")


class HealthResponse(BaseModel):
    """`GET /health`."""

    status: Literal["ok"] = "ok"
    profile: str
    tool_methods: int
    open_sessions: int


def create_app(toolshed: Toolshed) -> FastAPI:
    """A FastAPI app serving `toolshed`, which the app starts on startup and closes on shutdown."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with toolshed:
            yield

    app = FastAPI(title="spacetools Toolshed", lifespan=lifespan)

    def open_session(session_id: str) -> Session:
        try:
            return toolshed.session(session_id)
        except KeyError:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"session {session_id} is closed, expired or unknown; open a new one with POST /sessions",
            ) from None

    async def decode_or_422(uris: list[str]) -> list[np.ndarray]:
        # Decoding runs in threads so large uploads do not stall the calls of other sessions.
        try:
            return list(await asyncio.gather(*(asyncio.to_thread(decode_image, uri) for uri in uris)))
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    async def to_response(result: ToolResult, with_images: bool) -> CallResponse:
        images = (
            [await asyncio.to_thread(encode_image, image) for image in result.images] if with_images else []
        )
        return CallResponse(
            text=result.text, is_error=result.is_error, variables=sorted(result.variables), images=images
        )

    @app.get("/health")
    async def health() -> HealthResponse:
        """Liveness, with the realism profile and the size of the service."""
        stats = toolshed.stats()
        return HealthResponse(
            profile=toolshed.profile,
            tool_methods=len(toolshed.specs()),
            open_sessions=stats["sessions"]["open"],
        )

    @app.get("/tools")
    async def tools() -> list[dict[str, Any]]:
        """The OpenAI function schema of every tool method served."""
        return [spec.to_openai() for spec in toolshed.specs()]

    @app.get("/tools/hermes", response_class=PlainTextResponse)
    async def tools_hermes() -> str:
        """The `<tools>…</tools>` block of a hermes-style system prompt."""
        return hermes_tools_block(toolshed.specs())

    @app.post("/sessions", status_code=status.HTTP_201_CREATED)
    async def create_session(request: SessionRequest) -> SessionResponse:
        """Open a session with the task's images."""
        images = await decode_or_422(request.images)
        try:
            session = toolshed.open_session(images, request.scenes, seed=request.seed)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return SessionResponse(id=session.id, image_count=len(session.images))

    @app.post("/sessions/{session_id}/calls")
    async def call(
        session_id: str,
        calls: list[CallRequest],
        images: bool = Query(False, description="Return the images tools made, as PNG data URIs."),
    ) -> list[CallResponse]:
        """Run a turn's calls in parallel; results in call order, tool failures as error results."""
        session = open_session(session_id)
        results = await session.call_many([(item.name, item.arguments) for item in calls])
        return [await to_response(result, images) for result in results]

    @app.post("/sessions/{session_id}/images", status_code=status.HTTP_201_CREATED)
    async def add_image(session_id: str, request: ImageRequest) -> ImageResponse:
        """Append an image (e.g. one a tool drew) to the conversation."""
        session = open_session(session_id)
        (image,) = await decode_or_422([request.image])
        return ImageResponse(index=session.add_image(image, request.scene))

    @app.delete("/sessions/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
    async def close_session(session_id: str) -> Response:
        """Release a session and its variables."""
        open_session(session_id).close()
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        """Live statistics: per tool (calls, errors, latency, queues) and sessions."""
        return toolshed.stats()

    @app.get("/metrics")
    async def metrics() -> Response:
        """The statistics in the Prometheus text format."""
        return Response(render_metrics(toolshed.stats()), media_type=CONTENT_TYPE)

    return app
