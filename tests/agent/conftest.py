"""Agent test fixtures, and a tiny OpenAI-compatible chat-completions server replying from a script.

Each scripted step is a reply text, an HTTP status to fail with (429, 500, …), or a delay in seconds
(a float) before the next step is taken, to provoke a client timeout.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

Step = str | int | float


class ChatServer:
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
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

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the chat server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        step = self.script.popleft() if self.script else "<answer>out of script</answer>"
        if isinstance(step, float):
            # Take the delayed reply now, so a retry sent during the delay gets the step after it.
            delay, step = step, self.script.popleft()
            await asyncio.sleep(delay)
        if isinstance(step, int):
            # retry-after-ms keeps the client's back-off short in tests.
            return JSONResponse(
                {"error": {"message": f"scripted {step}"}}, status_code=step, headers={"retry-after-ms": "10"}
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": step}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
        )


@pytest.fixture(scope="module")
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def chat(chat_server: ChatServer) -> ChatServer:
    """The module's server with an empty script and request log."""
    chat_server.script.clear()
    chat_server.requests.clear()
    return chat_server
