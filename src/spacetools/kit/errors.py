"""The one error vocabulary of the tools and the Toolshed: every error a caller may handle, by type.

Each class carries the HTTP `status` the server answers it with and a stable machine-readable `code`
that the response body carries (``{"detail": <message>, "code": <code>}``), so the HTTP client raises
the same class again (`error_for_code`): code written against `ToolProvider` handles one set of errors
whether the tools run in process, in worker processes, on Ray or behind a server. Each class keeps the
builtin base it had before (`ValueError`, `RuntimeError`, `KeyError`…) for callers that catch those.

A failing tool *call* is still a result for the model, not an exception: a `ToolError` raised in a tool
method (or by the Toolshed on the call's path: bad arguments, unknown variable) becomes an
error result whose text is its message; so does a call of a tool that is not served.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ERRORS",
    "BodyTimeoutError",
    "BodyTooLargeError",
    "ImageDecodeError",
    "ImageTooLargeError",
    "InvalidRequestError",
    "MemoryLimitError",
    "OverloadedError",
    "ServerError",
    "SpacetoolsError",
    "TooManySessionsError",
    "ToolArgumentError",
    "ToolError",
    "UnauthorizedError",
    "UnknownSessionError",
    "UnknownVariableError",
    "error_for_code",
]


class SpacetoolsError(Exception):
    """The base of the vocabulary: an error with its HTTP `status` and its machine-readable `code`."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "error"

    def __str__(self) -> str:
        # The message as given, also for the `KeyError` subclasses (which would print it quoted).
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class ServerError(SpacetoolsError, RuntimeError):
    """The server failed in a way the vocabulary does not name (or answered a code this client lacks)."""

    status = 500
    code = "server_error"


class InvalidRequestError(SpacetoolsError, ValueError):
    """A request (images, attachments, a body) that cannot be used as it is."""

    status = 422
    code = "invalid_request"


class ImageDecodeError(InvalidRequestError):
    """An image (a data URL, bytes or a file) that cannot be decoded."""

    code = "bad_image"


class ImageTooLargeError(ImageDecodeError):
    """An image over the pixel limit, refused before it is decoded."""

    status = 413
    code = "image_too_large"


class MemoryLimitError(SpacetoolsError, ValueError):
    """Images that do not fit a session's (or the server's) memory limit, even after evicting variables."""

    status = 413
    code = "memory_limit"


class BodyTooLargeError(SpacetoolsError, ValueError):
    """A request body over the server's size limit."""

    status = 413
    code = "body_too_large"


class BodyTimeoutError(SpacetoolsError, TimeoutError):
    """A request body that did not arrive within the server's time limit."""

    status = 408
    code = "body_timeout"


class TooManySessionsError(SpacetoolsError, RuntimeError):
    """The cap on open sessions is reached; close finished sessions or retry later."""

    status = 429
    code = "too_many_sessions"


class OverloadedError(SpacetoolsError, RuntimeError):
    """The server holds its limit of calls in flight; retry after the time its answer names."""

    status = 503
    code = "overloaded"


class UnauthorizedError(SpacetoolsError, PermissionError):
    """The server requires a bearer token that the request does not carry."""

    status = 401
    code = "unauthorized"


class ToolError(SpacetoolsError):
    """An error the model should read: raise it inside a tool method (its message is the result's text)."""

    status = 422
    code = "tool_error"


class ToolArgumentError(ToolError):
    """The arguments of a call do not match the tool method's signature."""

    code = "bad_arguments"


class UnknownVariableError(ToolError):
    """A `"$name"` argument names no variable the session holds (never made, or evicted)."""

    code = "unknown_variable"


class UnknownSessionError(ToolError, KeyError):
    """The session is closed, expired or was never opened."""

    status = 404
    code = "unknown_session"


#: Every class of the vocabulary, for the server's exception handlers and the client's lookup.
ERRORS: tuple[type[SpacetoolsError], ...] = (
    ServerError,
    InvalidRequestError,
    ImageDecodeError,
    ImageTooLargeError,
    MemoryLimitError,
    BodyTooLargeError,
    BodyTimeoutError,
    TooManySessionsError,
    OverloadedError,
    UnauthorizedError,
    ToolError,
    ToolArgumentError,
    UnknownVariableError,
    UnknownSessionError,
)
_BY_CODE = {error.code: error for error in ERRORS}
assert len(_BY_CODE) == len(ERRORS), "every error has its own code"
#: For answers without a code (a framework's own refusals): the error each status means there.
_BY_STATUS: dict[int, type[SpacetoolsError]] = {
    400: InvalidRequestError,
    401: UnauthorizedError,
    408: BodyTimeoutError,
    413: BodyTooLargeError,
    422: InvalidRequestError,
    429: TooManySessionsError,
    503: OverloadedError,
}


def error_for_code(code: str | None, status: int) -> type[SpacetoolsError]:
    """The class of an error answer: by its `code`, else by its HTTP `status` (`ServerError` if neither)."""
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code]
    return _BY_STATUS.get(status, ServerError)
