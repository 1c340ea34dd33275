"""Admission at a server's door: how many connections and tool calls it takes at once.

A burst must be turned away before it costs the server the work it cannot do, so each limit is checked
at the earliest layer that can see it:

- connections: while more than `max_connections` are open, uvicorn answers every request with its own
  503 right after the request's headers and closes its connection (that 503 carries no
  `Retry-After`; `RemoteToolshed` then waits 1 s), `/health` excepted; past `max_connections_per_client`
  from one address, a new connection gets a 503 with `Retry-After` at once. Headers are parsed by
  `httptools` (C), not pure Python, so that a burst reaches the checks quickly, under read deadlines
  (`spacetools.toolshed.slow_clients`, which also sets `BEGAN_AT`).
- tool calls: `CallAdmission`, the app's outermost middleware, admits a call request as one call while
  fewer than `max_calls_in_flight` are in flight, and otherwise answers 503 with `Retry-After` and
  closes the connection: before routing, the token check, and reading the body. Once the body says
  which calls it holds, the endpoint asks for the rest (`admit_calls`), which are refused the same way
  when a call's tool is expected to keep it queued past its queue wait: the calls of that tool already
  admitted and not answered, over its instances, times its recent service time, against
  `max_queue_wait_s` less the time the request has already spent arriving (from its first byte,
  `BEGAN_AT`). A call let in is then answered within its deadline (queue wait plus tool timeout)
  rather than timed out in the queue, and a burst past what the tools can serve in time is turned
  away at once with a 503 instead of waiting for its queue timeout.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from spacetools.kit.errors import OverloadedError
from spacetools.toolshed.router import ToolRouter

__all__ = ["BEGAN_AT", "RETRY_AFTER_S", "CallAdmission", "CallAdmissionMiddleware"]

#: The seconds a refused client is asked to wait before it tries again.
RETRY_AFTER_S = 1
#: The scope key (under `extensions`) of the `time.perf_counter()` at which a request's first byte came
#: (set by `spacetools.toolshed.slow_clients`; without it, a request is taken to begin at admission).
BEGAN_AT = "spacetools.began_at"


class CallAdmission:
    """The count of tool calls in flight (admitted and not yet answered) against `limit`, and per tool
    the calls admitted against what its instances can serve within its queue wait.

    `router_of` gives the router serving a tool method (None for an unknown name: it is not counted).
    Only the event loop touches it, so the counts need no lock.
    """

    def __init__(
        self, limit: int, router_of: Callable[[str], ToolRouter | None] = lambda _name: None
    ) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0  # calls turned away
        self.refused_by_wait = 0  # of which, for an expected wait past the queue wait
        self._router_of = router_of
        self._admitted: Counter[ToolRouter] = Counter()  # per tool: admitted, not yet answered

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

    def admit_calls(self, names: Sequence[str], scope: Scope) -> str | None:
        """Admit a request's calls (the tool methods `names`; the request was admitted as one call):
        None when they are, else why not (the 503's detail; the calls count as refused)."""
        extra = max(len(names) - 1, 0)
        if not self.admit_more(extra):
            return self.refusal
        began_at = scope.get("extensions", {}).get(BEGAN_AT)
        spent_s = 0.0 if began_at is None else time.perf_counter() - began_at
        routers = Counter(router for router in map(self._router_of, names) if router is not None)
        for router, count in routers.items():
            if router.max_queue_wait_s is None:
                continue
            wait_s = expected_wait_s(router, self._admitted[router] + count - 1)
            if wait_s > router.max_queue_wait_s - spent_s:
                self.release(extra)
                self.refused += len(names)
                self.refused_by_wait += len(names)
                return (
                    f"{router.name} is expected to start this call in {wait_s:.1f} s, past the "
                    f"{max(router.max_queue_wait_s - spent_s, 0.0):.1f} s left of its queue wait; retry later"
                )
        self._admitted.update(routers)
        return None

    def release_calls(self, names: Sequence[str]) -> None:
        """The calls `admit_calls` admitted for `names` were answered (the request's own one is
        released by the middleware)."""
        self.release(max(len(names) - 1, 0))
        self._admitted.subtract(router for router in map(self._router_of, names) if router is not None)
        self._admitted = +self._admitted  # drop the tools with none left


def expected_wait_s(router: ToolRouter, ahead: int) -> float:
    """How long a call to `router` waits for an instance with `ahead` calls before it: each instance
    takes one of them every recent service time (0 before any call has been served)."""
    service_s = router.stats.service_s
    instances = max(router.size, 1)
    if service_s is None or ahead < instances:
        return 0.0
    return (ahead // instances) * service_s


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
