"""What the rollout and the evaluation need of a tool server: `ToolProvider` and `ToolSession`.

The in-process `Toolshed`/`Session` and the HTTP client's `RemoteToolshed`/`RemoteSession` both
satisfy these protocols, so an episode runs the same against either.

Errors are one vocabulary (`spacetools.kit.errors`), the same types whether the tools run in process,
in worker processes, on Ray or behind a server (the client rebuilds them from the code in the server's
answer):

- a failing tool *call* never raises: a tool's `ToolError` or exception, bad arguments (`ToolArgumentError`'s
  text), an unknown variable or tool, a timeout, a crash, a refusal or a lost server all come back as an
  error result (`is_error`, text `"Error: …"`) for the model to read;
- opening a session raises: `InvalidRequestError` (a `ValueError`: images that are not uint8 RGB,
  attachments that are not dicts or do not match the images), `MemoryLimitError` (images over the
  session's or the server's memory), `TooManySessionsError` (the cap on open sessions); over HTTP also
  `ImageTooLargeError`, `ImageDecodeError`, `BodyTooLargeError`, `OverloadedError`, `UnauthorizedError`,
  and `ServerError` for anything else. A remote session opens lazily: these come from
  `await session.open()` (or as the first call's error result);
- `open()` on a session closed or expired on the server raises `UnknownSessionError` (a `KeyError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from spacetools.kit.definition import ToolResult, ToolSpec

__all__ = ["Arguments", "ToolProvider", "ToolSession"]

Arguments = Mapping[str, Any] | str | None
"""A call's arguments: a JSON object, its text, or None for none."""


@runtime_checkable
class ToolSession(Protocol):
    """One episode's view of a tool server: its images and the calls it makes."""

    @property
    def images(self) -> list[np.ndarray]:
        """The conversation's images, addressed by `image_index` (tool pictures included)."""
        ...

    def add_image(self, image: np.ndarray, attachment: dict[str, Any] | None = None) -> int:
        """Append an image to the conversation; returns its `image_index`."""
        ...

    async def open(self) -> str:
        """Make sure the session is open on its server, with every image added so far; its id.

        Raises the errors of opening a session (see the module's text); `UnknownSessionError` when the
        server closed or expired it.
        """
        ...

    async def call(self, name: str, arguments: Arguments = None) -> ToolResult:
        """Call a tool method; failures come back as error results, never as exceptions.

        The pictures a tool makes are kept by the session; their indices are `result.image_indices`.
        """
        ...

    async def call_many(self, calls: Sequence[tuple[str, Arguments]]) -> list[ToolResult]:
        """Run the calls of one turn in parallel; results in call order."""
        ...

    def close(self) -> None:
        """Release the session and its variables."""
        ...


@runtime_checkable
class ToolProvider(Protocol):
    """A started tool server: its tool specs and the sessions it opens."""

    def specs(self) -> list[ToolSpec]:
        """The specs of every tool method served."""
        ...

    def open_session(
        self,
        images: Sequence[np.ndarray],
        attachments: Sequence[dict[str, Any] | None] | None = None,
        seed: int | None = None,
    ) -> ToolSession:
        """Open a session for one episode: its images, one metadata dict per image, and its seed."""
        ...
