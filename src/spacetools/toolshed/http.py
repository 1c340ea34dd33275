"""The Toolshed over HTTP: a FastAPI app that serves one Toolshed to rollout processes elsewhere.

Tools then run decoupled from the RL or evaluation loop: the loop talks to this app through
`spacetools.toolshed.client.RemoteToolshed`. The wire format (request and response models, status codes)
is `spacetools.toolshed.wire`; the limits the server enforces are `spacetools.toolshed.limits`.

Endpoints: `GET /health`, `GET /tools` (OpenAI function schemas), `GET /tools/hermes` (the prompt's
`<tools>` block), `GET /tools/specs` (the specs with their geometry declarations, for `RemoteToolshed`), `POST /sessions`, `POST /sessions/{id}/calls[?images=true]`,
`POST /sessions/{id}/images`, `DELETE /sessions/{id}`, `GET /stats`, `GET /metrics` (Prometheus).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import numpy as np
from fastapi import FastAPI, HTTPException, Request, Response, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spacetools.kit import imagecodec
from spacetools.kit.definition import ToolResult, hermes_tools_block
from spacetools.toolshed.admission import RETRY_AFTER_S, CallAdmission, CallAdmissionMiddleware
from spacetools.toolshed.deadlines import Deadlines
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.metrics import CONTENT_TYPE, render_metrics
from spacetools.toolshed.session import MemoryLimitError, TooManySessionsError
from spacetools.toolshed.shed import Session, Toolshed
from spacetools.toolshed.wire import (
    CallRequest,
    CallResponse,
    HealthResponse,
    ImageRequest,
    ImageResponse,
    SessionRequest,
    SessionResponse,
    ToolAvailability,
    ToolSpecResponse,
)

__all__ = [
    "BearerTokenMiddleware",
    "SafeJSONResponse",
    "create_app",
    "invalid_body",
    "return_freed_memory",
    "toolshed_for",
]

_T = TypeVar("_T")
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024


class SafeJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped, so text with lone surrogates (legal in JSON, not in
    UTF-8) is still sent, as `\\ud800`, instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return _JSON.encode(content).encode("ascii")


_JSON = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


async def invalid_body(_request: Request, exc: Exception) -> Response:
    """The 422 for a body that does not validate (an exception handler for `RequestValidationError`):
    the errors without the input FastAPI's own handler echoes, which may be what could not be encoded."""
    assert isinstance(exc, RequestValidationError)
    return SafeJSONResponse({"detail": _brief_errors(exc.errors())}, status_code=422)


def toolshed_for(deployments: Any, limits: ServerLimits, **options: Any) -> Toolshed:
    """A Toolshed with the memory, session and queue limits of `limits` (for `create_app`)."""
    return Toolshed(
        deployments,
        max_session_bytes=limits.max_session_bytes,
        max_total_bytes=limits.max_total_bytes,
        session_ttl_s=limits.session_ttl_s,
        max_sessions=limits.max_sessions,
        max_queue_wait_s=limits.max_queue_wait_s,
        **options,
    )


