"""`ServerLimits`: what one Toolshed server accepts, so that no client can exhaust it.

Every limit has a safe default and a `spacetools serve` flag. A request over a limit is refused with
an HTTP error (408, 413, 429 or 503), never a 500; all but uvicorn's 503 for `max_connections` name
the limit. The connection and read limits are enforced below the app (`spacetools.toolshed.slow_clients`).
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TOKEN_ENV", "ServerLimits", "is_loopback"]

#: The environment variable `spacetools serve` and `RemoteToolshed` read the bearer token from.
TOKEN_ENV = "SPACETOOLS_TOOLSHED_TOKEN"


class ServerLimits(BaseModel):
    """The limits of one Toolshed server."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_body_bytes: int = Field(
        default=64 * 2**20, gt=0, description="Largest request body: sessions and images (413 past it)."
    )
    max_call_body_bytes: int = Field(
        default=64 * 2**10,
        gt=0,
        description="Largest body of a turn's tool calls (413 past it): calls carry no images (large "
        "data goes as a `$variable`), a whole model response of 16k tokens fits, and reading a body "
        "holds the interpreter lock for a time in its size.",
    )
    call_body_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest the body of an admitted call may take to arrive (408 past it), so that "
        "a slow client cannot hold a place among the calls in flight.",
    )
    max_image_pixels: int = Field(
        default=4096 * 4096, gt=0, description="Largest image, width x height, checked before decoding (413)."
    )
    max_sessions: int = Field(default=1024, gt=0, description="Open sessions at once (429 past it).")
    max_session_bytes: int = Field(
        default=512 * 2**20, gt=0, description="Images and variables one session may hold (413 for images)."
    )
    max_total_bytes: int = Field(
        default=4 * 2**30, gt=0, description="Images and variables all sessions together may hold."
    )
    session_ttl_s: float = Field(default=3600.0, gt=0, description="Idle time after which a session expires.")
    max_connections: int = Field(
        default=2048,
        gt=0,
        description="Open connections; past them every request gets a 503 right after its headers.",
    )
    max_connections_per_client: int | None = Field(
        default=None,
        gt=0,
        description="Open connections from one client address (default: half of `max_connections`); "
        "past them a new connection gets a 503 with Retry-After at once, so that one client cannot "
        "take every connection.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest a request's headers may take to arrive, counted from the connection's "
        "opening (or, on a kept-alive connection, from the request's first byte); past it the "
        "connection gets a 408 and is closed.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest a request's body may take to arrive once its headers did, on every route "
        "(a 408 and the connection closed past it); a turn's calls have `call_body_timeout_s`.",
    )
    keep_alive_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest an idle kept-alive connection stays open waiting for its next request.",
    )
    max_calls_in_flight: int = Field(
        default=1024,
        gt=0,
        description="Tool calls admitted at once, queued or running (503 with Retry-After past it, "
        "before the body is read). A call is also refused so when its tool's queue is expected to "
        "hold it longer than `max_queue_wait_s` (queue depth x recent service time / instances).",
    )
    max_queue_wait_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest a call waits for a free instance; it then gets a timeout error, so a call "
        "is answered within this wait plus its tool's timeout.",
    )
    token: str | None = Field(
        default=None, min_length=16, description="Bearer token every request but /health must carry."
    )

    @property
    def client_connection_cap(self) -> int:
        """The open connections one client address may hold: `max_connections_per_client`, or half of
        `max_connections`."""
        if self.max_connections_per_client is not None:
            return self.max_connections_per_client
        return max(self.max_connections // 2, 1)

    def check_exposure(self, host: str) -> None:
        """`ValueError` when the server would listen beyond loopback without a token."""
        if self.token is None and not is_loopback(host):
            raise ValueError(
                f"listening on {host} exposes the tools to the network: set a bearer token "
                f"(--token or the {TOKEN_ENV} environment variable), or listen on 127.0.0.1"
            )


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface
