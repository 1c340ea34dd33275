"""Real OpenAI-compatible chat-completions servers on 127.0.0.1, for the policy and eval tests.

`ScriptedChatServer` replies from a script: each step is a reply text, an assistant message (a dict,
e.g. with native ``tool_calls``), an HTTP status to fail with (429, 500, …), or a delay in seconds (a
float) before the next step, to provoke a client timeout.
`RespondingChatServer` replies with ``respond(request_body)``, so a test can play a model that reads
the question and the tool responses it is sent, whatever order concurrent episodes arrive in.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

# A reply: its text, or the whole assistant message (``content`` and/or ``tool_calls``).
Reply = str | dict[str, Any]
Step = Reply | int | float


class ChatServer:
    """Serves ``POST /v1/chat/completions`` in a background thread; records every request and its key."""

    def __init__(self) -> None:
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

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the chat server did not start within 10 s")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ChatServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def reply(self, body: dict[str, Any]) -> Reply | int:
        """The reply (text or assistant message), or an HTTP status code to fail with."""
        raise NotImplementedError

    async def _complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        try:
            step = await self.reply(body)
        except Exception as error:  # the test reads the reason in the trajectory's policy error
            return JSONResponse({"error": {"message": f"responder failed: {error}"}}, status_code=400)
        if isinstance(step, int):
            # retry-after-ms keeps the client's back-off short in tests.
            return JSONResponse(
                {"error": {"message": f"scripted {step}"}}, status_code=step, headers={"retry-after-ms": "10"}
            )
        message = {"content": step} if isinstance(step, str) else {"content": None, **step}
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", **message},
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
        )


class ScriptedChatServer(ChatServer):
    """Replies with the next step of `script` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.script: deque[Step] = deque()

    async def reply(self, body: dict[str, Any]) -> Reply | int:
        step = self.script.popleft() if self.script else "<answer>out of script</answer>"
        if isinstance(step, float):
            # Take the delayed reply now, so a retry sent during the delay gets the step after it.
            delay, step = step, self.script.popleft()
            await asyncio.sleep(delay)
        return step


class RespondingChatServer(ChatServer):
    """Replies with ``respond(request_body)``."""

    def __init__(self, respond: Callable[[dict[str, Any]], Reply]) -> None:
        super().__init__()
        self.respond = respond

    async def reply(self, body: dict[str, Any]) -> Reply | int:
        return self.respond(body)
