"""The Toolshed's HTTP routes, on `APIRouter`s: what each endpoint does with the served `Toolshed`.

The app (`spacetools.toolshed.http.create_app`) keeps what the routes share on `app.state` (`ServedState`)
and the routes reach it through dependencies: `served`, `toolshed`, `open_session`. The call endpoint,
which takes nearly every request, reads its parameters itself (FastAPI's solving of declared parameters
costs more than the rest of its work on a no-op call). Refusals are errors of `spacetools.kit.errors`,
answered by the handlers of `spacetools.toolshed.http_responses`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse
from pydantic import TypeAdapter, ValidationError
from starlette.types import Message

from spacetools.kit import imagecodec
from spacetools.kit.definition import ToolResult, hermes_tools_block
from spacetools.kit.errors import (
    BodyTimeoutError,
    InvalidRequestError,
    OverloadedError,
    SpacetoolsError,
    UnknownSessionError,
)
from spacetools.toolshed.admission import CallAdmission
from spacetools.toolshed.deadlines import Deadlines
from spacetools.toolshed.http_responses import SafeJSONResponse
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.metrics import CONTENT_TYPE, render_metrics
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

__all__ = ["ServedState", "add_call_route", "catalog", "monitoring", "sessions"]

_T = TypeVar("_T")


@dataclass
class ServedState:
    """What the routes of one app share: the Toolshed, the limits, the admission of calls and the timer
    of the call bodies' arrival."""

    toolshed: Toolshed
    limits: ServerLimits
    admission: CallAdmission
    body_deadlines: Deadlines


def served(request: Request) -> ServedState:
    """The app's `ServedState` (a dependency)."""
    state: ServedState = request.app.state.served
    return state


Served = Annotated[ServedState, Depends(served)]


def toolshed(request: Request) -> Toolshed:
    """The served Toolshed (a dependency)."""
    return served(request).toolshed


Shed = Annotated[Toolshed, Depends(toolshed)]


def open_session(request: Request, session_id: str) -> Session:
    """The open session the path names (a dependency); `UnknownSessionError` (404) when there is none."""
    return _session(served(request).toolshed, session_id)


def _session(shed: Toolshed, session_id: str) -> Session:
    try:
        return shed.session(session_id)
    except UnknownSessionError:
        raise UnknownSessionError(
            f"session {session_id} is closed, expired or unknown; open a new one with POST /sessions"
        ) from None


OpenSession = Annotated[Session, Depends(open_session)]

# --- the calls --------------------------------------------------------------------------------------


def add_call_route(app: FastAPI, max_body_bytes: int) -> None:
    """The call endpoint, with its own body limit (smaller than the sessions' image uploads).

    Added to the app itself, not through an `APIRouter`: a route of an included router is matched by
    FastAPI's include machinery, which costs more than the rest of a no-op call's routing (700 more
    bytecodes a call, `benchmarks/callpath_profile.py`). Added first: routes are tried in order, and this
    one takes nearly every request.
    """
    app.add_api_route(
        "/sessions/{session_id}/calls",
        call,
        methods=["POST"],
        response_model=list[CallResponse],
        max_body_size=max_body_bytes,
        openapi_extra={
            "parameters": _CALL_PARAMETERS,
            "requestBody": {"required": True, "content": {"application/json": {"schema": _CALLS_SCHEMA}}},
        },
    )


async def call(request: Request) -> Response:
    """Run a turn's calls in parallel; results in call order, tool failures as error results.

    The body is a list of `CallRequest`. Refused with 503 while the server holds
    `max_calls_in_flight` calls, before the body is read (`CallAdmissionMiddleware` admits the
    request as one call; the rest are admitted once the body says how many it holds), or when a
    call's tool is expected to keep it queued past its queue wait (`CallAdmission.admit_calls`);
    cancelled when the client disconnects before the results are ready.
    """
    state = served(request)
    limits, admission = state.limits, state.admission
    images = _images_parameter(request)
    session = _session(state.toolshed, request.path_params["session_id"])
    # Parsed off the event loop unless small. Reading JSON holds the interpreter lock all the
    # same, and so does the walk of the arguments for slices of 5 ms: what bounds the stall of
    # the other requests is `max_call_body_bytes`.
    try:
        body = await state.body_deadlines.within(limits.call_body_timeout_s, request.body())
    except asyncio.TimeoutError:
        raise BodyTimeoutError(f"the body did not arrive within {limits.call_body_timeout_s:g} s") from None
    calls = (
        _read_calls(body) if len(body) <= _SMALL_BODY_BYTES else await asyncio.to_thread(_read_calls, body)
    )
    names = [item.name for item in calls]
    refusal = admission.admit_calls(names, request.scope)
    if refusal is not None:
        raise OverloadedError(refusal)
    try:
        results = await _unless_disconnected(
            request, session.call_many([(item.name, item.arguments) for item in calls])
        )
    finally:
        admission.release_calls(names)
    if results is None:  # nobody is listening any more
        return SafeJSONResponse([])
    return _results_response([await _to_response(result, images) for result in results])


