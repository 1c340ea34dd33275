"""Slow clients cut off at the socket: read timeouts and a per-client connection cap for every server.

uvicorn times out only idle kept-alive connections: a client that sends its headers one byte at a
time, or a body at 1 byte/s, holds its connection (and a place under `max_connections`) for as long as
it likes, and a few thousand such sockets lock every other client out. `guarded_protocol` is uvicorn's
`httptools` protocol (its C parser) with, for every route of every app it serves:

- a header deadline: the headers must have arrived `header_timeout_s` after the connection opened
  (or, on a kept-alive connection, after the request's first byte);
- a body deadline: the body must have arrived `body_timeout_s` after the headers;
- past either, a 408 and the connection closed (an app reading the body sees a disconnect);
- at most `max_connections_per_client` open connections per client address: one more gets a 503 with
  `Retry-After` at once, and whatever it sends is dropped unread, so one client cannot take every
  connection;
- `/health` is served past uvicorn's `max_connections` limit (a probe must see a busy server live).

Each request's first-byte time goes into its scope (`BEGAN_AT`), for admission by expected wait
(`spacetools.toolshed.admission`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from spacetools.toolshed.admission import BEGAN_AT, RETRY_AFTER_S
from spacetools.toolshed.limits import ServerLimits

__all__ = ["HEALTH_PATH", "GuardedHttpToolsProtocol", "guarded_protocol", "server_options"]

#: The path served past the connection limit.
HEALTH_PATH = b"/health"
#: Longest a refused connection stays half-open for its client to read the 503 and close.
LINGER_S = 1.0


def _response(status: bytes, detail: str, *extra: bytes) -> bytes:
    """A whole JSON response that closes its connection."""
    body = ('{"detail":"' + detail + '"}').encode()
    return b"".join(
        [
            b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n",
            *extra,
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n",
            body,
        ]
    )


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines and a per-client connection cap; subclassed with
    the limits by `guarded_protocol`."""

    limits: ClassVar[ServerLimits]
    clients: ClassVar[Counter[str]]  # open connections per client address, across the server

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._address: str | None = None  # set once the connection is counted against its client
        self._deadline: asyncio.TimerHandle | None = None
        self._began_at = 0.0
        self._first_request = True
        self._refused = False  # over the per-client cap: answered 503, what comes is dropped

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._began_at = time.perf_counter()
        address = self.client[0] if self.client else ""
        if self.clients[address] >= self.limits.client_connection_cap:
            self._refuse(transport)
            return
        self.clients[address] += 1
        self._address = address
        self._arm(self.limits.header_timeout_s, self._headers_late)

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Answer 503 and close. The request may have been sent already: closing with it unread would
        reset the connection, and the client would lose the answer. So the connection is half-closed
        and what comes is dropped until the client closes it too, for at most `LINGER_S`."""
        self._refused = True
        self.connections.discard(self)  # nor does it count against `max_connections` meanwhile
        transport.write(self._too_many_connections)
        transport.write_eof()
        self._deadline = self.loop.call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            self.clients[self._address] -= 1
            if not self.clients[self._address]:
                del self.clients[self._address]
            self._address = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._first_request:  # a kept-alive connection's next request: its own header deadline
            self._began_at = time.perf_counter()
            self._arm(self.limits.header_timeout_s, self._headers_late)
        self._first_request = False
        self.scope["extensions"] = {BEGAN_AT: self._began_at}

    def on_headers_complete(self) -> None:
        self._arm(self.limits.body_timeout_s, self._body_late)
        if self.limit_concurrency is None or self.url.split(b"?", 1)[0] != HEALTH_PATH:
            super().on_headers_complete()
            return
        limit, self.limit_concurrency = self.limit_concurrency, None
        try:
            super().on_headers_complete()
        finally:
            self.limit_concurrency = limit

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self, seconds: float, on_late: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, on_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        # Answered only when no earlier response of this connection is still being written.
        answer = self.cycle is None or self.cycle.response_complete
        self._cut_off(f"the request headers did not arrive within {self.limits.header_timeout_s:g} s", answer)

    def _body_late(self) -> None:
        self._deadline = None
        answer = not self.cycle.response_started
        # The app reading the body gets a disconnect; anything it sends later is dropped.
        self.cycle.disconnected = True
        self.cycle.keep_alive = False
        self.cycle.message_event.set()
        self._cut_off(f"the request body did not arrive within {self.limits.body_timeout_s:g} s", answer)

    def _cut_off(self, detail: str, answer: bool) -> None:
        if self.transport.is_closing():
            return
        if answer:
            self.transport.write(_response(b"408 Request Timeout", detail))
        self.transport.close()

    @property
    def _too_many_connections(self) -> bytes:
        return _response(
            b"503 Service Unavailable",
            f"this client has {self.limits.client_connection_cap} connections open, the most "
            "one client may; retry later",
            f"retry-after: {RETRY_AFTER_S}\r\n".encode(),
        )


def guarded_protocol(limits: ServerLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for one server (its own count of connections per client)."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"limits": limits, "clients": Counter()},
    )


def server_options(limits: ServerLimits) -> dict[str, Any]:
    """The uvicorn settings (`uvicorn.run`, `uvicorn.Config`) of the `spacetools` servers: headers
    parsed by httptools (C) under `limits`' read deadlines and per-client cap, requests served while at
    most `max_connections` connections are open (uvicorn's 503 past it, `/health` excepted), as many
    waiting to be accepted, idle kept-alive connections closed after `keep_alive_timeout_s`."""
    return {
        "http": guarded_protocol(limits),
        # uvicorn refuses once the open connections, the one asking included, reach its limit.
        "limit_concurrency": limits.max_connections + 1,
        "backlog": limits.max_connections,
        "timeout_keep_alive": limits.keep_alive_timeout_s,
    }
