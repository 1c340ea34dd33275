"""How the Toolshed's HTTP servers answer: JSON that is always sendable, and errors by the vocabulary.

Every error answer is ``{"detail": <message>, "code": <code>}``: the errors of `spacetools.kit.errors`
through one handler registered per class (its `status`, its `code`), FastAPI's own refusals (a body
that does not validate or is too large) given the vocabulary's code for them. The client raises the
class the code names (`spacetools.toolshed.client`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from spacetools.kit.errors import (
    ERRORS,
    BodyTooLargeError,
    InvalidRequestError,
    OverloadedError,
    SpacetoolsError,
)
from spacetools.toolshed.admission import RETRY_AFTER_S

__all__ = ["SafeJSONResponse", "add_error_handlers", "brief_errors", "error_response", "invalid_body"]


class SafeJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped, so text with lone surrogates (legal in JSON, not in
    UTF-8) is still sent, as `\\ud800`, instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return _JSON.encode(content).encode("ascii")


_JSON = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def error_response(exc: SpacetoolsError, detail: Any = None) -> SafeJSONResponse:
    """The answer to an error of the vocabulary: its status, its message (or `detail`) and its code."""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, OverloadedError) else None
    return SafeJSONResponse(
        {"detail": str(exc) if detail is None else detail, "code": exc.code},
        status_code=exc.status,
        headers=headers,
    )


async def _vocabulary_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SpacetoolsError)
    return error_response(exc)


async def invalid_body(_request: Request, exc: Exception) -> Response:
    """The 422 for a body that does not validate (an exception handler for `RequestValidationError`):
    the errors without the input FastAPI's own handler echoes, which may be what could not be encoded."""
    assert isinstance(exc, RequestValidationError)
    return error_response(InvalidRequestError("invalid body"), brief_errors(exc.errors()))


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's and Starlette's own refusals, with the vocabulary's code where one applies."""
    assert isinstance(exc, StarletteHTTPException)
    cause = exc.__cause__
    # FastAPI answers 400 for a body json cannot read though it is JSON: an integer of more digits
    # than Python converts, or nesting deeper than its recursion limit. Say which, as a 422.
    if exc.status_code == 400 and isinstance(cause, ValueError | RecursionError):
        reason = "it is nested too deeply" if isinstance(cause, RecursionError) else str(cause)
        return error_response(InvalidRequestError(f"the body cannot be read as JSON: {reason}"))
    if exc.status_code == BodyTooLargeError.status:
        return error_response(BodyTooLargeError(exc.detail))
    return await http_exception_handler(request, exc)


def add_error_handlers(app: FastAPI) -> None:
    """Answer the vocabulary's errors (a handler per class), invalid bodies and framework refusals."""
    for error in ERRORS:
        app.add_exception_handler(error, _vocabulary_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(StarletteHTTPException, _http_error)


def brief_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors without the input they echo (which may be what could not be encoded)."""
    return [{key: error.get(key) for key in ("type", "loc", "msg")} for error in errors]
