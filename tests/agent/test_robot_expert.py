"""The scripted robot expert: reading the task's question, and its tool chain turn by turn."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import pytest

from spacetools.agent.policies import make_policy
from spacetools.agent.policies.robot_expert import RobotExpertPolicy, RobotGoal, read_goal, singular
from spacetools.agent.types import EpisodeState, Task, ToolCallRecord
from spacetools.rewards.formats import parse_points


@pytest.mark.parametrize(
    ("question", "goal"),
    [
        ("Pick up the red box.", RobotGoal("red box", "red box")),
        ("Pick up the red mug closer to the camera.", RobotGoal("the nearest red mug", "red mug")),
        ("Pick up the blue ball farther from the camera.", RobotGoal("the farthest blue ball", "blue ball")),
        ("Pick up the left one of the two red boxes.", RobotGoal("the leftmost red box", "red box")),
        ("Pick up the right one of the two green mugs.", RobotGoal("the rightmost green mug", "green mug")),
        ("Pick up the duck and place it in the tray.", RobotGoal("duck", "duck", "tray")),
        (
            "Pick up the red ball and place it to the left of the white box.",
            RobotGoal(
                "red ball",
                "red ball",
                "free space to the left of the white box where the red ball can be placed",
            ),
        ),
        (
            "Pick up the red ball and place it in front of the white box.",
            RobotGoal(
                "red ball",
                "red ball",
                "free space in front of the white box where the red ball can be placed",
            ),
        ),
        (
            "Pick up the white mug and place it to the right of the two wooden blocks.",
            RobotGoal(
                "white mug",
                "white mug",
                "free space to the right of the rightmost wooden block where the white mug can be placed",
                pair="wooden block",
                beyond="right",
            ),
        ),
        (
            "Pick up the duck and place it to the left of the two small red boxes.",
            RobotGoal(
                "duck",
                "duck",
                "free space to the left of the leftmost small red box where the duck can be placed",
                pair="small red box",
                beyond="left",
            ),
        ),
        ("How far is the mug?", None),
    ],
)
def test_read_goal(question: str, goal: RobotGoal | None) -> None:
    assert read_goal(question) == goal


def test_singular() -> None:
    assert [singular(w) for w in ("red boxes", "red mugs", "large black cylinders", "duck")] == [
        "red box",
        "red mug",
        "large black cylinder",
        "duck",
    ]


def _record(text: str, turn: int) -> ToolCallRecord:
    """A tool result as the rollout records it; detections carry their points as the tool's value."""
    value = {"points": [list(p) for p in parse_points(text)]} if text.startswith("Detected") else None
    return ToolCallRecord(
        name="tool", arguments={}, result_text=text, is_error=text.startswith("Error"), variables=[],
        latency_s=0.0, turn=turn, value=value,
    )  # fmt: skip


def _state(question: str, tool_texts: list[list[str]]) -> EpisodeState:
    task = Task(id="t", data_source="robot", question=question, images=[np.zeros((4, 4, 3), np.uint8)])
    records = [_record(text, turn) for turn, batch in enumerate(tool_texts) for text in batch]
    return EpisodeState(
        task=task,
        messages=[{"role": "user", "content": question}],
        images=list(task.images),
        turn=len(tool_texts),
        tool_specs=[],
        tool_calls=records,
    )


def _calls(text: str) -> list[dict[str, object]]:
    return [json.loads(block) for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)]


