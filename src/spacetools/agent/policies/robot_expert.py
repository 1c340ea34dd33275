"""The scripted robot expert: picks and places with tools only, the stand-in teacher for robot traces.

Its chain: point at the target (and at the place goal) with `roborefer`, segment the target with
`sam2` while reading the robot's depth and point cloud, compute a grasp with `grasp_generator`,
execute it with `robot.execute_grasp`, then place with `robot.place_object_at_2d_location` on the
pointed spot. It reads only the question and tool texts (never the scene's truth). Like the other
scripted policy it is stateless: each turn it re-reads the tool results in the conversation and
writes the next step in the tag protocol.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from spacetools.agent.protocol import message_text
from spacetools.agent.types import EpisodeState
from spacetools.rewards.parsing import parse_points

_TOOL_RESPONSE_RE = re.compile(r"<tool_response>\s*(.*?)\s*(?:</tool_response>|\Z)", re.DOTALL)
_NEAR_RE = re.compile(r"pick up the (?P<name>.+?) (?P<which>closer to|farther from) the camera", re.I)
_ONE_OF_TWO_RE = re.compile(r"pick up the (?P<which>left|right) one of the two (?P<names>.+?)[.?!]*$", re.I)
_PLACE_RE = re.compile(
    r"pick up the (?P<item>.+?) and place it (?:(?P<tray>in the tray)|(?P<rel>to the left of|to the right of|"
    r"in front of|behind) the (?P<anchor>.+?))[.?!]*$",
    re.I,
)
_PICK_RE = re.compile(r"pick up the (?P<name>.+?)[.?!]*$", re.I)
_RELATIONS = {"to the left of": "left of", "to the right of": "right of", "in front of": "in front of",
              "behind": "behind"}  # fmt: skip

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class RobotGoal:
    """What the question asks: a referring expression for the target and, maybe, one for the spot."""

    target: str
    item: str
    place: str | None = None


def singular(noun_phrase: str) -> str:
    """ "red boxes" -> "red box", "red mugs" -> "red mug"."""
    if re.search(r"(x|s|ch|sh)es$", noun_phrase):
        return noun_phrase[:-2]
    return noun_phrase[:-1] if noun_phrase.endswith("s") else noun_phrase


def read_goal(question: str) -> RobotGoal | None:
    """The referring expressions of a robot question, or None when it is not understood."""
    question = question.strip()
    if match := _PLACE_RE.search(question):
        item = match["item"]
        if match["tray"]:
            return RobotGoal(item, item, "tray")
        relation = _RELATIONS[match["rel"].lower()]
        side = f"to the {relation}" if relation in ("left of", "right of") else relation
        return RobotGoal(
            item, item, f"free space {side} the {match['anchor']} where the {item} can be placed"
        )
    if match := _NEAR_RE.search(question):
        nearest = "nearest" if match["which"].lower() == "closer to" else "farthest"
        return RobotGoal(f"the {nearest} {match['name']}", match["name"])
    if match := _ONE_OF_TWO_RE.search(question):
        name = singular(match["names"])
        return RobotGoal(f"the {match['which'].lower()}most {name}", name)
    if match := _PICK_RE.search(question):
        return RobotGoal(match["name"], match["name"])
    return None


def tool_texts(messages: list[dict[str, Any]]) -> list[list[str]]:
    """The tool response texts of each tool-calling assistant turn, in order."""
    batches: list[list[str]] = []
    for message in messages:
        if message.get("role") == "assistant":
            batches.append([])
        elif message.get("role") == "tool" and batches:
            text = message_text(message)
            found = _TOOL_RESPONSE_RE.search(text)
            batches[-1].append(found.group(1) if found else text.strip())
    return [batch for batch in batches if batch]


def _is_error(text: str) -> bool:
    return text.lstrip().startswith("Error")


def _first_point(text: str) -> tuple[float, float] | None:
    points = [] if _is_error(text) else parse_points(text)
    return (float(points[0][0]), float(points[0][1])) if points else None


def _turn(thought: str, *calls: Call) -> str:
    blocks = "\n".join(
        "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        for name, arguments in calls
    )
    return f"<think>{thought}</think>\n{blocks}"


def _answer(thought: str, text: str) -> str:
    return f"<think>{thought}</think>\n<answer>{text}</answer>"


class RobotExpertPolicy:
    """The deterministic robot expert (policy name `robot_scripted`)."""

    name = "robot_scripted"

    async def act(self, state: EpisodeState) -> str:
        """The next step of the pick (and place) chain, from the tool results so far."""
        goal = read_goal(state.task.question)
        if goal is None:
            return _answer("I do not understand this robot task.", "I cannot do this task.")
        done = tool_texts(state.messages)
        step = len(done)
        if step == 0:
            calls = [("roborefer.detect_one", {"obj_name": goal.target, "image_index": 0})]
            if goal.place is not None:
                calls.append(("roborefer.detect_one", {"obj_name": goal.place, "image_index": 0}))
            return _turn(f"I locate the {goal.item}" + (" and where it goes." if goal.place else "."), *calls)
        target = _first_point(done[0][0])
        if target is None:
            return _answer(f"The {goal.item} was not found.", f"I could not find the {goal.item}.")
        spot = _first_point(done[0][1]) if goal.place is not None and len(done[0]) > 1 else None
        if goal.place is not None and spot is None:
            return _answer(
                "The pointing model found no spot to place it.", "I found no place for the object."
            )
        if step == 1:
            return _turn(
                f"I segment the {goal.item} at ({target[0]:.3f}, {target[1]:.3f}) and read the robot's depth.",
                (
                    "sam2.segment_from_point",
                    {"x": round(target[0], 4), "y": round(target[1], 4), "image_index": 0},
                ),
                ("robot.get_depth_with_pointcloud", {}),
            )
        if any(_is_error(text) for text in done[1]):
            return _answer("Segmentation or depth failed.", f"I could not perceive the {goal.item}.")
        if step == 2:
            arguments = {"point_cloud": "$point_cloud", "mask": "$segmentation_mask",
                         "focal_length_px": "$focal_length_px", "image_index": 0}  # fmt: skip
            return _turn(
                "I compute a grasp on the segmented object.", ("grasp_generator.compute_grasp", arguments)
            )
        if _is_error(done[2][0]):
            return _answer("No grasp was found.", f"I could not find a grasp for the {goal.item}.")
        if step == 3:
            return _turn("I execute the grasp.", ("robot.execute_grasp", {"grasp_pose": "$grasp_pose"}))
        if _is_error(done[3][0]):
            return _answer("The grasp failed.", f"I could not pick up the {goal.item}.")
        if goal.place is None or spot is None:
            return _answer("The object is held.", f"I picked up the {goal.item}.")
        if step == 4:
            return _turn(
                f"I place it at ({spot[0]:.3f}, {spot[1]:.3f}).",
                (
                    "robot.place_object_at_2d_location",
                    {"placement_point_2d": [round(spot[0], 4), round(spot[1], 4)]},
                ),
            )
        if _is_error(done[4][0]):
            return _answer("The placement failed.", f"I picked up the {goal.item} but could not place it.")
        return _answer("The object was placed.", f"I picked up the {goal.item} and placed it.")
