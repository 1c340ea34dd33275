"""Agent test fixtures: a real chat-completions server on 127.0.0.1 replying from a script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chat_server import ScriptedChatServer as ChatServer


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