def return_freed_memory() -> bool:
    """Make this process give freed large buffers back to the system (glibc only; False elsewhere).

    glibc raises its mmap threshold as large buffers are freed, after which arrays of a few hundred
    KB come from the heap, where freeing them fragments memory instead of returning it: a server
    that stores and evicts such variables for days then grows well past its memory cap. Pinning the
    threshold keeps every buffer over 128 KB in its own mapping, released when it is freed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc
        return False


def create_app(toolshed: Toolshed, limits: ServerLimits | None = None) -> FastAPI:
    """A FastAPI app serving `toolshed`, which the app starts on startup and closes on shutdown.

    `limits` (default: `ServerLimits()`) sets what requests are accepted; the Toolshed's own memory,
    session and queue limits are set where it is made (`toolshed_for`).
    """
    limits = limits or ServerLimits()
    admission = CallAdmission(limits.max_calls_in_flight, toolshed.method_router)
    body_deadlines = Deadlines()  # the call bodies' arrival, on one timer

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with toolshed:
            yield

    app = FastAPI(
        title="spacetools Toolshed",
        lifespan=lifespan,
        max_body_size=limits.max_body_bytes,
        default_response_class=SafeJSONResponse,
    )
    if limits.token is not None:
        app.add_middleware(BearerTokenMiddleware, token=limits.token)
    app.add_middleware(CallAdmissionMiddleware, admission=admission)  # the last added runs first

    app.add_exception_handler(RequestValidationError, invalid_body)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        cause = exc.__cause__
        # FastAPI answers 400 for a body json cannot read though it is JSON: an integer of more digits
        # than Python converts, or nesting deeper than its recursion limit. Say which, as a 422.
        if exc.status_code == 400 and isinstance(cause, ValueError | RecursionError):
            reason = "it is nested too deeply" if isinstance(cause, RecursionError) else str(cause)
            return SafeJSONResponse({"detail": f"the body cannot be read as JSON: {reason}"}, status_code=422)
        return await http_exception_handler(request, exc)

    def open_session(session_id: str) -> Session:
        try:
            return toolshed.session(session_id)
        except KeyError:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"session {session_id} is closed, expired or unknown; open a new one with POST /sessions",
            ) from None

    async def decode_images(data_urls: list[str]) -> list[np.ndarray]:
        # Decoding runs in threads so large uploads do not stall the calls of other sessions.
        try:
            return list(
                await asyncio.gather(
                    *(
                        asyncio.to_thread(imagecodec.decode, url, max_pixels=limits.max_image_pixels)
                        for url in data_urls
                    )
                )
            )
        except imagecodec.ImageTooLargeError as exc:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
        except imagecodec.ImageDecodeError as exc:
            raise HTTPException(422, str(exc)) from None

    async def to_response(result: ToolResult, with_images: bool) -> dict[str, Any]:
        """A `CallResponse` as the JSON object it is sent as (built directly: a model per result, then
        FastAPI's validation and dump of the list, cost more than the rest of a no-op call's answer)."""
        images = (
            [await asyncio.to_thread(imagecodec.to_data_url, image) for image in result.images]
            if with_images
            else []
        )
        return {
            "text": result.text,
            "is_error": result.is_error,
            "variables": sorted(result.variables),
            "images": images,
            "value": result.value,
            "image_indices": list(result.image_indices),
        }

    # Declared first: routes are tried in order, and this one takes nearly every request.
    @app.post(
        "/sessions/{session_id}/calls",
        response_model=list[CallResponse],
        max_body_size=min(limits.max_call_body_bytes, limits.max_body_bytes),
        openapi_extra={
            "parameters": _CALL_PARAMETERS,
            "requestBody": {"required": True, "content": {"application/json": {"schema": _CALLS_SCHEMA}}},
        },
    )
    async def call(request: Request) -> Response:
        """Run a turn's calls in parallel; results in call order, tool failures as error results.

        The body is a list of `CallRequest`. Refused with 503 while the server holds
        `max_calls_in_flight` calls, before the body is read (`CallAdmissionMiddleware` admits the
        request as one call; the rest are admitted once the body says how many it holds), or when
        a call's tool is expected to keep it queued past its queue wait (`CallAdmission.admit_calls`);
        cancelled when the client disconnects before the results are ready.
        """
        images = _images_parameter(request)
        session = open_session(request.path_params["session_id"])
        # Parsed off the event loop unless small. Reading JSON holds the interpreter lock all the
        # same, and so does the walk of the arguments for slices of 5 ms: what bounds the stall of
        # the other requests is `max_call_body_bytes`.
        try:
            body = await body_deadlines.within(limits.call_body_timeout_s, request.body())
        except asyncio.TimeoutError:
            raise HTTPException(
                status.HTTP_408_REQUEST_TIMEOUT,
                f"the body did not arrive within {limits.call_body_timeout_s:g} s",
            ) from None
        calls = (
            _read_calls(body)
            if len(body) <= _SMALL_BODY_BYTES
            else await asyncio.to_thread(_read_calls, body)
        )
        names = [item.name for item in calls]
        refusal = admission.admit_calls(names, request.scope)
        if refusal is not None:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, refusal, headers={"Retry-After": str(RETRY_AFTER_S)}
            )
        try:
            results = await _unless_disconnected(
                request, session.call_many([(item.name, item.arguments) for item in calls])
            )
        finally:
            admission.release_calls(names)
        if results is None:  # nobody is listening any more
            return SafeJSONResponse([])
        return _results_response([await to_response(result, images) for result in results])

    @app.get("/health")
    async def health() -> HealthResponse:
        """Liveness, with the realism profile, the size of the service and each tool's availability:
        "degraded" while a tool turns calls away or has no live instance."""
        stats = toolshed.stats()
        tools = {
            name: ToolAvailability.model_validate(toolshed.router(name).availability())
            for name in stats["tools"]
        }
        return HealthResponse(
            status="ok"
            if all(tool.available and tool.live_instances for tool in tools.values())
            else "degraded",
            profile=toolshed.profile,
            tool_methods=len(toolshed.specs()),
            open_sessions=stats["sessions"]["open"],
            tools=tools,
        )

    @app.get("/tools")
    async def tools() -> list[dict[str, Any]]:
        """The OpenAI function schema of every tool method served."""
        return [spec.to_openai() for spec in toolshed.specs()]

    @app.get("/tools/specs")
    async def tool_specs() -> list[ToolSpecResponse]:
        """Every tool method's spec: the function schema's fields and the geometry its `value` holds."""
        return [ToolSpecResponse.model_validate(spec, from_attributes=True) for spec in toolshed.specs()]

    @app.get("/tools/hermes", response_class=PlainTextResponse)
    async def tools_hermes() -> str:
        """The `<tools>…</tools>` block of a hermes-style system prompt."""
        return hermes_tools_block(toolshed.specs())

    @app.post("/sessions", status_code=status.HTTP_201_CREATED)
    async def create_session(request: SessionRequest) -> SessionResponse:
        """Open a session with the task's images."""
        images = await decode_images(request.images)
        attachments = request.attachments
        if attachments is not None and len(attachments) != len(images):
            raise HTTPException(422, f"got {len(images)} images but {len(attachments)} attachments")
        try:
            session = toolshed.open_session(images, attachments, seed=request.seed)
        except TooManySessionsError as exc:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc)) from None
        except MemoryLimitError as exc:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return SessionResponse(id=session.id, image_count=len(session.images))

    @app.post("/sessions/{session_id}/images", status_code=status.HTTP_201_CREATED)
    async def add_image(session_id: str, request: ImageRequest) -> ImageResponse:
        """Append an image (e.g. one a tool drew) to the conversation."""
        session = open_session(session_id)
        (image,) = await decode_images([request.image])
        try:
            return ImageResponse(index=session.add_image(image, request.attachment))
        except MemoryLimitError as exc:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.delete("/sessions/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
    async def close_session(session_id: str) -> Response:
        """Release a session and its variables."""
        open_session(session_id).close()
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        """Live statistics: per tool (calls, errors, latency, queues, availability), sessions, calls."""
        return {
            **toolshed.stats(),
            "calls_in_flight": admission.in_flight,
            "calls_refused": admission.refused,
            "calls_refused_by_expected_wait": admission.refused_by_wait,
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        """The statistics in the Prometheus text format."""
        return Response(render_metrics(toolshed.stats()), media_type=CONTENT_TYPE)

    return app


_CALLS = TypeAdapter(list[CallRequest])
#: Call bodies up to this size are parsed on the event loop (faster than a thread's round trip).
_SMALL_BODY_BYTES = 16 * 2**10
_CALLS_SCHEMA = {"type": "array", "items": CallRequest.model_json_schema()}  # CallRequest nests no model


_IMAGES_HELP = "Return the images tools made, as PNG data URLs."
#: The call endpoint's parameters as FastAPI would document them. It reads them itself (`_images_parameter`,
#: `request.path_params`): FastAPI's solving of declared parameters costs more than the rest of its work
#: on a no-op call.
_CALL_PARAMETERS = [
    {
        "name": "session_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "title": "Session Id"},
    },
    {
        "name": "images",
        "in": "query",
        "required": False,
        "schema": {"type": "boolean", "description": _IMAGES_HELP, "default": False, "title": "Images"},
        "description": _IMAGES_HELP,
    },
]
_BOOLEAN = TypeAdapter(bool)


def _images_parameter(request: Request) -> bool:
    """The call endpoint's `images` query parameter (default false), parsed as FastAPI parses a boolean:
    a 422 naming it when it is not one."""
    given = request.query_params.get("images") if request.scope["query_string"] else None
    if given is None:
        return False
    try:
        return _BOOLEAN.validate_python(given)
    except ValidationError as exc:
        errors = [{**error, "loc": ("query", "images")} for error in exc.errors()]
        raise RequestValidationError(errors) from None


def _read_calls(body: bytes) -> list[CallRequest]:
    """The calls in a request body; an HTTP 422 that says why when it holds none that can be read."""
    try:
        data = json.loads(body)
    # ValueError: not JSON, or an integer of more digits than Python converts; RecursionError: nesting.
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise HTTPException(422, f"the body cannot be read as JSON: {reason}") from None
    try:
        return _CALLS.validate_python(data)
    except ValidationError as exc:
        raise HTTPException(422, _brief_errors(exc.errors())) from None


def _brief_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors without the input they echo (which may be what could not be encoded)."""
    return [{key: error.get(key) for key in ("type", "loc", "msg")} for error in errors]


def _results_response(items: list[dict[str, Any]]) -> SafeJSONResponse:
    """The calls' results as a response; a `value` JSON cannot write is sent as None (the text still
    carries the result). Each value is checked alone only when the whole cannot be written."""
    try:
        return SafeJSONResponse(items)
    except (TypeError, ValueError, RecursionError):
        for item in items:
            item["value"] = _jsonable_or_none(item["value"])
        return SafeJSONResponse(items)


def _jsonable_or_none(value: Any) -> Any:
    """`value` if it can be written as JSON, else None (the text still carries the result)."""
    if value is None:
        return None
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return value


async def _unless_disconnected(request: Request, work: Awaitable[_T]) -> _T | None:
    """The result of `work`, or None (with `work` cancelled) when the client disconnects first.

    `work` runs in the caller's task; a watcher task waits for the request's next message (the body is
    read, so it is the client's disconnect) and then cancels the caller's task.
    """
    task = asyncio.current_task()
    assert task is not None, "runs in a task"
    disconnected = False
    watcher: asyncio.Future[Message]  # the task reading the next message

    def watch() -> asyncio.Future[Message]:
        reading = asyncio.ensure_future(request.receive())
        reading.add_done_callback(on_message)
        return reading

    def on_message(done: asyncio.Future[Message]) -> None:
        nonlocal disconnected, watcher
        if done.cancelled() or done.exception() is not None:
            return
        if done.result()["type"] == "http.disconnect":
            disconnected = True
            task.cancel()
        else:
            watcher = watch()

    watcher = watch()
    try:
        return await work
    except asyncio.CancelledError:
        uncancel = getattr(task, "uncancel", None)
        if disconnected and (uncancel is None or uncancel() == 0):
            return None
        raise
    finally:
        watcher.cancel()


class BearerTokenMiddleware:
    """Refuses (401) every request but `GET /health` that does not carry `Authorization: Bearer <token>`;
    `service` names what the 401 says requires it."""

    def __init__(self, app: ASGIApp, token: str, service: str = "this Toolshed") -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._refusal = f"{service} requires 'Authorization: Bearer <token>'"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self._expected):
                response = SafeJSONResponse(
                    {"detail": self._refusal},
                    status_code=status.HTTP_401_UNAUTHORIZED,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
