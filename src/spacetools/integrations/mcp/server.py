"""The Toolshed as an MCP server (`spacetools serve --mcp`), on the `mcp` 2.x server API.

An MCP client works in sessions, as the rollout does: it opens one with its images, calls tools on it,
and closes it. Three tools manage sessions, and every Toolshed tool method is one MCP tool:

- ``open_session(images, attachments=None, seed=None)``: images as PNG/JPEG data URLs (or, over stdio,
  file paths), with each image's attachment (its metadata for the tools, e.g. ``{"scene": <scene spec
  JSON>}`` for a simulated image); answers the ``session_id`` as data (structured content);
- ``new_scene(seed, n_objects=None)``: a seeded SpatialSim tabletop, rendered, in a new session whose
  image 0 it is; answers the ``session_id``, the object names and the image;
- ``add_image(session_id, image, attachment=None)``: one more image, answering its ``image_index``;
- ``close_session(session_id)``;
- each tool method, named as function-calling APIs accept (``sam2.segment_from_point`` becomes
  ``sam2-segment_from_point``, see :class:`~spacetools.kit.function_names.FunctionNames`), takes the
  tool's own arguments plus ``session_id``. Its result is the tool's text, then the images it made as
  image content; those images join the session under the indices the text names. The same result is
  structured content too (``text``, the tool's structured ``value``, ``image_indices``). Tool failures
  are results with ``isError`` set, as the model would read them in the rollout.

It keeps the HTTP Toolshed's limits (:class:`~spacetools.toolshed.limits.ServerLimits`): images over
``max_image_pixels`` are refused before decoding, the Toolshed's session and memory caps answer a clear
error, and over streamable HTTP (:func:`streamable_http_app`) request bodies are capped, the bearer token
is the HTTP server's, and log lines that carry a client's text are cut short.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool as MCPTool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, ImageContent, TextContent
from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette

from spacetools.agent.protocol import image_note
from spacetools.kit import imagecodec
from spacetools.kit.definition import ToolResult, ToolSpec
from spacetools.kit.errors import TooManySessionsError
from spacetools.kit.function_names import FunctionNames
from spacetools.toolshed.http import BearerTokenMiddleware
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.shed import Session, Toolshed

__all__ = ["MAX_LOGGED_CHARS", "SESSION_ID", "create_mcp_server", "shorten_log_lines", "streamable_http_app"]

SESSION_ID = "session_id"
MAX_LOGGED_CHARS = 500
"""Longest log line or echoed client text: a tool name or session id of 100,000 characters is cut."""
_SESSION_ID_SCHEMA = {"type": "string", "description": "The session from open_session."}


class OpenedSession(BaseModel):
    """What ``open_session`` answers."""

    session_id: str
    image_count: int


class AddedImage(BaseModel):
    """What ``add_image`` answers."""

    image_index: int


class ClosedSession(BaseModel):
    """What ``close_session`` answers."""

    session_id: str
    closed: bool


_NEW_SCENE_SCHEMA = {
    "type": "object",
    "properties": {
        "seed": {"type": "integer", "description": "The scene seed: the same seed gives the same scene."},
        "n_objects": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "Objects (default 3-10).",
        },
    },
    "required": ["seed"],
}


class _Arguments(ArgModelBase):
    """Hands the arguments on as they came: the Toolshed validates them and words the errors."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


