"""The scripted robot expert: reading the task's question, and its tool chain turn by turn."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import numpy as np
import pytest

from spacetools.agent.policies import make_policy
from spacetools.agent.policies.robot_expert import (
    RobotExpertPolicy,
    RobotGoal,
    median_point,
    read_goal,
    singular,
)
from spacetools.agent.policies.scripted.replay import ToolOutcome
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
                "free space to the left of the white box",
            ),
        ),
        (
            "Pick up the red ball and place it in front of the white box.",
            RobotGoal(
                "red ball",
                "red ball",
                "free space in front of the white box where the red ball can be placed",
                "free space in front of the white box",
            ),
        ),
        (
            "Pick up the white mug and place it to the right of the two wooden blocks.",
            RobotGoal(
                "white mug",
                "white mug",
                "free space to the right of the rightmost wooden block where the white mug can be placed",
                "free space to the right of the rightmost wooden block",
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
                "free space to the left of the leftmost small red box",
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


Response = str | tuple[str, object]
"""A tool result's text, or its text and structured value (detections get theirs from the text)."""


def _record(response: Response, turn: int) -> ToolCallRecord:
    """A tool result as the rollout records it."""
    text, value = response if isinstance(response, tuple) else (response, None)
    if text.startswith("Detected"):
        value = {"points": [list(p) for p in parse_points(text)]}
    return ToolCallRecord(
        name="tool", arguments={}, result_text=text, is_error=text.startswith("Error"), variables=[],
        latency_s=0.0, turn=turn, value=value,
    )  # fmt: skip


def _state(question: str, tool_texts: list[list[Response]]) -> EpisodeState:
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


def _calls(text: str) -> list[dict[str, Any]]:
    return [json.loads(block) for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)]


def _next(expert: RobotExpertPolicy, question: str, history: list[list[Response]]) -> str:
    return asyncio.run(expert.act(_state(question, history)))


def _detected(name: str, *points: tuple[float, float]) -> str:
    return f"Detected {len(points)} instance(s) of '{name}': {list(points)}"


def _mask(iou: float = 0.95, area: int = 900) -> Response:
    return (f"Segmented object with IoU score: {iou:.3f}.", {"iou": iou, "area": area, "shape": [480, 640]})


def test_median_point_ignores_one_stray_answer() -> None:
    answers = [_record(_detected("duck", point), 0) for point in ((0.40, 0.50), (0.90, 0.10), (0.42, 0.52))]
    outcomes = [ToolOutcome(a.result_text, a.is_error, a.value) for a in answers]
    assert median_point(outcomes) == pytest.approx((0.42, 0.50))
    assert median_point([ToolOutcome("Detected 0 instance(s)", value={"points": []})]) is None


def test_the_chain_picks_then_places_and_stops_on_failures() -> None:
    expert = make_policy("robot_scripted")
    assert isinstance(expert, RobotExpertPolicy)
    question = "Pick up the duck and place it in the tray."
    history: list[list[Response]] = []
    expected = [
        ["roborefer.detect_one"] * 6,
        ["sam2.segment_from_point", "robot.get_depth_with_pointcloud"],
        ["grasp_generator.compute_grasp", "vision_ops.index_at"],
        ["robot.execute_grasp"],
        ["robot.place_object_at_3d_location"],
    ]
    ducks = [_detected("duck", p) for p in ((0.40, 0.50), (0.41, 0.49), (0.60, 0.80))]
    trays = [_detected("tray", p) for p in ((0.60, 0.45), (0.62, 0.44), (0.61, 0.46))]
    responses: list[list[Response]] = [
        [*ducks, *trays],
        [_mask(), "Generated 640x480 depth map"],
        [
            "Generated collision-free grasp with confidence 0.800",
            ("Pixel value is [0.1, 0.05, 1.2]", [0.1, 0.05, 1.2]),
        ],
        ["Grasp succeeded in 4.30s: object held"],
        ["Placement succeeded in 3.10s: object released at the target."],
    ]
    for names, response in zip(expected, responses, strict=True):
        turn = _calls(_next(expert, question, history))
        assert [call["name"] for call in turn] == names
        history.append(response)
        if names[0] == "sam2.segment_from_point":  # prompted at the median of the three answers
            assert turn[0]["arguments"] == {"x": 0.41, "y": 0.5, "image_index": 0}
        if names[0] == "grasp_generator.compute_grasp":  # the tray's spot, read before the arm hides it
            assert turn[1]["arguments"] == {"data": "$point_cloud", "u": 0.61, "v": 0.45}
    last = _calls(_next(expert, question, history[:4]))
    assert last[0]["arguments"] == {"placement_point_3d": [0.1, 0.05, 1.2]}
    final = _next(expert, question, history)
    assert "<answer>I picked up the duck and placed it.</answer>" in final
    failed = _next(expert, question, [*history[:3], ["Error: Grasp failed in 4.2s: empty grasp"]])
    assert "<answer>I could not pick up the duck.</answer>" in failed
    missing = [_detected("duck")] * 3 + trays
    assert "could not find the duck" in _next(expert, question, [missing])


