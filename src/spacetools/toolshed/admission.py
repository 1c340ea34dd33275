"""Admission at a server's door: how many connections and tool calls it takes at once.

A burst must be turned away before it costs the server the work it cannot do, so each limit is checked
at the earliest layer that can see it:

- connections: while more than `max_connections` are open, uvicorn answers every request with its own
  503 right after the request's headers and closes its connection (that 503 carries no
  `Retry-After`; `RemoteToolshed` then waits 1 s). Headers are parsed by `httptools` (C), not pure
  Python, so that a burst reaches the checks quickly.
- tool calls: `CallAdmission`, the app's outermost middleware, admits a call request as one call while
  fewer than `max_calls_in_flight` are in flight, and otherwise answers 503 with `Retry-After` and
  closes the connection: before routing, the token check, and reading the body. Once the body says how
  many calls it holds, the endpoint asks for the rest (`admit_more`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from spacetools.kit.errors import OverloadedError

__all__ = ["RETRY_AFTER_S", "CallAdmission", "CallAdmissionMiddleware", "server_options"]

#: The seconds a refused client is asked to wait before it tries again.
RETRY_AFTER_S = 1


class CallAdmission:
    """The count of tool calls in flight (admitted and not yet answered) against `limit`.

    Only the event loop touches it, so the counts need no lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0  # calls turned away

    @property
    def refusal(self) -> str:
        """Why a call was refused (the 503's detail)."""
        return f"the server is at its limit of {self.limit} tool calls in flight; retry later"

    def admit_one(self) -> bool:
        """Admit a request as one call (its body is unread); False, counted as refused, when full."""
        if self.in_flight >= self.limit:
            self.refused += 1
            return False
        self.in_flight += 1
        return True

    def admit_more(self, extra: int) -> bool:
        """Admit `extra` more calls for a request admitted as one, if they fit; False when they do not
        (the request's calls, all counted as refused)."""
        if extra <= 0:
            return True
        if self.in_flight + extra > self.limit:
            self.refused += extra + 1
            return False
        self.in_flight += extra
        return True

    def release(self, count: int) -> None:
        """`count` admitted calls were answered."""
        self.in_flight -= count


class CallAdmissionMiddleware:
    """Admits `POST /sessions/{id}/calls` requests against a `CallAdmission`, before any other layer;
    other requests pass untouched."""

    def __init__(self, app: ASGIApp, admission: CallAdmission) -> None:
        self.app = app
        self.admission = admission
        self._refusal = json.dumps({"detail": admission.refusal, "code": OverloadedError.code}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and _is_calls_path(scope["path"])):
            await self.app(scope, receive, send)
            return
        if not self.admission.admit_one():
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(self._refusal)).encode()),
                        (b"retry-after", str(RETRY_AFTER_S).encode()),
                        # The body stays unread: the connection cannot carry another request.
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": self._refusal})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.release(1)


def _is_calls_path(path: str) -> bool:
    """True for `/sessions/{id}/calls` (a session id holds no slash)."""
    parts = path.split("/")
    return len(parts) == 4 and parts[1] == "sessions" and parts[3] == "calls" and parts[2] != ""


def server_options(max_connections: int) -> dict[str, Any]:
    """The uvicorn settings (`uvicorn.run`, `uvicorn.Config`) of the `spacetools` servers: requests
    served while at most `max_connections` connections are open, as many waiting to be accepted,
    headers parsed by httptools."""
    return {
        "http": "httptools",
        # uvicorn refuses once the open connections, the one asking included, reach its limit.
        "limit_concurrency": max_connections + 1,
        "backlog": max_connections,
    }
