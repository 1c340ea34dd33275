"""A call's context on its way to an instance in another process, its session's part sent once.

Every call's `ToolContext` holds the conversation's image sizes and attachments (a simulated image's
scene spec, say: kilobytes per image). They change only when the session gains an image, so the sender
ships them to an instance once per session and image count; each call carries only its own part (the
images it references and its seed). The receiver keeps what it was sent until the session is released.
Both ends live as long as one instance: a restarted instance starts with neither.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spacetools.kit.definition import ToolContext

__all__ = ["ContextReceiver", "ContextSender", "WireContext"]

_SessionPart = tuple[list[tuple[int, int]], list[dict[str, Any]]]
#: What crosses to the instance: the call's own part of its context `(session_id, images, seed)` (the
#: seed, or the generator once one was made) and the session's part `(image_sizes, attachments)` when
#: the receiver may lack it. Plain tuples: a `ToolContext` would cost each call its class's pickling.
WireContext = tuple[str, dict[int, np.ndarray], int | np.random.Generator, _SessionPart | None]


class ContextSender:
    """The server's end: remembers which session contexts its instance holds."""

    def __init__(self) -> None:
        self._sent: dict[str, int] = {}  # session id -> image count the receiver holds

    def pack(self, ctx: ToolContext) -> WireContext:
        """The wire form of `ctx`, with the session's part only when the receiver does not hold it."""
        count = len(ctx.image_sizes)
        session = None
        if self._sent.get(ctx.session_id) != count:
            session = (ctx.image_sizes, ctx.attachments)
            self._sent[ctx.session_id] = count
        seed = ctx.seed
        return ctx.session_id, ctx.images, ctx.rng if seed is None else seed, session

    def forget(self, session_id: str) -> bool:
        """Drop a released session; True when the receiver holds its context (and must be told)."""
        return self._sent.pop(session_id, None) is not None


class ContextReceiver:
    """The instance's end: the session contexts it was sent, until released."""

    def __init__(self) -> None:
        self._sessions: dict[str, _SessionPart] = {}

    def unpack(self, wire: WireContext) -> ToolContext:
        """The call's whole context."""
        session_id, images, rng, session = wire
        if session is not None:
            self._sessions[session_id] = session
        image_sizes, attachments = self._sessions[session_id]
        return ToolContext(session_id, images, list(image_sizes), list(attachments), rng)

    def forget(self, session_id: str) -> None:
        """Drop a released session's context."""
        self._sessions.pop(session_id, None)