def test_a_place_the_arm_refuses_goes_to_the_middle_of_the_free_space() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the duck and place it in front of the white box."
    first = _calls(_next(expert, question, []))
    assert [call["arguments"]["obj_name"] for call in first][-1] == "free space in front of the white box"
    located = [*[_detected("duck", (0.4, 0.5))] * 3, *[_detected("spot", (0.5, 0.7))] * 3,
               _detected("free space", (0.52, 0.78))]  # fmt: skip
    grasped = [
        "Generated collision-free grasp with confidence 0.800",
        ("Pixel value is [0.1, 0.2, 1.0]", [0.1, 0.2, 1.0]),
        ("Pixel value is [0.11, 0.25, 1.05]", [0.11, 0.25, 1.05]),
    ]
    history: list[list[Response]] = [
        located, [_mask(), "Generated"], grasped, ["Grasp succeeded: object held"],
        ["Error: Placement not executed: the planned motion would collide with the white box"],
    ]  # fmt: skip
    second = _calls(_next(expert, question, history))
    assert second == [
        {"name": "robot.place_object_at_3d_location", "arguments": {"placement_point_3d": [0.11, 0.25, 1.05]}}
    ]
    unreadable = [grasped[0], "Error: ToolError: the value there is not a finite number", grasped[2]]
    fallback = _calls(_next(expert, question, [*history[:2], unreadable, history[3]]))
    assert fallback[0]["arguments"] == {"placement_point_2d": [0.5, 0.7]}  # no 3D point: the image point


def test_a_table_sized_mask_is_segmented_again_from_the_nearest_other_point() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the red box."
    points = [_detected("red box", p) for p in ((0.40, 0.50), (0.44, 0.50), (0.30, 0.50))]
    history: list[list[Response]] = [points, [_mask(0.69, area=150_000), "Generated"]]
    again = _calls(_next(expert, question, history))
    assert again == [
        {"name": "sam2.segment_from_point", "arguments": {"x": 0.44, "y": 0.5, "image_index": 0}}
    ]
    grasping = _calls(_next(expert, question, [*history, [_mask(0.9)]]))
    assert [call["name"] for call in grasping] == ["grasp_generator.compute_grasp"]
    small = _calls(_next(expert, question, [points, [_mask(0.69), "Generated"]]))
    assert [call["name"] for call in small] == ["grasp_generator.compute_grasp"]  # object-sized: kept


def test_grasps_are_sampled_again_only_while_turns_are_left_to_place() -> None:
    question = "Pick up the duck and place it in the tray."
    located = [*[_detected("duck", (0.4, 0.5))] * 3, *[_detected("tray", (0.6, 0.45))] * 3]
    refused = "Error: Grasp not executed: the planned motion would collide with the table"
    history: list[list[Response]] = [
        located, [_mask(), "Generated"], ["Generated collision-free grasp", "Pixel"], [refused],
    ]  # fmt: skip
    roomy = _calls(_next(RobotExpertPolicy(max_turns=10), question, history))
    assert [call["name"] for call in roomy] == ["grasp_generator.compute_grasp"]  # no 3D point read again
    # Six turns: four taken, and another attempt would leave no turn to place.
    tight = _next(RobotExpertPolicy(max_turns=6), question, history)
    assert "<answer>I could not pick up the duck.</answer>" in tight
    with pytest.raises(ValueError, match="at least 2"):
        RobotExpertPolicy(max_turns=1)


def test_a_transient_failure_is_retried_once() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the red box."
    found: list[Response] = [_detected("red box", (0.4, 0.5))] * 3
    flaky = [
        "Error: RuntimeError: SAM2 inference failed (transient error); retry the call",
        "Generated 640x480",
    ]
    retry = _calls(_next(expert, question, [found, flaky]))
    assert [call["name"] for call in retry] == ["sam2.segment_from_point"]  # only the call that failed
    following = _calls(_next(expert, question, [found, flaky, [_mask()]]))
    assert [call["name"] for call in following] == ["grasp_generator.compute_grasp"]
    still_failing = _next(expert, question, [found, flaky, [flaky[0]]])
    assert "<answer>I could not perceive the red box.</answer>" in still_failing
    # Of three pointings one answer is enough; none at all is asked once more.
    failed = "Error: RuntimeError: RoboRefer inference failed (transient error); retry the call"
    one = _calls(_next(expert, question, [[failed, failed, found[0]]]))
    assert [call["name"] for call in one] == ["sam2.segment_from_point", "robot.get_depth_with_pointcloud"]
    none = _calls(_next(expert, question, [[failed] * 3]))
    assert none == [{"name": "roborefer.detect_one", "arguments": {"obj_name": "red box", "image_index": 0}}]


def test_beside_a_pair_the_spot_must_lie_beyond_both() -> None:
    expert = RobotExpertPolicy()
    question = "Pick up the duck and place it to the left of the two red mugs."
    first = _calls(_next(expert, question, []))
    spot = "free space to the left of the leftmost red mug where the duck can be placed"
    assert [(call["name"], call["arguments"]["obj_name"]) for call in first] == [
        *[("roborefer.detect_one", "duck")] * 3,
        *[("roborefer.detect_one", spot)] * 3,
        ("roborefer.detect_one", "free space to the left of the leftmost red mug"),
        ("roborefer.detect_all", "red mug"),
    ]
    ducks = [_detected("duck", (0.7, 0.5))] * 3
    mugs = _detected("red mug", (0.5, 0.6), (0.35, 0.55))
    beyond = [*ducks, *[_detected("spot", (0.2, 0.58))] * 3, _detected("free", (0.15, 0.6)), mugs]
    following = _calls(_next(expert, question, [beyond]))
    assert [call["name"] for call in following] == [
        "sam2.segment_from_point",
        "robot.get_depth_with_pointcloud",
    ]
    grasp = _calls(_next(expert, question, [beyond, [_mask(), "Generated"]]))
    assert [call["arguments"].get("u") for call in grasp] == [None, 0.2, 0.15]  # both spots beyond the pair
    between = [*ducks, *[_detected("spot", (0.42, 0.58))] * 3, _detected("free", (0.15, 0.6)), mugs]
    refused = _next(expert, question, [between])
    assert "<answer>I found no place for the object.</answer>" in refused and "not left of both" in refused
    one_mug = [*beyond[:7], _detected("red mug", (0.5, 0.6))]
    assert "could not find two of the red mug" in _next(expert, question, [one_mug])
