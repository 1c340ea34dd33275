"""The scripted robot expert: picks and places with tools only, the stand-in teacher for robot traces.

Its chain: point at the target (and at the place goal) with `roborefer`, segment the target with
`sam2` while reading the robot's depth and point cloud, compute a grasp with `grasp_generator`,
execute it with `robot.execute_grasp` (sampling up to two more grasps when none was found or the
arm refuses one as out of reach or colliding, as a real pick pipeline falls back to its next
candidate), then place with `robot.place_object_at_2d_location` on the pointed spot. For a place beside a pair of like objects ("to the left of the two mugs") it also
points at every one of the pair and checks that the spot lies beyond both in the image before it
moves. It reads only the question and the tools' structured results (never the scene's truth). Like the other
scripted policy it is stateless: each turn it re-runs its plan over the tool results in the
conversation and writes the next step in the tag protocol; a call that failed transiently ("retry
the call") is made once more.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from spacetools.agent.policies.scripted.replay import ToolOutcome, tool_batches
from spacetools.agent.types import EpisodeState, Policy

# How a simulated tool's transient failure reads (`sim.realism`); such a call is worth one more try.
_TRANSIENT = "retry the call"
# How the robot tool reports a motion it refused before moving; the grasp sampler can offer another.
_NOT_EXECUTED = "not executed"
_GRASP_RETRIES = 2
_NEAR_RE = re.compile(r"pick up the (?P<name>.+?) (?P<which>closer to|farther from) the camera", re.I)
_ONE_OF_TWO_RE = re.compile(r"pick up the (?P<which>left|right) one of the two (?P<names>.+?)[.?!]*$", re.I)
_PLACE_RE = re.compile(
    r"pick up the (?P<item>.+?) and place it (?:(?P<tray>in the tray)|(?P<rel>to the left of|to the right of|"
    r"in front of|behind) the (?P<anchor>.+?))[.?!]*$",
    re.I,
)
_PAIR_RE = re.compile(r"two (?P<names>.+)", re.I)
_PICK_RE = re.compile(r"pick up the (?P<name>.+?)[.?!]*$", re.I)
_RELATIONS = {"to the left of": "left of", "to the right of": "right of", "in front of": "in front of",
              "behind": "behind"}  # fmt: skip

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class RobotGoal:
    """What the question asks: a referring expression for the target and, maybe, one for the spot.

    `pair` names a pair of like objects the spot must lie beyond, on the `beyond` side of the image.
    """

    target: str
    item: str
    place: str | None = None
    pair: str | None = None
    beyond: Literal["left", "right"] | None = None


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
        anchor = match["anchor"]
        if (pair := _PAIR_RE.fullmatch(anchor)) and relation in ("left of", "right of"):
            # Beyond both of the pair is beside the outer one: "the leftmost mug" for "left of".
            beyond: Literal["left", "right"] = "left" if relation == "left of" else "right"
            name = singular(pair["names"])
            place = f"free space {side} the {beyond}most {name} where the {item} can be placed"
            return RobotGoal(item, item, place, pair=name, beyond=beyond)
        return RobotGoal(item, item, f"free space {side} the {anchor} where the {item} can be placed")
    if match := _NEAR_RE.search(question):
        nearest = "nearest" if match["which"].lower() == "closer to" else "farthest"
        return RobotGoal(f"the {nearest} {match['name']}", match["name"])
    if match := _ONE_OF_TWO_RE.search(question):
        name = singular(match["names"])
        return RobotGoal(f"the {match['which'].lower()}most {name}", name)
    if match := _PICK_RE.search(question):
        return RobotGoal(match["name"], match["name"])
    return None


def _is_error(outcome: ToolOutcome) -> bool:
    return outcome.is_error


def _first_point(outcome: ToolOutcome) -> tuple[float, float] | None:
    points = outcome.get("points") or []
    return (float(points[0][0]), float(points[0][1])) if points else None


def _beyond_pair(goal: RobotGoal, spot: tuple[float, float], pair: ToolOutcome) -> str | None:
    """None when the spot lies beyond both detected objects of the pair in the image; else the answer."""
    xs = [float(point[0]) for point in pair.get("points") or []]
    if len(xs) < 2:
        return _answer(
            f"I see fewer than two of the {goal.pair}.", f"I could not find two of the {goal.pair}."
        )
    outer = min(xs) if goal.beyond == "left" else max(xs)
    if (spot[0] < outer) == (goal.beyond == "left"):
        return None
    return _answer(
        f"The spot (x {spot[0]:.3f}) is not {goal.beyond} of both of the {goal.pair} (the outer at {outer:.3f}).",
        "I found no place for the object.",
    )


def _turn(thought: str, *calls: Call) -> str:
    blocks = "\n".join(
        "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        for name, arguments in calls
    )
    return f"<think>{thought}</think>\n{blocks}"


def _answer(thought: str, text: str) -> str:
    return f"<think>{thought}</think>\n<answer>{text}</answer>"


class _Pending(Exception):
    """The plan needs the results of a tool turn that has not run yet."""

    def __init__(self, turn: str) -> None:
        super().__init__(turn)
        self.turn = turn


class _Replay:
    """Feeds a plan the results of its earlier tool turns in order; a new turn ends this `act`."""

    def __init__(self, batches: list[list[ToolOutcome]]) -> None:
        self._batches = batches
        self._next = 0

    def call(self, thought: str, *calls: Call) -> list[ToolOutcome]:
        """The results of one turn of calls, retrying once each call that failed transiently."""
        results = self._take(thought, calls)
        retry = [i for i, outcome in enumerate(results) if outcome.is_error and _TRANSIENT in outcome.text]
        if retry:
            again = self._take("A tool failed transiently; I call it again.", [calls[i] for i in retry])
            for i, outcome in zip(retry, again, strict=True):
                results[i] = outcome
        return results

    def _take(self, thought: str, calls: Sequence[Call]) -> list[ToolOutcome]:
        if self._next >= len(self._batches):
            raise _Pending(_turn(thought, *calls))
        batch = self._batches[self._next]
        self._next += 1
        missing = [ToolOutcome.failed("no response") for _ in range(len(calls) - len(batch))]
        return [*batch, *missing][: len(calls)]


def _plan(goal: RobotGoal, replay: _Replay) -> str:
    """The whole chain as straight-line code; returns the answer turn."""
    calls = [("roborefer.detect_one", {"obj_name": goal.target, "image_index": 0})]
    if goal.place is not None:
        calls.append(("roborefer.detect_one", {"obj_name": goal.place, "image_index": 0}))
    if goal.pair is not None:
        calls.append(("roborefer.detect_all", {"obj_name": goal.pair, "image_index": 0}))
    found = replay.call(f"I locate the {goal.item}" + (" and where it goes." if goal.place else "."), *calls)
    target = _first_point(found[0])
    if target is None:
        return _answer(f"The {goal.item} was not found.", f"I could not find the {goal.item}.")
    spot = _first_point(found[1]) if goal.place is not None else None
    if goal.place is not None and spot is None:
        return _answer("The pointing model found no spot to place it.", "I found no place for the object.")
    if goal.pair is not None and spot is not None:
        refusal = _beyond_pair(goal, spot, found[2])
        if refusal is not None:
            return refusal
    perceived = replay.call(
        f"I segment the {goal.item} at ({target[0]:.3f}, {target[1]:.3f}) and read the robot's depth.",
        ("sam2.segment_from_point", {"x": round(target[0], 4), "y": round(target[1], 4), "image_index": 0}),
        ("robot.get_depth_with_pointcloud", {}),
    )
    if any(_is_error(outcome) for outcome in perceived):
        return _answer("Segmentation or depth failed.", f"I could not perceive the {goal.item}.")
    arguments = {"point_cloud": "$point_cloud", "mask": "$segmentation_mask",
                 "focal_length_px": "$focal_length_px", "image_index": 0}  # fmt: skip
    for attempt in range(1 + _GRASP_RETRIES):
        thought = (
            "I compute a grasp on the segmented object."
            if attempt == 0
            else ("The arm could not carry out that grasp; I sample another one.")
        )
        (grasp,) = replay.call(thought, ("grasp_generator.compute_grasp", arguments))
        if _is_error(grasp):  # the sampler draws afresh on every call, so another try may find one
            if attempt < _GRASP_RETRIES:
                continue
            return _answer("No grasp was found.", f"I could not find a grasp for the {goal.item}.")
        (picked,) = replay.call(
            "I execute the grasp.", ("robot.execute_grasp", {"grasp_pose": "$grasp_pose"})
        )
        # Only a motion the arm refused (out of reach, a collision) left the scene as it was.
        if not (_is_error(picked) and _NOT_EXECUTED in picked.text):
            break
    if _is_error(picked):
        return _answer("The grasp failed.", f"I could not pick up the {goal.item}.")
    if spot is None:
        return _answer("The object is held.", f"I picked up the {goal.item}.")
    point = [round(spot[0], 4), round(spot[1], 4)]
    (placed,) = replay.call(
        f"I place it at ({spot[0]:.3f}, {spot[1]:.3f}).",
        ("robot.place_object_at_2d_location", {"placement_point_2d": point}),
    )
    if _is_error(placed):
        return _answer("The placement failed.", f"I picked up the {goal.item} but could not place it.")
    return _answer("The object was placed.", f"I picked up the {goal.item} and placed it.")


class RobotExpertPolicy(Policy):
    """The deterministic robot expert (policy name `robot_scripted`)."""

    name = "robot_scripted"

    async def act(self, state: EpisodeState) -> str:
        """The next step of the pick (and place) chain, from the tool results so far."""
        goal = read_goal(state.task.question)
        if goal is None:
            return _answer("I do not understand this robot task.", "I cannot do this task.")
        try:
            return _plan(goal, _Replay(tool_batches(state.tool_calls)))
        except _Pending as pending:
            return pending.turn
