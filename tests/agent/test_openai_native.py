"""Native function calling: the name mapping, and OpenAIPolicy(tool_mode="native") against a live endpoint."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

from spacetools.agent.policies.openai import OpenAIPolicy
from spacetools.agent.protocol import build_user_message, parse_turn, tool_message
from spacetools.agent.types import EpisodeState, Task
from spacetools.kit.definition import ToolSpec
from spacetools.kit.function_names import FUNCTION_NAME_RE, FunctionNames
from spacetools.kit.imagecodec import decode as data_url_to_image
from spacetools.toolshed import Toolshed

if TYPE_CHECKING:
    from chat_server import ScriptedChatServer as ChatServer

IMAGE = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
TOOL_IMAGE = np.full((3, 3, 3), 200, dtype=np.uint8)
PARAMETERS = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
SPECS = [
    ToolSpec(name="sam2.segment_from_point", description="Segment.", parameters=PARAMETERS),
    ToolSpec(name="echo.echo", description="Echo.", parameters={"type": "object", "properties": {}}),
]


def test_every_v1_name_maps_to_a_valid_function_name_and_back() -> None:
    specs = Toolshed("v1").specs()
    mapping = FunctionNames(spec.name for spec in specs)
    wires = [mapping.to_wire(spec.name) for spec in specs]
    assert all(FUNCTION_NAME_RE.match(wire) for wire in wires) and len(set(wires)) == len(specs)
    assert [mapping.from_wire(wire) for wire in wires] == [spec.name for spec in specs]
    assert mapping.to_wire("sam2.segment_from_point") == "sam2-segment_from_point"
    assert mapping.from_wire("sam2.segment_from_point") is None


def test_long_and_colliding_names_stay_valid_and_reversible() -> None:
    names = ["a" * 80 + ".m", "a.b", "a-b", "weird name!.x"]
    mapping = FunctionNames(names)
    wires = [mapping.to_wire(name) for name in names]
    assert all(FUNCTION_NAME_RE.match(wire) for wire in wires)
    assert len(set(wires)) == len(names)
    assert [mapping.from_wire(wire) for wire in wires] == names


def state() -> EpisodeState:
    task = Task(id="t1", data_source="test", question="How far?", images=[IMAGE])
    calls = [
        {"name": "sam2.segment_from_point", "arguments": {"x": 0.5}},
        {"name": "echo.echo", "arguments": {}},
    ]
    messages = [
        {"role": "system", "content": "TAG PROTOCOL SYSTEM PROMPT <tools>…</tools>"},
        build_user_message(task.question),
        {
            "role": "assistant",
            "content": "<think>two calls</think>"
            + "".join(f"\n<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in calls),
        },
        tool_message("first"),
        tool_message("second", image_indices=[1]),
    ]
    return EpisodeState(task=task, messages=messages, images=[IMAGE, TOOL_IMAGE], turn=1, tool_specs=SPECS)


def act(policy: OpenAIPolicy, s: EpisodeState) -> str:
    async def run() -> str:
        try:
            return await policy.act(s)
        finally:
            await policy.aclose()

    return asyncio.run(run())


def native_policy(chat: ChatServer) -> OpenAIPolicy:
    return OpenAIPolicy(
        "m", base_url=chat.base_url, api_key_env="SPACETOOLS_TEST_NO_KEY", max_retries=0, tool_mode="native"
    )


def test_native_request_carries_tools_calls_and_tool_results(chat: ChatServer) -> None:
    chat.script.append("<answer>3</answer>")
    assert act(native_policy(chat), state()) == "<answer>3</answer>"
    (request,) = chat.requests
    assert [tool["function"]["name"] for tool in request["tools"]] == ["sam2-segment_from_point", "echo-echo"]
    assert request["tools"][0]["function"]["parameters"] == PARAMETERS
    system, _user, assistant, first, second, images = request["messages"]
    assert "<tools>" not in system["content"] and "<answer>" in system["content"]
    assert assistant["content"] == "<think>two calls</think>"
    assert [call["function"]["name"] for call in assistant["tool_calls"]] == [
        "sam2-segment_from_point",
        "echo-echo",
    ]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"x": 0.5}
    ids = [call["id"] for call in assistant["tool_calls"]]
    assert len(set(ids)) == 2
    assert (first["role"], first["tool_call_id"], first["content"]) == ("tool", ids[0], "first")
    assert second["tool_call_id"] == ids[1] and second["content"].startswith("second")
    assert "image_index 1" in second["content"]
    # The tool's image follows the tool messages as a user message.
    assert images["role"] == "user"
    (image_part,) = [part for part in images["content"] if part["type"] == "image_url"]
    np.testing.assert_array_equal(data_url_to_image(image_part["image_url"]["url"]), TOOL_IMAGE)


def test_tool_calls_come_back_as_the_projects_calls(chat: ChatServer) -> None:
    def call(name: str, arguments: str) -> dict[str, object]:
        return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}

    chat.script.append(
        {
            "content": "<think>measure</think>",
            "tool_calls": [
                call("sam2-segment_from_point", '{"x": 0.25}'),
                call("echo-echo", "{not json"),
                call("nosuch-tool", "{}"),
            ],
        }
    )
    text = act(native_policy(chat), state())
    parsed = parse_turn(text, [spec.name for spec in SPECS])
    assert parsed.think == "measure"
    (good,) = parsed.tool_calls
    assert (good.index, good.name, good.arguments) == (0, "sam2.segment_from_point", {"x": 0.25})
    assert [(error.index, error.kind) for error in parsed.errors] == [
        (1, "bad_arguments"),
        (2, "unknown_tool"),
    ]


def test_the_tag_protocol_stays_the_default(chat: ChatServer) -> None:
    chat.script.append("<answer>1</answer>")
    policy = OpenAIPolicy("m", base_url=chat.base_url, api_key_env="SPACETOOLS_TEST_NO_KEY", max_retries=0)
    act(policy, state())
    (request,) = chat.requests
    assert "tools" not in request and request["messages"][0]["content"].startswith("TAG PROTOCOL")


def test_an_unknown_tool_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="tool_mode"):
        OpenAIPolicy("m", base_url="http://127.0.0.1:1/v1", tool_mode="xml")  # type: ignore[arg-type]
