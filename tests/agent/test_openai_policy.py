"""OpenAIPolicy against a real chat-completions server on 127.0.0.1 (see tests/chat_server.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import openai
import pytest

from spacetools.agent.policies import make_policy
from spacetools.agent.policies.openai import OpenAIPolicy
from spacetools.agent.protocol import build_user_message, tool_message
from spacetools.agent.types import EpisodeState, Task
from spacetools.kit.imagecodec import decode as data_url_to_image

if TYPE_CHECKING:
    from chat_server import ScriptedChatServer as ChatServer

IMAGE = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
TOOL_IMAGE = np.full((3, 3, 3), 200, dtype=np.uint8)


def state() -> EpisodeState:
    task = Task(id="t1", data_source="test", question="How far?", images=[IMAGE])
    messages = [
        {"role": "system", "content": "SYSTEM"},
        build_user_message(task.question),
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>',
        },
        tool_message("first"),
        tool_message("second", image_indices=[1]),
    ]
    return EpisodeState(task=task, messages=messages, images=[IMAGE, TOOL_IMAGE], turn=1, tool_specs=[])


def policy(chat: ChatServer, **options: object) -> OpenAIPolicy:
    return OpenAIPolicy("test-model", base_url=chat.base_url, api_key_env="SPACETOOLS_TEST_NO_KEY", **options)


def act(p: OpenAIPolicy, s: EpisodeState) -> str:
    async def run() -> str:
        try:
            return await p.act(s)
        finally:
            await p.aclose()

    return asyncio.run(run())


def test_request_uses_the_tag_protocol_with_images_as_data_urls(chat: ChatServer) -> None:
    chat.script.append("<answer>1.2 m</answer>")
    p = policy(chat, temperature=0.7, max_tokens=55)
    assert act(p, state()) == "<answer>1.2 m</answer>"
    (request,) = chat.requests
    assert (request["model"], request["temperature"], request["max_tokens"]) == ("test-model", 0.7, 55)
    assert "tools" not in request  # no native function calling
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # the two tool responses form one user turn
    user = request["messages"][1]["content"]
    assert user[0]["type"] == "image_url" and user[1] == {"type": "text", "text": "How far?"}
    np.testing.assert_array_equal(data_url_to_image(user[0]["image_url"]["url"]), IMAGE)
    responses = request["messages"][3]["content"]
    assert [p.get("text") for p in responses if p["type"] == "text"] == [
        "<tool_response>\nfirst\n</tool_response>",
        "\n",  # blocks of one turn are newline-separated, as Qwen2.5's template renders them
        "<tool_response>\nsecond\n[The tool returned 1 image(s), now image_index 1.]\n</tool_response>",
    ]
    np.testing.assert_array_equal(data_url_to_image(responses[-1]["image_url"]["url"]), TOOL_IMAGE)
    assert p.usage == {"requests": 1, "prompt_tokens": 10, "completion_tokens": 3}


def test_rate_limits_and_server_errors_are_retried(chat: ChatServer) -> None:
    chat.script.extend([429, 500, 503, "<answer>Yes</answer>"])
    assert act(policy(chat, max_retries=3), state()) == "<answer>Yes</answer>"
    assert len(chat.requests) == 4


def test_a_timeout_is_retried(chat: ChatServer) -> None:
    chat.script.extend([1.0, "late", "<answer>on time</answer>"])
    assert act(policy(chat, timeout_s=0.3, max_retries=2), state()) == "<answer>on time</answer>"


def test_errors_surface_when_retries_run_out(chat: ChatServer) -> None:
    chat.script.extend([500, 500])
    with pytest.raises(openai.InternalServerError):
        act(policy(chat, max_retries=1), state())
    assert len(chat.requests) == 2


def test_client_errors_are_not_retried(chat: ChatServer) -> None:
    chat.script.extend([400, "<answer>never</answer>"])
    with pytest.raises(openai.BadRequestError):
        act(policy(chat, max_retries=3), state())
    assert len(chat.requests) == 1


def test_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPACETOOLS_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="set SPACETOOLS_TEST_KEY"):
        OpenAIPolicy("gpt-x", api_key_env="SPACETOOLS_TEST_KEY")
    monkeypatch.setenv("SPACETOOLS_TEST_KEY", "sk-test")
    assert OpenAIPolicy("gpt-x", api_key_env="SPACETOOLS_TEST_KEY").client.api_key == "sk-test"


def test_make_policy_builds_by_name_and_rejects_unknown_names(chat: ChatServer) -> None:
    p = make_policy("openai", model="m", base_url=chat.base_url, api_key_env="SPACETOOLS_TEST_NO_KEY")
    assert isinstance(p, OpenAIPolicy) and p.name == "openai"
    with pytest.raises(ValueError, match="unknown policy 'gpt'"):
        make_policy("gpt")
    with pytest.raises(ValueError, match="bad limits"):
        OpenAIPolicy("m", base_url=chat.base_url, max_tokens=0)