def test_the_chain_picks_then_places_and_stops_on_failures() -> None:
    expert = make_policy("robot_scripted")
    assert isinstance(expert, RobotExpertPolicy)
    question = "Pick up the duck and place it in the tray."
    history: list[list[str]] = []
    expected = [
        ["roborefer.detect_one", "roborefer.detect_one"],
        ["sam2.segment_from_point", "robot.get_depth_with_pointcloud"],
        ["grasp_generator.compute_grasp"],
        ["robot.execute_grasp"],
        ["robot.place_object_at_2d_location"],
    ]
    responses = [
        ["Detected 1 instance(s) of 'duck': [(0.4, 0.5)]", "Detected 1 instance(s) of 'tray': [(0.6, 0.45)]"],
        [
            "Segmented object at normalized coords (0.400, 0.500) with IoU score: 0.990.",
            "Generated 640x480 depth map",
        ],
        ["Generated collision-free grasp with confidence 0.800"],
        ["Grasp succeeded in 4.30s: object held"],
        ["Placement succeeded in 3.10s: object released at the target."],
    ]
    for names, response in zip(expected, responses, strict=True):
        turn = asyncio.run(expert.act(_state(question, history)))
        assert [call["name"] for call in _calls(turn)] == names
        history.append(response)
    last = _calls(asyncio.run(expert.act(_state(question, history[:4]))))
    assert last[0]["arguments"] == {"placement_point_2d": [0.6, 0.45]}  # the tray's point
    final = asyncio.run(expert.act(_state(question, history)))
    assert "<answer>I picked up the duck and placed it.</answer>" in final
    failed = asyncio.run(
        expert.act(_state(question, [*history[:3], ["Error: Grasp failed in 4.2s: empty grasp"]]))
    )
    assert "<answer>I could not pick up the duck.</answer>" in failed
    not_found = asyncio.run(expert.act(_state(question, [["Detected 0 instance(s) of 'duck': []", "x"]])))
    assert "could not find the duck" in not_found


def test_a_transient_failure_is_retried_once() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the red box."
    found = ["Detected 1 instance(s) of 'red box': [(0.4, 0.5)]"]
    flaky = [
        "Error: RuntimeError: SAM2 inference failed (transient error); retry the call",
        "Generated 640x480",
    ]
    retry = _calls(asyncio.run(expert.act(_state(question, [found, flaky]))))
    assert [call["name"] for call in retry] == ["sam2.segment_from_point"]  # only the call that failed
    recovered = ["Segmented object at normalized coords (0.400, 0.500) with IoU score: 0.950."]
    following = _calls(asyncio.run(expert.act(_state(question, [found, flaky, recovered]))))
    assert [call["name"] for call in following] == ["grasp_generator.compute_grasp"]
    still_failing = asyncio.run(expert.act(_state(question, [found, flaky, [flaky[0]]])))
    assert "<answer>I could not perceive the red box.</answer>" in still_failing


def test_beside_a_pair_the_spot_must_lie_beyond_both() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the duck and place it to the left of the two red mugs."
    first = _calls(asyncio.run(expert.act(_state(question, []))))
    assert [(call["name"], call["arguments"]["obj_name"]) for call in first] == [  # type: ignore[index]
        ("roborefer.detect_one", "duck"),
        (
            "roborefer.detect_one",
            "free space to the left of the leftmost red mug where the duck can be placed",
        ),
        ("roborefer.detect_all", "red mug"),
    ]
    duck = "Detected 1 instance(s) of 'duck': [(0.7, 0.5)]"
    mugs = "Detected 2 instance(s) of 'red mug': [(0.5, 0.6), (0.35, 0.55)]"
    beyond = [duck, "Detected 1 instance(s) of 'spot': [(0.2, 0.58)]", mugs]
    following = _calls(asyncio.run(expert.act(_state(question, [beyond]))))
    assert [call["name"] for call in following] == [
        "sam2.segment_from_point",
        "robot.get_depth_with_pointcloud",
    ]
    between = [duck, "Detected 1 instance(s) of 'spot': [(0.42, 0.58)]", mugs]
    refused = asyncio.run(expert.act(_state(question, [between])))
    assert "<answer>I found no place for the object.</answer>" in refused and "not left of both" in refused
    one_mug = [duck, beyond[1], "Detected 1 instance(s) of 'red mug': [(0.5, 0.6)]"]
    assert "could not find two of the red mug" in asyncio.run(expert.act(_state(question, [one_mug])))
