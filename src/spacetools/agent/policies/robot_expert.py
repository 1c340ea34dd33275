"""The scripted robot expert: picks and places with tools only, the stand-in teacher for robot traces.

Its chain, as a careful operator runs a real arm:

1. Point at the target (and at the place goal) with `roborefer`, three times each, and take the median
   of the answers: one jittered or wrong answer does not move it. For a place beside an object it also
   asks for the middle of the free space on that side, a second spot in case the arm cannot reach the
   first. For a place beside a pair of like objects ("to the left of the two mugs") it points at every
   one of the pair and checks that the spot lies beyond both in the image before it moves.
2. Segment the target with `sam2` while reading the robot's depth and point cloud; a mask as large
   as the table (the prompt slipped off the object) is segmented again from another pointed point.
3. Compute a grasp with `grasp_generator` and execute it with `robot.execute_grasp`, sampling another
   when none was found or the arm refuses one (out of reach, colliding), as long as turns are left for
   the rest of the chain.
4. Place at the spot's 3D point read from the point cloud taken before the grasp: once the arm holds
   the object, it and the object hide the spot from the camera, so a ray cast into the depth then would
   meet the arm. When the arm refuses that spot, it places at the second one.

It reads only the question and the tools' structured results (never the scene's truth). Like the other
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

import numpy as np

from spacetools.agent.policies.scripted.replay import ToolOutcome, tool_batches
from spacetools.agent.types import EpisodeState, Policy

# How a simulated tool's transient failure reads (`sim.realism`); such a call is worth one more try.
_TRANSIENT = "retry the call"
# How the robot tool reports a motion it refused before moving; the scene is as it was.
_NOT_EXECUTED = "not executed"
POINTINGS = 3
"""How many times the pointing model is asked for the target and for the spot; the median is used."""
MAX_MASK_SHARE = 0.1
"""A mask over this share of the image is the table: segmented again, at most `SEGMENT_RETRIES` times."""
SEGMENT_RETRIES = 2
DEFAULT_MAX_TURNS = 10
"""Assistant turns per episode, as `robot eval --max-turns` defaults: retries stop in time to finish."""
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
Point = tuple[float, float]


@dataclass(frozen=True)
class RobotGoal:
    """What the question asks: a referring expression for the target and, maybe, one for the spot.

    `free_space` names the free space on the asked side of the anchor with no object in mind (its
    middle is the second spot). `pair` names a pair of like objects the spot must lie beyond, on the
    `beyond` side of the image.
    """

    target: str
    item: str
    place: str | None = None
    free_space: str | None = None
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
            space = f"free space {side} the {beyond}most {name}"
            return RobotGoal(
                item, item, f"{space} where the {item} can be placed", space, pair=name, beyond=beyond
            )
        space = f"free space {side} the {anchor}"
        return RobotGoal(item, item, f"{space} where the {item} can be placed", space)
    if match := _NEAR_RE.search(question):
        nearest = "nearest" if match["which"].lower() == "closer to" else "farthest"
        return RobotGoal(f"the {nearest} {match['name']}", match["name"])
    if match := _ONE_OF_TWO_RE.search(question):
        name = singular(match["names"])
        return RobotGoal(f"the {match['which'].lower()}most {name}", name)
    if match := _PICK_RE.search(question):
        return RobotGoal(match["name"], match["name"])
    return None


def _first_point(outcome: ToolOutcome) -> Point | None:
    points = outcome.get("points") or []
    return (float(points[0][0]), float(points[0][1])) if points else None


def median_point(outcomes: Sequence[ToolOutcome]) -> Point | None:
    """The per-coordinate median of the first points of the answers (None when none has a point).

    Of three answers two agreeing ones bound it in each coordinate, whatever the third says.
    """
    points = [point for outcome in outcomes if (point := _first_point(outcome)) is not None]
    if not points:
        return None
    x, y = np.median(np.asarray(points), axis=0)
    return float(x), float(y)


def _beyond_pair(goal: RobotGoal, spot: Point, pair: Sequence[ToolOutcome]) -> str | None:
    """None when the spot lies beyond both detected objects of the pair in the image; else the answer."""
    xs = [float(point[0]) for outcome in pair[:1] for point in outcome.get("points") or []]
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


def _point_3d(outcome: ToolOutcome) -> list[float] | None:
    """A camera-frame point read with `vision_ops.index_at` from the point cloud, or None."""
    value = outcome.value
    if outcome.is_error or not isinstance(value, list) or len(value) != 3:
        return None
    return [round(float(c), 4) for c in value]


def _refused(outcome: ToolOutcome) -> bool:
    """Whether the arm refused a motion before moving (out of reach, a collision): the scene is unchanged."""
    return outcome.is_error and _NOT_EXECUTED in outcome.text


def _turn(thought: str, *calls: Call) -> str:
    blocks = "\n".join(
        "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        for name, arguments in calls
    )
    return f"<think>{thought}</think>\n{blocks}"


def _answer(thought: str, text: str) -> str:
    return f"<think>{thought}</think>\n<answer>{text}</answer>"


class _Pending(Exception):
    """The plan needs the results of a tool turn that has not run yet (or must answer now)."""

    def __init__(self, turn: str) -> None:
        super().__init__(turn)
        self.turn = turn


class _Replay:
    """Feeds a plan the results of its earlier tool turns in order; a new turn ends this `act`.

    At most `max_tool_turns` tool turns: past them the plan answers that it ran out of turns.
    """

    def __init__(self, batches: list[list[ToolOutcome]], max_tool_turns: int) -> None:
        self._batches = batches
        self._next = 0
        self._max_tool_turns = max_tool_turns

    @property
    def turns_left(self) -> int:
        """Tool turns still allowed."""
        return self._max_tool_turns - self._next

    def call(self, thought: str, *calls: Call) -> list[ToolOutcome]:
        """The results of one turn of calls, retrying once each call that failed transiently."""
        results = self._take(thought, calls)
        retry = [i for i, outcome in enumerate(results) if outcome.is_error and _TRANSIENT in outcome.text]
        if retry:
            again = self._take("A tool failed transiently; I call it again.", [calls[i] for i in retry])
            for i, outcome in zip(retry, again, strict=True):
                results[i] = outcome
        return results

    def ask(self, thought: str, groups: dict[str, list[Call]]) -> dict[str, list[ToolOutcome]]:
        """One turn of groups of calls, each group asking the same thing: its successful answers by
        group. A group without any (each call failed) is asked once more."""
        names = [name for name, calls in groups.items() for _ in calls]
        results = self._take(thought, [call for calls in groups.values() for call in calls])
        answers: dict[str, list[ToolOutcome]] = {name: [] for name in groups}
        for name, outcome in zip(names, results, strict=True):
            if not outcome.is_error:
                answers[name].append(outcome)
        again = [name for name in groups if not answers[name]]
        if again:
            retried = self._take("A tool failed; I call it again.", [groups[name][0] for name in again])
            for name, outcome in zip(again, retried, strict=True):
                answers[name] += [] if outcome.is_error else [outcome]
        return answers

    def _take(self, thought: str, calls: Sequence[Call]) -> list[ToolOutcome]:
        if self._next >= len(self._batches):
            if self.turns_left <= 0:
                raise _Pending(_answer("No turns are left for another tool call.", "I ran out of turns."))
            raise _Pending(_turn(thought, *calls))
        batch = self._batches[self._next]
        self._next += 1
        missing = [ToolOutcome.failed("no response") for _ in range(len(calls) - len(batch))]
        return [*batch, *missing][: len(calls)]


@dataclass(frozen=True)
class _Located:
    """What pointing found: prompts on the target (the median first) and the spots to place at."""

    prompts: list[Point]
    spots: list[Point]


def _locate(goal: RobotGoal, replay: _Replay) -> _Located | str:
    """Point at the target, the spot, the free space beside the anchor and the pair; or the answer."""

    def detect(name: str, how: str = "detect_one") -> Call:
        return (f"roborefer.{how}", {"obj_name": name, "image_index": 0})

    groups = {"target": [detect(goal.target)] * POINTINGS}
    if goal.place is not None:
        groups["spot"] = [detect(goal.place)] * POINTINGS
    if goal.free_space is not None:
        groups["free space"] = [detect(goal.free_space)]
    if goal.pair is not None:
        groups["pair"] = [detect(goal.pair, "detect_all")]
    where = f" and, {POINTINGS} times, where it goes" if goal.place else ""
    found = replay.ask(f"I point at the {goal.item} {POINTINGS} times{where}; I use the medians.", groups)
    target = median_point(found["target"])
    if target is None:
        return _answer(f"The {goal.item} was not found.", f"I could not find the {goal.item}.")
    prompts = [target, *(p for outcome in found["target"] if (p := _first_point(outcome)) is not None)]
    if goal.place is None:
        return _Located(prompts, [])
    spot = median_point(found["spot"])
    if spot is None:
        return _answer("The pointing model found no spot to place it.", "I found no place for the object.")
    second = median_point(found.get("free space", []))
    if goal.pair is not None:
        refusal = _beyond_pair(goal, spot, found["pair"])
        if refusal is not None:
            return refusal
        if second is not None and _beyond_pair(goal, second, found["pair"]) is not None:
            second = None
    return _Located(prompts, [spot] if second is None else [spot, second])


def _perceive(goal: RobotGoal, replay: _Replay, prompts: list[Point]) -> str | None:
    """Segment the target and read the depth; None when both worked, else the answer.

    A mask larger than `MAX_MASK_SHARE` of the image is the table, not a graspable object: the prompt
    slipped off the object, so it is segmented again from the other pointed points, the nearest first.
    """

    def segment(point: Point) -> Call:
        return (
            "sam2.segment_from_point",
            {"x": round(point[0], 4), "y": round(point[1], 4), "image_index": 0},
        )

    x, y = prompts[0]
    mask, depth = replay.call(
        f"I segment the {goal.item} at ({x:.3f}, {y:.3f}) and read the robot's depth.",
        segment(prompts[0]),
        ("robot.get_depth_with_pointcloud", {}),
    )
    if mask.is_error or depth.is_error:
        return _answer("Segmentation or depth failed.", f"I could not perceive the {goal.item}.")
    others = sorted(prompts[1:], key=lambda p: float(np.hypot(p[0] - x, p[1] - y)))
    for prompt in [p for p in others if p != prompts[0]][:SEGMENT_RETRIES]:
        if not _too_large(mask):
            break
        (mask,) = replay.call(
            "That mask covers the table, not the object; I segment again from another pointed point.",
            segment(prompt),
        )
        if mask.is_error:  # the earlier mask is still the one stored
            break
    return None


def _too_large(mask: ToolOutcome) -> bool:
    """Whether a segmentation covers more of the image than an object on the table can."""
    area, shape = mask.get("area"), mask.get("shape")
    return area is not None and shape is not None and area > MAX_MASK_SHARE * shape[0] * shape[1]


def _pick(replay: _Replay, spots: list[Point]) -> tuple[ToolOutcome | None, list[ToolOutcome]]:
    """Grasp the segmented object, sampling again while the arm refuses and turns are left.

    Returns the last grasp's outcome (None: no grasp was found) and, read in the first grasp turn while
    the view is clear, the spots' 3D points from the point cloud.
    """
    compute = ("grasp_generator.compute_grasp", {"point_cloud": "$point_cloud", "mask": "$segmentation_mask",
               "focal_length_px": "$focal_length_px", "image_index": 0})  # fmt: skip
    reads = [("vision_ops.index_at", {"data": "$point_cloud", "u": round(u, 4), "v": round(v, 4)})
             for u, v in spots]  # fmt: skip
    # A further attempt needs a turn to compute, one to execute and one to place.
    needed = 2 + (1 if spots else 0)
    picked: ToolOutcome | None = None
    spots_3d: list[ToolOutcome] = []
    thought = "I compute a grasp on the segmented object" + (
        " and read the spots' 3D points while the arm does not hide them." if spots else "."
    )
    while True:
        grasp, *read = replay.call(thought, compute, *reads)
        spots_3d = spots_3d or read
        reads = []
        if grasp.is_error:  # the sampler draws afresh on every call, so another try may find one
            picked = None
            thought = "No grasp was found; I sample again."
        else:
            (picked,) = replay.call(
                "I execute the grasp.", ("robot.execute_grasp", {"grasp_pose": "$grasp_pose"})
            )
            if not _refused(picked):
                return picked, spots_3d
            thought = "The arm could not carry out that grasp; I sample another one."
        if replay.turns_left < needed:
            return picked, spots_3d


def _place(goal: RobotGoal, replay: _Replay, spots: list[Point], spots_3d: list[ToolOutcome]) -> str:
    """Place at the first spot (its 3D point when read), at the next when the arm refuses; the answer."""
    for index, spot in enumerate(spots):
        point = _point_3d(spots_3d[index]) if index < len(spots_3d) else None
        if point is not None:
            call: Call = ("robot.place_object_at_3d_location", {"placement_point_3d": point})
        else:
            call = ("robot.place_object_at_2d_location", {"placement_point_2d": [round(c, 4) for c in spot]})
        which = "the spot" if index == 0 else "the middle of the free space there instead"
        (placed,) = replay.call(f"I place it at {which}, ({spot[0]:.3f}, {spot[1]:.3f}) in the image.", call)
        if not (_refused(placed) and index + 1 < len(spots) and replay.turns_left > 0):
            break
    if placed.is_error:
        return _answer("The placement failed.", f"I picked up the {goal.item} but could not place it.")
    return _answer("The object was placed.", f"I picked up the {goal.item} and placed it.")


def _plan(goal: RobotGoal, replay: _Replay) -> str:
    """The whole chain as straight-line code; returns the answer turn."""
    located = _locate(goal, replay)
    if isinstance(located, str):
        return located
    refusal = _perceive(goal, replay, located.prompts)
    if refusal is not None:
        return refusal
    picked, spots_3d = _pick(replay, located.spots)
    if picked is None:
        return _answer("No grasp was found.", f"I could not find a grasp for the {goal.item}.")
    if picked.is_error:
        return _answer("The grasp failed.", f"I could not pick up the {goal.item}.")
    if not located.spots:
        return _answer("The object is held.", f"I picked up the {goal.item}.")
    return _place(goal, replay, located.spots, spots_3d)


class RobotExpertPolicy(Policy):
    """The deterministic robot expert (policy name `robot_scripted`).

    `max_turns` is the episode's turn limit: the expert retries only while turns are left to finish.
    """

    name = "robot_scripted"

    def __init__(self, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        if max_turns < 2:
            raise ValueError(f"max_turns must be at least 2 (one tool turn and the answer), got {max_turns}")
        self.max_turns = max_turns

    async def act(self, state: EpisodeState) -> str:
        """The next step of the pick (and place) chain, from the tool results so far."""
        goal = read_goal(state.task.question)
        if goal is None:
            return _answer("I do not understand this robot task.", "I cannot do this task.")
        try:
            return _plan(goal, _Replay(tool_batches(state.tool_calls), self.max_turns - 1))
        except _Pending as pending:
            return pending.turn