class _Front:
    """The MCP server's view of one Toolshed: its sessions and how images come in."""

    def __init__(self, toolshed: Toolshed, read_local_files: bool, max_image_pixels: int) -> None:
        self.toolshed = toolshed
        self.read_local_files = read_local_files
        self.max_image_pixels = max_image_pixels

    def session(self, arguments: dict[str, Any]) -> Session:
        session_id = arguments.pop(SESSION_ID, None)
        if not isinstance(session_id, str):
            raise ToolError(f"give the {SESSION_ID} that open_session answered")
        try:
            return self.toolshed.session(session_id)
        except KeyError:
            raise ToolError(
                f"session {_clipped(session_id)} is closed, expired or unknown; open one with open_session"
            ) from None

    async def image(self, data: str) -> Any:
        if not data.startswith("data:") and self.read_local_files and Path(data).is_file():
            source: str | dict[str, str] = {"path": data}
        else:
            source = data
        try:
            return await asyncio.to_thread(imagecodec.decode, source, max_pixels=self.max_image_pixels)
        except (ValueError, OSError) as exc:
            raise ToolError(f"cannot read the image {data[:40]!r}: {exc}") from None

    async def open_session(
        self,
        images: list[str],
        attachments: list[dict[str, Any] | None] | None = None,
        seed: int | None = None,
    ) -> OpenedSession:
        """Open a Toolshed session with the task's images; every tool call names it.

        Args:
            images: The images, as PNG or JPEG data URLs (or file paths, when the server runs over stdio).
            attachments: Each image's metadata for the tools (null for none), e.g. {"scene": "<scene spec
                JSON>"} for an image of a simulated scene.
            seed: The session seed (reproducible tool noise).
        """
        arrays = [await self.image(image) for image in images]
        try:
            session = self.toolshed.open_session(arrays, attachments, seed)
        except (TooManySessionsError, ValueError) as exc:  # a MemoryLimitError too: each cap names itself
            raise ToolError(str(exc)) from None
        return OpenedSession(session_id=session.id, image_count=len(arrays))

    async def new_scene(self, arguments: dict[str, Any]) -> CallToolResult:
        """A seeded SpatialSim scene in a new session: its id, the objects' names and the image."""
        from spacetools.sim.layout import build_scene

        seed, n_objects = arguments.get("seed"), arguments.get("n_objects")
        if not isinstance(seed, int) or not (n_objects is None or isinstance(n_objects, int)):
            raise ToolError("new_scene takes an integer seed (and optionally an integer n_objects)")
        try:
            with build_scene(seed, n_objects=n_objects) as scene:
                rgb, spec = scene.render().rgb, scene.spec
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        try:
            session = self.toolshed.open_session([rgb], [{"scene": spec.model_dump_json()}], seed)
        except (TooManySessionsError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        data = {SESSION_ID: session.id, "image_index": 0, "objects": [o.name for o in spec.objects]}
        png = base64.b64encode(await asyncio.to_thread(imagecodec.encode, rgb)).decode("ascii")
        return CallToolResult(
            content=[
                TextContent(type="text", text=json.dumps(data)),
                ImageContent(type="image", data=png, mime_type="image/png"),
            ],
            structured_content=data,
        )

    async def add_image(
        self, session_id: str, image: str, attachment: dict[str, Any] | None = None
    ) -> AddedImage:
        """Add an image to a session; answers its image_index.

        Args:
            session_id: The session from open_session.
            image: A PNG or JPEG data URL (or a file path, when the server runs over stdio).
            attachment: The image's metadata for the tools, e.g. {"scene": "<scene spec JSON>"} if it
                shows a simulated scene.
        """
        session = self.session({SESSION_ID: session_id})
        try:
            index = session.add_image(await self.image(image), attachment)
        except ValueError as exc:  # a MemoryLimitError too
            raise ToolError(str(exc)) from None
        return AddedImage(image_index=index)

    async def close_session(self, session_id: str) -> ClosedSession:
        """Close a session and free its variables.

        Args:
            session_id: The session from open_session.
        """
        self.session({SESSION_ID: session_id}).close()
        return ClosedSession(session_id=session_id, closed=True)

    def tool(self, spec: ToolSpec, mcp_name: str) -> MCPTool:
        parameters = dict(spec.parameters)
        parameters["properties"] = {**parameters.get("properties", {}), SESSION_ID: _SESSION_ID_SCHEMA}
        parameters["required"] = [*parameters.get("required", []), SESSION_ID]

        async def call(arguments: dict[str, Any]) -> CallToolResult:
            session = self.session(arguments)
            result = await session.call(spec.name, arguments)
            return await _content(session, result)

        return _mcp_tool(call, mcp_name, spec.description, parameters)


async def _content(session: Session, result: ToolResult) -> CallToolResult:
    # The session kept the tool's pictures (with their attachments) where they were made.
    indices = list(result.image_indices)
    text = result.text + (f"\n{image_note(indices)}" if indices else "")
    pictures = [
        ImageContent(
            type="image",
            data=base64.b64encode(await asyncio.to_thread(imagecodec.encode, image)).decode("ascii"),
            mime_type="image/png",
        )
        for image in result.images
    ]
    structured = {"text": result.text, "value": _json_or_none(result.value), "image_indices": indices}
    return CallToolResult(
        content=[TextContent(type="text", text=text), *pictures],
        structured_content=structured,
        is_error=result.is_error,
    )


def _json_or_none(value: Any) -> Any:
    """``value`` when JSON can carry it (a tool's structured value is meant to be), else None."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


def _mcp_tool(
    fn: Callable[[dict[str, Any]], Awaitable[CallToolResult]],
    name: str,
    description: str,
    schema: dict[str, Any],
) -> MCPTool:
    """An MCP tool with a given JSON schema (MCPServer derives schemas from signatures otherwise)."""
    return MCPTool(
        fn=fn,
        name=name,
        title=None,
        description=description,
        parameters=schema,
        fn_metadata=FuncMetadata(arg_model=_Arguments),
        is_async=True,
        context_kwarg=None,
        annotations=None,
    )


def create_mcp_server(
    toolshed: Toolshed, *, read_local_files: bool = False, limits: ServerLimits | None = None
) -> MCPServer[Any]:
    """An MCP server serving ``toolshed``, which it starts on startup and closes on shutdown.

    ``read_local_files`` lets clients name images by file path (right for stdio, where the client
    runs the server; not for a server others reach over HTTP). ``limits`` (default: ``ServerLimits()``)
    gives the largest image; the session and memory caps are the Toolshed's own (``toolshed_for``).
    """
    limits = limits or ServerLimits()
    front = _Front(toolshed, read_local_files, limits.max_image_pixels)
    names = FunctionNames(spec.name for spec in toolshed.specs())
    tools = [front.tool(spec, names.to_wire(spec.name)) for spec in toolshed.specs()]
    # A hand-written schema: the result carries an image beside its data.
    new_scene = "Build a seeded SpatialSim tabletop scene and open a session with its image (image_index 0); "
    new_scene += "answers session_id, the objects' names and the image."
    tools.append(_mcp_tool(front.new_scene, "new_scene", new_scene, _NEW_SCENE_SCHEMA))

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[None]:
        async with toolshed:
            yield

    server: MCPServer[Any] = MCPServer(
        name="spacetools",
        instructions="Open a session with your images (open_session), call tools with its session_id, "
        "close it when done. Image coordinates are normalized to [0, 1]; tools store large results "
        'as variables that later calls take as "$name".',
        tools=tools,
        lifespan=lifespan,
    )
    for method in (front.open_session, front.add_image, front.close_session):
        server.add_tool(method)
    return server


def streamable_http_app(server: MCPServer[Any], limits: ServerLimits, host: str) -> Starlette:
    """The server's streamable HTTP app (at ``/mcp``) with the HTTP Toolshed's protections.

    Bodies over ``max_body_bytes`` are refused (413), MCP sessions are capped at ``max_sessions`` and
    expire after ``session_ttl_s`` idle, and with a token every request must carry it (401), checked by
    the HTTP Toolshed's middleware. Check the host first with ``limits.check_exposure``.
    """
    app = server.streamable_http_app(
        host=host,
        max_request_body_size=limits.max_body_bytes,
        max_sessions=limits.max_sessions,
        session_idle_timeout=limits.session_ttl_s,
    )
    if limits.token is not None:
        app.add_middleware(BearerTokenMiddleware, token=limits.token)
    return app


class _ShortLines(logging.Filter):
    """Cuts a log line to ``MAX_LOGGED_CHARS``: the tool names and ids in it come from the client."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > MAX_LOGGED_CHARS:
            record.msg, record.args = _clipped(message), None
        return True


def shorten_log_lines(*loggers: logging.Logger) -> None:
    """Cut long lines on the root logger's handlers (where the `mcp` library's lines go) and on
    ``loggers`` (those that do not propagate to the root, such as uvicorn's)."""
    for handler_or_logger in [*logging.getLogger().handlers, *loggers]:
        if not any(isinstance(f, _ShortLines) for f in handler_or_logger.filters):
            handler_or_logger.addFilter(_ShortLines())


def _clipped(text: str) -> str:
    """``text``, or its start and its length when it is longer than ``MAX_LOGGED_CHARS``."""
    if len(text) <= MAX_LOGGED_CHARS:
        return text
    return f"{text[:MAX_LOGGED_CHARS]}… ({len(text):,} characters)"