async def _to_response(result: ToolResult, with_images: bool) -> dict[str, Any]:
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


_CALLS = TypeAdapter(list[CallRequest])
#: Call bodies up to this size are parsed on the event loop (faster than a thread's round trip).
_SMALL_BODY_BYTES = 16 * 2**10
_CALLS_SCHEMA = {"type": "array", "items": CallRequest.model_json_schema()}  # CallRequest nests no model
_IMAGES_HELP = "Return the images tools made, as PNG data URLs."
#: The call endpoint's parameters as FastAPI would document them (it reads them itself).
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
    """The calls in a request body; `InvalidRequestError` (422) that says why when it holds none that
    can be read."""
    try:
        data = json.loads(body)
    # ValueError: not JSON, or an integer of more digits than Python converts; RecursionError: nesting.
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidRequestError(f"the body cannot be read as JSON: {reason}") from None
    try:
        return _CALLS.validate_python(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


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


# --- the sessions -----------------------------------------------------------------------------------

sessions = APIRouter()


@sessions.post("/sessions", status_code=status.HTTP_201_CREATED)
async def create_session(request: SessionRequest, state: Served) -> SessionResponse:
    """Open a session with the task's images."""
    images = await _decode_images(request.images, state.limits)
    attachments = request.attachments
    if attachments is not None and len(attachments) != len(images):
        raise InvalidRequestError(f"got {len(images)} images but {len(attachments)} attachments")
    try:
        session = state.toolshed.open_session(images, attachments, seed=request.seed)
    except ValueError as exc:  # the vocabulary's own (a memory limit) keep their status
        raise exc if isinstance(exc, SpacetoolsError) else InvalidRequestError(str(exc)) from None
    return SessionResponse(id=session.id, image_count=len(session.images))


@sessions.post("/sessions/{session_id}/images", status_code=status.HTTP_201_CREATED)
async def add_image(session: OpenSession, request: ImageRequest, state: Served) -> ImageResponse:
    """Append an image (e.g. one a tool drew) to the conversation."""
    (image,) = await _decode_images([request.image], state.limits)
    try:
        return ImageResponse(index=session.add_image(image, request.attachment))
    except ValueError as exc:  # the vocabulary's own (a memory limit) keep their status
        raise exc if isinstance(exc, SpacetoolsError) else InvalidRequestError(str(exc)) from None


@sessions.delete("/sessions/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def close_session(session: OpenSession) -> Response:
    """Release a session and its variables."""
    session.close()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _decode_images(data_urls: list[str], limits: ServerLimits) -> list[np.ndarray]:
    """The uploaded images (`ImageDecodeError`, `ImageTooLargeError` when one cannot be used); decoded in
    threads, so that large uploads do not stall the calls of other sessions."""
    decoding = (
        asyncio.to_thread(imagecodec.decode, url, max_pixels=limits.max_image_pixels) for url in data_urls
    )
    return list(await asyncio.gather(*decoding))


# --- what is served ---------------------------------------------------------------------------------

catalog = APIRouter()


@catalog.get("/tools")
async def tools(shed: Shed) -> list[dict[str, Any]]:
    """The OpenAI function schema of every tool method served."""
    return [spec.to_openai() for spec in shed.specs()]


@catalog.get("/tools/specs")
async def tool_specs(shed: Shed) -> list[ToolSpecResponse]:
    """Every tool method's spec: the function schema's fields and the geometry its `value` holds."""
    return [ToolSpecResponse.model_validate(spec, from_attributes=True) for spec in shed.specs()]


@catalog.get("/tools/hermes", response_class=PlainTextResponse)
async def tools_hermes(shed: Shed) -> str:
    """The `<tools>…</tools>` block of a hermes-style system prompt."""
    return hermes_tools_block(shed.specs())


# --- health and statistics --------------------------------------------------------------------------

monitoring = APIRouter()


@monitoring.get("/health")
async def health(shed: Shed) -> HealthResponse:
    """Liveness, with the realism profile, the size of the service and each tool's availability:
    "degraded" while a tool turns calls away or has no live instance."""
    stats = shed.stats()
    availability = {
        name: ToolAvailability.model_validate(shed.router(name).availability()) for name in stats["tools"]
    }
    ok = all(tool.available and tool.live_instances for tool in availability.values())
    return HealthResponse(
        status="ok" if ok else "degraded",
        profile=shed.profile,
        tool_methods=len(shed.specs()),
        open_sessions=stats["sessions"]["open"],
        tools=availability,
    )


@monitoring.get("/stats")
async def stats(state: Served) -> dict[str, Any]:
    """Live statistics: per tool (calls, errors, latency, queues, availability), sessions, calls."""
    return {
        **state.toolshed.stats(),
        "calls_in_flight": state.admission.in_flight,
        "calls_refused": state.admission.refused,
        "calls_refused_by_expected_wait": state.admission.refused_by_wait,
    }


@monitoring.get("/metrics")
async def metrics(shed: Shed) -> Response:
    """The statistics in the Prometheus text format."""
    return Response(render_metrics(shed.stats()), media_type=CONTENT_TYPE)
