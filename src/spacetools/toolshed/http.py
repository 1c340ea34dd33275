"""The Toolshed over HTTP: a FastAPI app that serves one Toolshed to rollout processes elsewhere.

Tools then run decoupled from the RL or evaluation loop: the loop talks to this app through
`spacetools.toolshed.client.RemoteToolshed`. The wire format (request and response models, status codes)
is `spacetools.toolshed.wire`; the limits the server enforces are `spacetools.toolshed.limits`; the routes
are `spacetools.toolshed.routes`, its answers and error handlers `spacetools.toolshed.http_responses`.

Endpoints: `GET /health`, `GET /tools` (OpenAI function schemas), `GET /tools/hermes` (the prompt's
`<tools>` block), `GET /tools/specs` (the specs with their geometry declarations, for `RemoteToolshed`),
`POST /sessions`, `POST /sessions/{id}/calls[?images=true]`, `POST /sessions/{id}/images`, `DELETE /sessions/{id}`, `GET /stats`, `GET /metrics` (Prometheus).
"""

from __future__ import annotations

import ctypes
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from spacetools.kit.errors import UnauthorizedError
from spacetools.toolshed.admission import CallAdmission, CallAdmissionMiddleware
from spacetools.toolshed.deadlines import Deadlines
from spacetools.toolshed.http_responses import SafeJSONResponse, add_error_handlers
from spacetools.toolshed.limits import ServerLimits
from spacetools.toolshed.routes import ServedState, add_call_route, catalog, monitoring, sessions
from spacetools.toolshed.shed import Toolshed

__all__ = ["BearerTokenMiddleware", "create_app", "return_freed_memory", "toolshed_for"]

_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024


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
    # The call bodies' arrival is timed on one timer for all requests.
    app.state.served = ServedState(toolshed, limits, admission, body_deadlines=Deadlines())
    if limits.token is not None:
        app.add_middleware(BearerTokenMiddleware, token=limits.token)
    app.add_middleware(CallAdmissionMiddleware, admission=admission)  # the last added runs first
    add_error_handlers(app)
    add_call_route(app, min(limits.max_call_body_bytes, limits.max_body_bytes))
    for router in (monitoring, catalog, sessions):
        app.include_router(router)
    return app


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
                    {"detail": self._refusal, "code": UnauthorizedError.code},
                    status_code=UnauthorizedError.status,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
