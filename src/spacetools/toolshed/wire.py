"""The HTTP wire format of the Toolshed: request and response models shared by the server and the client.

Pydantic only (the client must not need FastAPI). Conventions:

- Images travel as base64 data URLs (`data:image/png;base64,…`; JPEG is accepted on upload), encoded
  and decoded by `spacetools.kit.imagecodec`.
- Variables never leave the server: a call result lists the names it stored, the model refers to them
  as `"$name"` in later calls of the same session, and the server resolves them. Nor do the
  attachments of the pictures tools make (`ToolResult.attachments`, e.g. the scene a simulated
  robot's photo shows): the server session keeps them for later calls on those pictures.
- Tool failures are results with `is_error` true, never HTTP errors. HTTP errors mean the request
  itself was refused: the body is `{"detail": <why>, "code": <code>}`, the code naming the error of
  `spacetools.kit.errors` that the client raises again (`too_many_sessions`, `unknown_session`, …).
  401: no or a wrong bearer token; 404: a closed, expired or unknown session; 408: a call body that
  did not arrive in time; 413: a body or an image over the limits (call bodies have their own,
  smaller limit) or images over the memory limit; 422: a malformed body; 429: too many open sessions;
  503: too many calls in flight, refused before the body is read (retry after the `Retry-After`
  seconds).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Attachment",
    "CallRequest",
    "CallResponse",
    "HealthResponse",
    "ImageRequest",
    "ImageResponse",
    "SessionRequest",
    "SessionResponse",
    "ToolAvailability",
    "ToolSpecResponse",
]

#: Per-image metadata for the tools, passed to them unread (e.g. `{"scene": "<scene spec JSON>"}`, what
#: the simulated tools read).
Attachment = dict[str, Any] | None


class SessionRequest(BaseModel):
    """`POST /sessions`: open a session for one episode."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is a 422 naming it, not silently dropped

    images: list[str] = Field(description="The task's images as PNG or JPEG base64 data URLs.")
    attachments: list[Attachment] | None = Field(
        default=None, description="Per-image metadata for the tools (None where an image has none)."
    )
    seed: int | None = Field(
        default=None, ge=-(2**63), lt=2**64, description="The session seed; enters every call's random seed."
    )


class SessionResponse(BaseModel):
    """The id of a new session and how many images it holds."""

    id: str
    image_count: int


class ImageRequest(BaseModel):
    """`POST /sessions/{id}/images`: append an image to the conversation."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="A PNG or JPEG base64 data URL.")
    attachment: Attachment = Field(default=None, description="The image's metadata for the tools.")


class ImageResponse(BaseModel):
    """The `image_index` the added image got."""

    index: int


class CallRequest(BaseModel):
    """One tool call of `POST /sessions/{id}/calls` (the body is a list of these)."""

    name: str = Field(description='The public tool method name, e.g. "echo.echo".')
    # Any JSON, not only objects: the Toolshed answers other shapes with the error result the model
    # would get in process, rather than the request failing as a whole.
    arguments: Any = Field(
        default=None, description='A JSON object (or its text); "$name" strings refer to variables.'
    )


class CallResponse(BaseModel):
    """The result of one call, as the model and the rollout see it."""

    text: str
    is_error: bool
    variables: list[str] = Field(description="Names of the variables stored (their values stay here).")
    images: list[str] = Field(default_factory=list, description="PNG data URLs; only with ?images=true.")
    value: Any = Field(default=None, description="The tool's structured (JSON) result, for code to read.")
    image_indices: list[int] = Field(
        default_factory=list, description="The conversation indices the session gave the tool's pictures."
    )


class ToolSpecResponse(BaseModel):
    """One tool method as `GET /tools/specs` lists it: what the model sees, and its geometry declaration."""

    name: str
    description: str
    parameters: dict[str, Any]
    geometry: dict[str, str] = Field(
        default_factory=dict,
        description='Keys of its `value` that hold geometry, with their kinds ("points", …).',
    )


class ToolAvailability(BaseModel):
    """Whether one tool can take calls now."""

    available: bool
    live_instances: int
    instances: int
    detail: str | None = Field(default=None, description="Why it is unavailable, while it is.")


class HealthResponse(BaseModel):
    """`GET /health`: "ok" when every tool is available with a live instance, "degraded" while one is not."""

    status: Literal["ok", "degraded"] = "ok"
    profile: str | None
    tool_methods: int
    open_sessions: int
    tools: dict[str, ToolAvailability] = Field(default_factory=dict)
