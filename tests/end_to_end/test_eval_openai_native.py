"""`spacetools eval --policy openai --option tool_mode=native` against a local endpoint that calls tools natively.

The endpoint plays a frontier model: it reads the ``tools`` parameter, calls the pointing tool through
``tool_calls`` under its function name, and answers once the ``tool`` message with its call's id
brings the detection back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chat_server import RespondingChatServer
from spacetools.bench.dataset import read_samples
from spacetools.kit.function_names import FUNCTION_NAME_RE

from .eval_run import read_run, run_eval
from .test_eval_openai import _DETECTED, _object_named, _texts, play_model

POINTING_FUNCTION = "roborefer-detect_one"


def play_native_model(body: dict[str, Any]) -> dict[str, Any]:
    """Call the pointing function natively, then answer as the tag-protocol player would."""
    messages = body["messages"]
    assert all(message["role"] != "tool" or "tool_call_id" in message for message in messages)
    if messages[-1]["role"] != "tool":
        question = _texts(next(m for m in messages if m["role"] == "user"))
        arguments = {"obj_name": _object_named(question), "image_index": 0}
        return {
            "content": "<think>I locate the object first.</think>",
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": POINTING_FUNCTION, "arguments": json.dumps(arguments)},
                }
            ],
        }
    # The tag player reads the question and the detection; hand it the tool message's text.
    question = next(m for m in messages if m["role"] == "user")
    response = {"role": "user", "content": f"<tool_response>{_texts(messages[-1])}</tool_response>"}
    return {"content": play_model({"messages": [question, response]})}


@pytest.mark.slow
def test_native_function_calling_drives_a_live_tool(spatialsim_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with RespondingChatServer(play_native_model) as server:
        run_eval(
            [
                "--policy", "openai",
                "--option", "model=test",
                "--option", f"base_url={server.base_url}",
                "--option", "api_key_env=SPACETOOLS_NO_KEY",
                "--option", "max_retries=0",
                "--option", "tool_mode=native",
                "--data", str(spatialsim_data),
                "--out", str(out),
                "--profile", "exact",
            ]
        )  # fmt: skip

    rows, _summary = read_run(out)
    samples = {f"{s.data_source}/{s.extra_info['index']}": s for s in read_samples(spatialsim_data)}
    assert sorted(row["id"] for row in rows) == sorted(samples)
    assert len(server.requests) == 2 * len(samples)
    for request in server.requests:
        names = [tool["function"]["name"] for tool in request["tools"]]
        assert POINTING_FUNCTION in names and all(FUNCTION_NAME_RE.match(name) for name in names)
        # The native prompt, not the tag protocol's tool block with dotted names.
        assert "<tools>" not in request["messages"][0]["content"]

    for row in rows:
        trajectory = row["trajectory"]
        assert trajectory["finish_reason"] == "answer" and trajectory["error"] is None, trajectory["error"]
        (call,) = trajectory["tool_calls"]
        assert call["name"] == "roborefer.detect_one" and not call["is_error"], call["result_text"]
        assert _DETECTED.search(call["result_text"])
        assert row["score"]["parse_ok"]

    answering = [request for request in server.requests if request["messages"][-1]["role"] == "tool"]
    assert len(answering) == len(samples)
    for request in answering:
        assistant, tool = request["messages"][-2:]
        (sent_call,) = assistant["tool_calls"]
        assert sent_call["function"]["name"] == POINTING_FUNCTION
        assert tool["tool_call_id"] == sent_call["id"]
        assert "<tool_response>" not in tool["content"] and _DETECTED.search(tool["content"])
