"""Per-episode session state and the store that bounds its memory and lifetime.

A session holds the conversation's images (each with an attachment: caller metadata passed to the
tools unread) and the named variables produced by tool calls. Both count
against a per-session and a total memory cap: variables are evicted to make room (the session's
least-recently-used first, then those of the least-recently-used sessions), while an image that does
not fit is refused (`MemoryLimitError`). The number of open sessions may be capped too
(`TooManySessionsError`), and idle sessions expire after a time to live. Whoever made the store
hears of every session that closes, released or expired (`on_close`), to free what tools hold for it.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spacetools.kit.errors import (
    InvalidRequestError,
    MemoryLimitError,
    TooManySessionsError,
    UnknownSessionError,
    UnknownVariableError,
)

__all__ = ["SessionState", "SessionStore", "value_nbytes"]


def value_nbytes(value: Any) -> int:
    """Approximate memory held by a variable's value (arrays count their whole base buffer)."""
    if isinstance(value, np.ndarray):
        base = value.base if isinstance(value.base, np.ndarray) else None
        return max(value.nbytes, base.nbytes if base is not None else 0)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", errors="replace"))
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(value_nbytes(item) for item in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(value_nbytes(k) + value_nbytes(v) for k, v in value.items())
    return sys.getsizeof(value)


@dataclass
class SessionState:
    """The data of one session; the `SessionStore` owns its memory accounting."""

    id: str
    seed: int
    images: list[np.ndarray]
    attachments: list[dict[str, Any]]
    last_used: float
    #: `(height, width)` of each image, kept with them (every call's context holds them).
    image_sizes: list[tuple[int, int]] = field(default_factory=list)
    variables: OrderedDict[str, tuple[Any, int]] = field(default_factory=OrderedDict)
    evicted: set[str] = field(default_factory=set)
    #: How often each call (name and arguments) was made: a repeated call draws new noise, so a
    #: retry after a simulated transient failure can succeed, and results stay reproducible.
    call_repeats: Counter[str] = field(default_factory=Counter)
    nbytes: int = 0  # images and variables
    image_bytes: int = 0
    closed: bool = False

    def variable_names(self) -> list[str]:
        """Names of the variables held now, oldest use first."""
        return list(self.variables)


class SessionStore:
    """All open sessions, with per-session and total caps on variable memory and an idle time to live."""

    def __init__(
        self,
        max_session_bytes: int,
        max_total_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int | None = None,
        on_close: Callable[[str], None] | None = None,
    ) -> None:
        if max_session_bytes <= 0 or max_total_bytes <= 0 or ttl_s <= 0:
            raise ValueError("memory caps and the session time to live must be positive")
        if max_sessions is not None and max_sessions <= 0:
            raise ValueError(f"max_sessions must be positive, got {max_sessions}")
        self.max_sessions = max_sessions
        self.max_session_bytes = max_session_bytes
        self.max_total_bytes = max_total_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._on_close = on_close
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()  # least recently used first
        self._total_bytes = 0
        self.expired = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def total_bytes(self) -> int:
        """Bytes held by the images and variables of all open sessions."""
        return self._total_bytes

    @property
    def image_bytes(self) -> int:
        """Bytes held by the images of all open sessions."""
        return sum(state.image_bytes for state in self._sessions.values())

    def create(self, images: list[np.ndarray], attachments: list[dict[str, Any]], seed: int) -> SessionState:
        """Open a session; `TooManySessionsError` or `MemoryLimitError` when it does not fit."""
        self.sweep()
        if self.max_sessions is not None and len(self._sessions) >= self.max_sessions:
            raise TooManySessionsError(
                f"the server holds its maximum of {self.max_sessions} open sessions; "
                "close finished sessions or retry later"
            )
        state = SessionState(uuid.uuid4().hex, seed, [], [], self._clock())
        self._sessions[state.id] = state
        try:
            self.add_images(state, images, attachments)
        except MemoryLimitError:
            self.release(state.id)
            raise
        return state

    def add_images(
        self, state: SessionState, images: list[np.ndarray], attachments: list[dict[str, Any]]
    ) -> None:
        """Append images to a session, counted in its memory; `MemoryLimitError` (nothing added) when
        they do not fit even after evicting variables; `UnknownSessionError` when the session is closed."""
        if state.closed:  # released meanwhile: its images would count against the store forever
            raise UnknownSessionError(f"session {state.id} is closed or expired; open a new one")
        size = sum(image.nbytes for image in images)
        if state.image_bytes + size > self.max_session_bytes:
            raise MemoryLimitError(
                f"the session's images would take {state.image_bytes + size:,} bytes, over the limit of "
                f"{self.max_session_bytes:,} bytes per session"
            )
        state.image_bytes += size
        state.nbytes += size
        self._total_bytes += size
        self._enforce_session_cap(state)
        self._enforce_total_cap()
        if self._total_bytes > self.max_total_bytes:  # only images are left: refuse these
            state.image_bytes -= size
            state.nbytes -= size
            self._total_bytes -= size
            raise MemoryLimitError(
                f"the server's sessions hold {self._total_bytes:,} bytes of images; {size:,} more would "
                f"pass its limit of {self.max_total_bytes:,} bytes; close finished sessions or retry later"
            )
        state.images.extend(images)
        state.image_sizes.extend((image.shape[0], image.shape[1]) for image in images)
        state.attachments.extend(attachments)

    def get(self, session_id: str) -> SessionState:
        """The open session with this id, marked as just used; `UnknownSessionError` if there is none."""
        now = self._clock()
        self._expire_unused_since(now - self.ttl_s)
        state = self._sessions.get(session_id)
        if state is None:
            raise UnknownSessionError(f"session {session_id} is closed or expired; open a new one")
        state.last_used = now
        self._sessions.move_to_end(session_id)
        return state

    def release(self, session_id: str) -> None:
        """Close a session and free its variables (a no-op when it is already gone)."""
        state = self._sessions.pop(session_id, None)
        if state is not None:
            self._drop(state)

    def release_all(self) -> None:
        """Close every session."""
        for session_id in list(self._sessions):
            self.release(session_id)

    def sweep(self) -> None:
        """Expire sessions idle for longer than the time to live."""
        self._expire_unused_since(self._clock() - self.ttl_s)

    def _expire_unused_since(self, deadline: float) -> None:
        while self._sessions:
            state = next(iter(self._sessions.values()))
            if state.last_used > deadline:
                break
            self._sessions.popitem(last=False)
            self._drop(state)
            self.expired += 1

    def lookup(self, state: SessionState, name: str) -> Any:
        """The value of variable `name`, with a message the model can act on when it is not held."""
        entry = state.variables.get(name)
        if entry is not None:
            state.variables.move_to_end(name)
            return entry[0]
        if name in state.evicted:
            raise UnknownVariableError(
                f"variable ${name} was evicted to stay within the memory limit; "
                "call the tool that produced it again"
            )
        names = ", ".join(f"${known}" for known in state.variables)
        available = f"Available variables: {names}" if names else "No variables are stored yet."
        raise UnknownVariableError(f"unknown variable ${name}. {available}")

    def store(self, state: SessionState, variables: Mapping[str, Any]) -> list[str]:
        """Store a result's variables (a later value replaces an earlier one); returns names not kept."""
        if state.closed:
            return list(variables)
        for name, value in variables.items():
            self._remove_variable(state, name)
            size = value_nbytes(value)
            if size > self.max_session_bytes - state.image_bytes or size > self.max_total_bytes:
                state.evicted.add(name)
                continue
            state.variables[name] = (value, size)
            state.evicted.discard(name)
            state.nbytes += size
            self._total_bytes += size
        self._enforce_session_cap(state)
        self._enforce_total_cap()
        return [name for name in variables if name not in state.variables]

    def _enforce_session_cap(self, state: SessionState) -> None:
        while state.nbytes > self.max_session_bytes and state.variables:
            self._evict_oldest(state)

    def _enforce_total_cap(self) -> None:
        for state in list(self._sessions.values()):  # least recently used sessions first
            while self._total_bytes > self.max_total_bytes and state.variables:
                self._evict_oldest(state)
            if self._total_bytes <= self.max_total_bytes:
                return

    def _evict_oldest(self, state: SessionState) -> None:
        name = next(iter(state.variables))
        self._remove_variable(state, name)
        state.evicted.add(name)
        self.evictions += 1

    def _remove_variable(self, state: SessionState, name: str) -> None:
        entry = state.variables.pop(name, None)
        if entry is not None:
            state.nbytes -= entry[1]
            self._total_bytes -= entry[1]

    def _drop(self, state: SessionState) -> None:
        if self._on_close is not None:
            self._on_close(state.id)
        self._total_bytes -= state.nbytes
        state.variables.clear()
        state.evicted.clear()
        state.images.clear()
        state.image_sizes.clear()
        state.attachments.clear()
        state.nbytes = 0
        state.image_bytes = 0
        state.closed = True


def check_image(image: Any, index: int | None = None) -> None:
    """`InvalidRequestError` (a `ValueError`) unless `image` (the conversation's image `index`) is an
    `(H, W, 3)` uint8 RGB array."""
    if not (
        isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
    ):
        got = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        which = "an image" if index is None else f"image {index}"
        raise InvalidRequestError(f"{which} must be a uint8 RGB array of shape (H, W, 3), got {got}")


def check_attachment(attachment: Any, index: int | None = None) -> dict[str, Any]:
    """A copy of an image's attachment; `InvalidRequestError` unless it is a dict with string keys (or
    None)."""
    if attachment is None:
        return {}
    if not isinstance(attachment, Mapping) or not all(isinstance(key, str) for key in attachment):
        which = "an attachment" if index is None else f"the attachment of image {index}"
        raise InvalidRequestError(f"{which} must be a dict with string keys, got {type(attachment).__name__}")
    return dict(attachment)


def check_session_inputs(
    images: Sequence[np.ndarray], attachments: Sequence[Mapping[str, Any] | None] | None
) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """The images of a new session and one attachment dict per image (None: empty), checked."""
    images = list(images)
    for index, image in enumerate(images):
        check_image(image, index)
    given = list(attachments) if attachments is not None else [None] * len(images)
    if len(given) != len(images):
        raise InvalidRequestError(f"got {len(images)} images but {len(given)} attachments")
    return images, [check_attachment(attachment, index) for index, attachment in enumerate(given)]
