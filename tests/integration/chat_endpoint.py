"""A real OpenAI-compatible chat-completions server on 127.0.0.1 whose replies a function computes.

Unlike the agent tests' scripted server, each reply is ``respond(request_body)``, so a test can play
a model that reads the question and the tool responses it is sent, whatever order concurrent
episodes arrive in.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

Responder = Callable[[dict[str, Any]], str]


class RespondingChatServer:
    """Serves ``POST /v1/chat/completions`` in a background thread; records every request and its key."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._complete)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RespondingChatServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the chat server did not start within 10 s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        try:
            text = self.respond(body)
        except Exception as error:  # the test reads the reason in the trajectory's policy error
            return JSONResponse({"error": {"message": f"responder failed: {error}"}}, status_code=400)
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
        )
