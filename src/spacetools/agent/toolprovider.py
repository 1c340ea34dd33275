"""What the rollout needs of a Toolshed: the minimal protocol a local and a remote Toolshed both satisfy.

A stand-in until ``spacetools.toolshed.protocol`` (``ToolProvider``/``ToolSession``) exists; the rollout
and the evaluation are typed against these, never against a concrete Toolshed class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from spacetools.tools.definition import ToolResult, ToolSpec


class ToolSession(Protocol):
    """One episode's session: the conversation's images, tool calls, then close."""

    def add_image(self, image: np.ndarray) -> int:
        """Add an image to the session; return its conversation index."""
        ...

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> ToolResult:
        """Run one tool call; tool failures come back as error results."""
        ...

    def close(self) -> None:
        """Release the session's images and variables."""
        ...


class ToolProvider(Protocol):
    """A started tool server, local or remote."""

    def specs(self) -> list[ToolSpec]:
        """The model-facing specs of every tool method served."""
        ...

    def open_session(
        self,
        images: Sequence[np.ndarray],
        scenes: Sequence[str | None] | None = None,
        seed: int | None = None,
    ) -> ToolSession:
        """Open a session holding ``images`` (and, per image, what only the tools receive)."""
        ...
