"""`spacetools eval --policy openai` against a real local chat-completions server that plays a model.

The server reads the question it is sent, calls ``roborefer.detect_one`` on the object it names, then
answers from the point the tool returned, so the test sees a tool result travel from the Toolshed to
the endpoint and into the score.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chat_server import RespondingChatServer
from spacetools.agent.policies.openai import OpenAIPolicy
from spacetools.bench.dataset import read_samples
from spacetools.bench.evaluate import SAMPLES_FILE, EvalConfig, evaluate, read_rows
from spacetools.kit.imagecodec import decode as data_url_to_image
from spacetools.rewards import compute_score

from .eval_run import read_run, run_eval

# The object a question is about, in the SpatialSim templates for pose and yes/no relation questions.
_OBJECT_PATTERNS = (
    re.compile(r"(?:box of|encloses) the (?P<obj>[\w ]+?)(?: in the image)?[.?]"),
    re.compile(r"\bis the (?P<obj>[\w ]+?) (?:behind|in front of|left of|right of|above|below|on top of)\b"),
    re.compile(r"\bCan the (?P<obj>[\w ]+?) fit\b"),
)
_DETECTED = re.compile(r"Detected 1 instance\(s\) of '[^']*': \[\((?P<x>[\d.]+), (?P<y>[\d.]+)\)\]")
BOX_HALF_SIZE = 0.03


def _texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def _object_named(question: str) -> str:
    for pattern in _OBJECT_PATTERNS:
        match = pattern.search(question)
        if match:
            return match.group("obj")
    raise ValueError(f"no object named in the question {question!r}")


def play_model(body: dict[str, Any]) -> str:
    """A two-turn model: point at the question's object, then answer from the point it was given."""
    messages = body["messages"]
    question = _texts(next(m for m in messages if m["role"] == "user"))
    last = _texts(messages[-1])
    if messages[-1]["role"] != "user" or "<tool_response>" not in last:
        call = {
            "name": "roborefer.detect_one",
            "arguments": {"obj_name": _object_named(question), "image_index": 0},
        }
        return f"<think>I locate the object first.</think>\n<tool_call>{json.dumps(call)}</tool_call>"
    detected = _DETECTED.search(last)
    if detected is None:
        raise ValueError(f"the tool response holds no detection: {last!r}")
    x, y = float(detected["x"]), float(detected["y"])
    if "bounding box" in question:
        h = BOX_HALF_SIZE
        face = [(x - h, y + h), (x + h, y + h), (x + h, y - h), (x - h, y - h)]
        corners = face + [(u, v - h) for u, v in face]
        answer = "[" + ", ".join(f"({u:.3f}, {v:.3f})" for u, v in corners) + "]"
    else:
        answer = "Yes"
    return f"<think>The object is at ({x:.3f}, {y:.3f}).</think>\n<answer>{answer}</answer>"


@pytest.mark.slow
def test_openai_endpoint_calls_a_live_tool_and_is_scored(
    spatialsim_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    out = tmp_path / "run"
    with RespondingChatServer(play_model) as server:
        run_eval(
            [
                "--policy", "openai",
                "--option", "model=test",
                "--option", f"base_url={server.base_url}",
                "--option", "max_retries=0",
                "--data", str(spatialsim_data),
                "--out", str(out),
                "--profile", "exact",
            ]
        )  # fmt: skip

    rows, summary = read_run(out)
    samples = {f"{s.data_source}/{s.extra_info['index']}": s for s in read_samples(spatialsim_data)}
    assert sorted(row["id"] for row in rows) == sorted(samples)
    assert summary["policy"] == "openai"
    # Two turns per episode, every request authorised with the key the policy read from the environment.
    assert len(server.requests) == 2 * len(samples)
    assert set(server.authorizations) == {"Bearer test"}
    assert {request["model"] for request in server.requests} == {"test"}

    for row in rows:
        sample, trajectory = samples[row["id"]], row["trajectory"]
        assert trajectory["finish_reason"] == "answer" and trajectory["error"] is None, trajectory["error"]
        (call,) = trajectory["tool_calls"]
        assert call["name"] == "roborefer.detect_one" and not call["is_error"], call["result_text"]
        assert call["arguments"]["obj_name"] == _object_named(sample.question)
        assert _DETECTED.search(call["result_text"])

        # The tool's text is in the conversation the run recorded and in the request the model answered.
        tool_messages = [m for m in trajectory["messages"] if m["role"] == "tool"]
        assert len(tool_messages) == 1 and call["result_text"] in _texts(tool_messages[0])
        answered = _request_for(server.requests, sample.question, answering=True)
        assert call["result_text"] in _texts(answered["messages"][-1])

        # The endpoint saw the sample's own pixels (lossless PNG of the decoded parquet image).
        first = _request_for(server.requests, sample.question, answering=False)
        (image_part,) = [p for p in first["messages"][1]["content"] if p["type"] == "image_url"]
        np.testing.assert_array_equal(data_url_to_image(image_part["image_url"]["url"]), sample.images[0])

        expected = compute_score(
            sample.data_source, play_model(answered), sample.ground_truth, sample.extra_info
        )
        assert row["score"] == expected and expected["parse_ok"]
    pose = next(row for row in rows if row["data_source"] == "spatialsim_boppose")
    # A small box around the detected point overlaps the true box only if the point was on the object.
    assert pose["score"]["score"] > 0


@pytest.mark.slow
def test_one_openai_policy_serves_two_runs(spatialsim_data: Path, tmp_path: Path) -> None:
    with RespondingChatServer(play_model) as server:
        # Each run has its own event loop; the policy's HTTP client must not outlive the first one.
        policy = OpenAIPolicy(
            "test", base_url=server.base_url, api_key_env="SPACETOOLS_NO_KEY", max_retries=0
        )
        runs = [tmp_path / "first", tmp_path / "second"]
        for out in runs:
            config = EvalConfig(
                data=spatialsim_data, out=out, benches=["spatialsim_robospatial"], profile="exact"
            )
            evaluate(policy, config)

    first, second = (read_rows(out / SAMPLES_FILE) for out in runs)
    assert [row["trajectory"]["error"] for row in first + second] == [None, None]
    assert [row["score"] for row in second] == [row["score"] for row in first]
    assert policy.usage["requests"] == len(server.requests) == 4


def _request_for(requests: list[dict[str, Any]], question: str, *, answering: bool) -> dict[str, Any]:
    """The one request about ``question`` that carries (or not) a tool response."""
    (found,) = [
        request
        for request in requests
        if question in _texts(request["messages"][1])
        and ("<tool_response>" in _texts(request["messages"][-1])) == answering
    ]
    return found
