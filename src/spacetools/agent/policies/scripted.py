"""The scripted expert: a deterministic tool chain per task family, answering from tool outputs only.

It is the baseline and the stand-in for the universal teacher. It never sees the ground truth: only
the question, the data source, ``task.extra_info`` (which the harness strips of the answer) and the
tool results in the conversation. Each turn is real protocol text (``<think>`` then ``<tool_call>``
blocks, or ``<answer>``), so its traces are valid SFT data.

The policy is stateless. A plan is plain straight-line code that asks for tool results through a
:class:`ToolReplay`; on every turn the plan is re-run from the start, the replay feeds it the results
already in the conversation, and the first batch of calls without results becomes the next turn.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spacetools.agent.protocol import message_text
from spacetools.agent.types import EpisodeState, Task
from spacetools.rewards.formats import GRASP_LABELS, parse_points

Point = tuple[float, float]
Call = tuple[str, dict[str, Any]]

_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_TOOL_RESPONSE_RE = re.compile(r"<tool_response>\s*(.*?)\s*(?:</tool_response>|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ToolOutcome:
    """One tool result as the model reads it: the response text and whether it is an error."""

    text: str

    @property
    def is_error(self) -> bool:
        """Tool failures always read ``Error: …`` (the Toolshed's convention)."""
        return self.text.lstrip().startswith("Error")

    def points(self) -> list[Point]:
        """Every ``(x, y)`` point in the text; empty for an error."""
        return [] if self.is_error else parse_points(self.text)

    def numbers(self) -> list[float]:
        """Every number in the text; empty for an error."""
        return [] if self.is_error else [float(n) for n in _NUMBER_RE.findall(self.text)]


class _Pending(Exception):
    """Raised inside a plan when it needs results that are not in the conversation yet."""

    def __init__(self, calls: list[Call], thought: str) -> None:
        super().__init__(thought)
        self.calls = calls
        self.thought = thought


@dataclass
class ToolReplay:
    """Hands a plan the results of its earlier tool turns, in order; raises for the first new one."""

    batches: list[list[ToolOutcome]]
    max_tool_turns: int = 7
    _next: int = field(default=0, init=False)

    @property
    def turns_left(self) -> int:
        """Tool turns still allowed before the plan must answer."""
        return self.max_tool_turns - self._next

    def call(self, thought: str, *calls: Call) -> list[ToolOutcome]:
        """The results of ``calls`` (one turn, run in parallel), or end this turn by asking for them."""
        if self._next >= len(self.batches):
            raise _Pending(list(calls), thought)
        results = self.batches[self._next]
        self._next += 1
        # A call the rollout rejected without a response still counts as a failed call here.
        missing = [ToolOutcome("Error: no response") for _ in range(len(calls) - len(results))]
        return results[: len(calls)] + missing


@dataclass(frozen=True)
class Answer:
    """A plan's final answer and the reasoning shown before it."""

    text: str
    thought: str


Plan = Callable[[Task, ToolReplay], Answer]


def tool_batches(messages: Sequence[dict[str, Any]]) -> list[list[ToolOutcome]]:
    """The tool results of each assistant turn, in order (the tool messages that follow each turn)."""
    batches: list[list[ToolOutcome]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            batches.append([])
        elif role == "tool" and batches:
            text = message_text(message)
            match = _TOOL_RESPONSE_RE.search(text)
            batches[-1].append(ToolOutcome(match.group(1) if match else text.strip()))
    # The last assistant turn may have been an answer with no tool responses; only count tool turns.
    return [batch for batch in batches if batch]


def format_tool_turn(thought: str, calls: Sequence[Call]) -> str:
    """A tool-calling turn in the tag protocol."""
    blocks = "\n".join(
        "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        for name, arguments in calls
    )
    return f"<think>{thought}</think>\n{blocks}"


def format_answer_turn(answer: Answer) -> str:
    """A final turn in the tag protocol."""
    return f"<think>{answer.thought}</think>\n<answer>{answer.text}</answer>"


# --- small helpers shared by the plans -------------------------------------------------------------


def fmt_point(point: Sequence[float]) -> str:
    """A normalized point as the benchmarks write it: ``(0.381, 0.428)``."""
    return f"({point[0]:.3f}, {point[1]:.3f})"


def fmt_points(points: Sequence[Sequence[float]]) -> str:
    """``[(x1, y1), (x2, y2), …]``."""
    return "[" + ", ".join(fmt_point(p) for p in points) + "]"


def fmt_grasp(points: Sequence[Sequence[float]]) -> str:
    """The five labelled grasp points of the BOP-ASK answer format."""
    return ", ".join(
        f"{label}: [{p[0]:.3f}, {p[1]:.3f}]" for label, p in zip(GRASP_LABELS, points, strict=False)
    )


def point_args(point: Point, image_index: int = 0) -> dict[str, Any]:
    """``x``, ``y`` and ``image_index`` arguments for a point-taking tool."""
    return {"x": round(point[0], 4), "y": round(point[1], 4), "image_index": image_index}


def index_at(variable: str, point: Point) -> Call:
    """``vision_ops.index_at`` on a stored array at a normalized point."""
    return ("vision_ops.index_at", {"data": f"${variable}", "u": round(point[0], 4), "v": round(point[1], 4)})


def detect(name: str, tool: str = "roborefer") -> Call:
    """``<tool>.detect_one`` of a referring expression on the user's image."""
    return (f"{tool}.detect_one", {"obj_name": name, "image_index": 0})


def first_point(outcome: ToolOutcome) -> Point | None:
    """The first point a pointing result reports, if any."""
    points = outcome.points()
    return points[0] if points else None


def vector3(outcome: ToolOutcome) -> tuple[float, float, float] | None:
    """The last three numbers of an ``index_at`` result: the 3D point it read, if finite."""
    numbers = outcome.numbers()
    if len(numbers) < 3 or not all(math.isfinite(n) for n in numbers[-3:]):
        return None
    x, y, z = numbers[-3:]
    return (x, y, z)


def scalar(outcome: ToolOutcome) -> float | None:
    """The last number of an ``index_at`` result on a scalar map (depth in metres), if finite."""
    numbers = outcome.numbers()
    return numbers[-1] if numbers and math.isfinite(numbers[-1]) else None


# --- reading tool results ----------------------------------------------------------------------------

_BOX_3D_RE = re.compile(r"Corners in 3D:\s*(.*)")
_BOX_2D_RE = re.compile(r"Corners in normalized image coordinates:\s*(.*)")
_GRASP_POINTS_RE = re.compile(r"Projected 2D gripper points:\s*(.*)", re.DOTALL)


@dataclass(frozen=True)
class Box3D:
    """An oriented box as ``compute_bbox`` reports it: 8 camera-frame corners and their image points."""

    corners_3d: list[tuple[float, float, float]]
    corners_2d: list[Point]

    @property
    def centre(self) -> tuple[float, float, float]:
        """Mean of the 8 corners (camera frame, metres)."""
        x, y, z = (sum(c[k] for c in self.corners_3d) / 8 for k in range(3))
        return (x, y, z)

    @property
    def up(self) -> tuple[float, float, float]:
        """The box's up direction: corner ``i + 4`` is above corner ``i`` (BOP order)."""
        bottom, top = self.corners_3d[:4], self.corners_3d[4:]
        d = [sum(t[k] - b[k] for t, b in zip(top, bottom, strict=True)) for k in range(3)]
        norm = math.sqrt(sum(v * v for v in d)) or 1.0
        return (d[0] / norm, d[1] / norm, d[2] / norm)


def read_box(outcome: ToolOutcome) -> Box3D | None:
    """The box in a ``bounding_box.compute_bbox`` result (None for an error or an unreadable text)."""
    if outcome.is_error:
        return None
    match_3d, match_2d = _BOX_3D_RE.search(outcome.text), _BOX_2D_RE.search(outcome.text)
    if match_3d is None or match_2d is None:
        return None
    numbers_3d = [float(n) for n in _NUMBER_RE.findall(match_3d.group(1))]
    corners_2d = parse_points(match_2d.group(1))
    if len(numbers_3d) != 24 or len(corners_2d) != 8:
        return None
    corners_3d = [(numbers_3d[k], numbers_3d[k + 1], numbers_3d[k + 2]) for k in range(0, 24, 3)]
    return Box3D(corners_3d, corners_2d)


def read_grasp(outcome: ToolOutcome) -> list[Point] | None:
    """The five projected gripper points of a ``compute_grasp`` result, if it succeeded."""
    match = None if outcome.is_error else _GRASP_POINTS_RE.search(outcome.text)
    points = parse_points(match.group(1)) if match else []
    return points[:5] if len(points) >= 5 else None


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """Scalar product of two 3-vectors."""
    return sum(x * y for x, y in zip(a, b, strict=True))


# --- question parsing (the wordings of RoboSpatial, RefSpatial, CV-Bench, BLINK, BOP-ASK) --------------

_RELATION = r"(?:to the )?(?P<rel>left of|right of|in front of|behind|above|below|on top of|under)"
_CONFIGURATION_RE = re.compile(rf"\bis the (?P<a>.+?) {_RELATION} the (?P<b>.+?)\?", re.IGNORECASE)
_COMPATIBILITY_RE = re.compile(
    rf"(?:\b(?:can|could) the (?P<a>.+?) (?:fit|be placed|be put)|enough room for the (?P<a2>.+?))"
    rf" {_RELATION} the (?P<b>.+?)(?: on the table)?\?",
    re.IGNORECASE,
)
_SIDE_OF_RE = re.compile(
    rf"{_RELATION} the (?P<b>[^.?,]+?)(?: where| suitable| to put| on the table|[.?,])", re.I
)
_LOCATION_RE = re.compile(
    rf"(?:point out|locate|where is) the (?P<a>.+?) (?:that is )?{_RELATION} the (?P<b>.+?)(?: in the image)?[.?]",
    re.IGNORECASE,
)
_PAIR_2D_RE = re.compile(
    r"(?:where is the (?P<a>.+?) located with respect to the (?P<b>.+?)"
    r"|position of the (?P<a2>.+?) relative to the (?P<b2>.+?))(?: in the image)?\?",
    re.IGNORECASE,
)
_TARGET_RE = re.compile(
    r"(?:bounding box of the|box that tightly encloses the|grasp for picking up the|grasp the|grasp of the)"
    r" (?P<a>.+?)(?: in the image| with a parallel gripper)?[.?]",
    re.IGNORECASE,
)
_CATEGORY_RE = re.compile(
    r"(?:detect every|instances of|boxes of all) (?P<a>.+?)(?: objects)?(?: in the image| and)", re.IGNORECASE
)
_POINTING_QUESTION_RE = re.compile(r"\b(?:pinpoint|point to|point out|vacant|free spot|empty space)\b", re.I)
_CHOICE_LINE_RE = re.compile(r"^\s*\((?P<letter>[A-Z])\)\s*(?P<text>.+?)\s*$", re.MULTILINE)


class QuestionNotUnderstood(ValueError):
    """The question does not match any wording the scripted expert knows."""


def _match(pattern: re.Pattern[str], question: str, family: str) -> re.Match[str]:
    match = pattern.search(question)
    if match is None:
        raise QuestionNotUnderstood(f"scripted policy cannot read this {family} question: {question[:120]!r}")
    return match


def _group(match: re.Match[str], *names: str) -> str:
    return next(match.group(n) for n in names if n in match.groupdict() and match.group(n)).strip()


def _relation(match: re.Match[str]) -> str:
    """Canonical relation: ``left of``, ``right of``, ``in front of``, ``behind``, ``above``, ``below``."""
    rel = match.group("rel").lower()
    return {"on top of": "above", "under": "below"}.get(rel, rel)


def choices_of(task: Task) -> list[str]:
    """The option texts, from ``extra_info["choices"]`` or else the ``(A) …`` lines of the question."""
    choices = task.extra_info.get("choices")
    if choices:
        return [str(c) for c in choices]
    return [m.group("text") for m in _CHOICE_LINE_RE.finditer(task.question)]


def letter_of(choices: Sequence[str], wanted: str) -> str:
    """``(X)`` for the choice whose text is ``wanted`` (case-insensitive; first when none matches)."""
    for k, text in enumerate(choices):
        if text.strip().strip(".").lower() == wanted.lower():
            return f"({chr(ord('A') + k)})"
    return "(A)"


# --- the plans ---------------------------------------------------------------------------------------

DEPTH_WITH_CLOUD: Call = ("depth_estimator.estimate_depth_with_pointcloud", {"image_index": 0})
DEPTH: Call = ("depth_estimator.estimate_depth", {"image_index": 0})
FIT_BOX: Call = (
    "bounding_box.compute_bbox",
    {"point_cloud": "$point_cloud", "mask": "$segmentation_mask", "focal_length_px": "$focal_length_px"},
)
FIT_GRASP: Call = (
    "grasp_generator.compute_grasp",
    {
        "point_cloud": "$point_cloud",
        "mask": "$segmentation_mask",
        "focal_length_px": "$focal_length_px",
        "image_index": 0,
    },
)


def locate(
    replay: ToolReplay, names: Sequence[str], extra: Sequence[Call] = (), *, reserve: int = 1
) -> tuple[list[Point | None], list[ToolOutcome]]:
    """Point at each name with roborefer (plus ``extra`` calls in the same turn).

    As long as ``reserve`` tool turns stay free for what follows, one more turn asks the second
    pointing model for every name roborefer failed on or found nothing for, and repeats the failed
    ``extra`` calls. (The second model rather than roborefer again: the Toolshed seeds a call's
    randomness from its name and arguments, so a simulated failure repeats with the same call.)
    """
    listed = " and ".join(f"the {n}" for n in names)
    thought = f"I need to find {listed} in the image" + (" and measure the scene's depth." if extra else ".")
    results = replay.call(thought, *(detect(n) for n in names), *extra)
    points = [first_point(r) for r in results[: len(names)]]
    extras = results[len(names) :]
    missed = [k for k, p in enumerate(points) if p is None]
    failed = [k for k, r in enumerate(extras) if r.is_error]
    if (missed or failed) and replay.turns_left > reserve:
        again = replay.call(
            "Some calls failed or found nothing; I will ask again (the second pointing model for misses).",
            *(detect(names[k], "vlm") for k in missed),
            *(extra[k] for k in failed),
        )
        for k, outcome in zip(missed, again[: len(missed)], strict=True):
            points[k] = first_point(outcome)
        for k, outcome in zip(failed, again[len(missed) :], strict=True):
            extras[k] = outcome
    return points, extras


def segment(replay: ToolReplay, name: str, point: Point, *, reserve: int = 1) -> ToolOutcome:
    """Segment the object at ``point``; a failed call is repeated once while ``reserve`` turns stay free."""
    call = ("sam2.segment_from_point", point_args(point))
    segmented = replay.call(f"The {name} is at {fmt_point(point)}; I will segment it.", call)[0]
    if segmented.is_error and replay.turns_left > reserve:
        segmented = replay.call("Segmentation failed; I ask again.", call)[0]
    return segmented


def object_box(replay: ToolReplay, name: str, point: Point) -> Box3D | None:
    """Segment the object at ``point`` and fit its 3D box (needs ``$point_cloud`` already stored)."""
    if segment(replay, name, point).is_error:
        return None
    thought = f"Now I fit the {name}'s oriented 3D box to its masked points."
    return read_box(replay.call(thought, FIT_BOX)[0])


def _height(
    box: Box3D | None, point_3d: tuple[float, float, float] | None, up: Sequence[float]
) -> float | None:
    if box is not None:
        return dot(box.centre, up)
    return dot(point_3d, up) if point_3d is not None else None


def plan_configuration(task: Task, replay: ToolReplay) -> Answer:
    """Yes/no "is the A <relation> the B?": compare the two objects' 3D box centres."""
    match = _match(_CONFIGURATION_RE, task.question, "configuration")
    a, b, relation = _group(match, "a"), _group(match, "b"), _relation(match)
    (pa, pb), (depth,) = locate(replay, [a, b], [DEPTH_WITH_CLOUD], reserve=3)
    if pa is None or pb is None or depth.is_error:
        return Answer("No", f"I could not locate both the {a} and the {b} reliably, so I cannot confirm it.")
    probes = replay.call(
        f"I read the 3D points under both detections and segment the {a}.",
        ("sam2.segment_from_point", point_args(pa)),
        index_at("point_cloud", pa),
        index_at("point_cloud", pb),
    )
    point_a, point_b = vector3(probes[1]), vector3(probes[2])
    box_a = read_box(replay.call(f"I fit the {a}'s 3D box.", FIT_BOX)[0]) if not probes[0].is_error else None
    box_b = object_box(replay, b, pb) if replay.turns_left >= 2 else None
    centre_a = box_a.centre if box_a else point_a
    centre_b = box_b.centre if box_b else point_b
    if centre_a is None or centre_b is None:
        return Answer("No", "The depth readings failed, so I cannot confirm the relation.")
    up = (box_a or box_b).up if (box_a or box_b) else (0.0, -1.0, 0.0)
    if relation in ("left of", "right of"):
        gap = centre_b[0] - centre_a[0]
        holds = gap > 0 if relation == "left of" else gap < 0
        detail = f"camera x: {a} {centre_a[0]:.3f} m, {b} {centre_b[0]:.3f} m"
    elif relation in ("in front of", "behind"):
        gap = centre_b[2] - centre_a[2]
        holds = gap > 0 if relation == "in front of" else gap < 0
        detail = f"depth: {a} {centre_a[2]:.3f} m, {b} {centre_b[2]:.3f} m"
    else:
        height_a, height_b = _height(box_a, point_a, up), _height(box_b, point_b, up)
        assert height_a is not None and height_b is not None  # centres exist, so heights do
        holds = height_a > height_b if relation == "above" else height_a < height_b
        detail = f"height along the table normal: {a} {height_a:.3f}, {b} {height_b:.3f}"
    verdict = "Yes" if holds else "No"
    return Answer(
        verdict,
        f"From the 3D measurements ({detail}), the {a} is {'' if holds else 'not '}{relation} the {b}.",
    )


def _side_words(relation: str) -> str:
    """A side as a phrase reads it: ``to the left of``, ``behind``."""
    return f"to the {relation}" if relation in ("left of", "right of") else relation


def placement_phrase(relation: str, anchor: str, item: str) -> str:
    """The pointing request for a spot beside ``anchor`` where ``item`` fits."""
    return f"free space {_side_words(relation)} the {anchor} where the {item} can be placed"


def plan_compatibility(task: Task, replay: ToolReplay) -> Answer:
    """Yes/no "can the A fit <side> the B?": ask the spatial pointer where the A can be placed there.

    RoboRefer answers a placement request with a point only when the A fits, so a point means Yes and
    an empty detection means No. A failed call is asked once more; the second pointing model is never
    asked, since it ignores relations and would point at an object whatever the free space.
    """
    match = _match(_COMPATIBILITY_RE, task.question, "compatibility")
    item, anchor, relation = _group(match, "a", "a2"), _group(match, "b"), _relation(match)
    phrase = placement_phrase(relation, anchor, item)
    (outcome,) = replay.call(
        f"I ask where the {item} could be placed {relation} the {anchor}.", detect(phrase)
    )
    if outcome.is_error and replay.turns_left > 0:
        (outcome,) = replay.call("The pointing call failed; I ask again.", detect(phrase))
    if outcome.is_error:
        return Answer(
            "No", f"The pointing model could not tell me where the {item} would fit, so I cannot confirm it."
        )
    point = first_point(outcome)
    if point is None:
        return Answer("No", f"There is no free space {relation} the {anchor} where the {item} fits.")
    return Answer("Yes", f"The {item} can be placed {relation} the {anchor}, at {fmt_point(point)}.")


def _nudge(point: Point, relation: str, step: float = 0.08) -> Point:
    """A point moved in the image towards a side (a last-resort guess when pointing failed)."""
    du, dv = {
        "left of": (-step, 0.0),
        "right of": (step, 0.0),
        "in front of": (0.0, step),
        "behind": (0.0, -step),
    }.get(relation, (0.0, 0.0))
    return (min(max(point[0] + du, 0.0), 1.0), min(max(point[1] + dv, 0.0), 1.0))


def _free_space_phrase(relation: str, anchor: str) -> str:
    """The pointing request for vacant space on one side of ``anchor``."""
    return f"vacant space {_side_words(relation)} the {anchor}"


def plan_free_space_point(task: Task, replay: ToolReplay) -> Answer:
    """Vacant space / placement pointing: ask the pointing model for free space on that side."""
    match = _match(_SIDE_OF_RE, task.question, "free-space pointing")
    anchor, relation = match.group("b").strip(), _relation(match)
    phrase = _free_space_phrase(relation, anchor)
    (point,), _ = locate(replay, [phrase], reserve=1)
    if point is not None:
        return Answer(fmt_points([point]), f"The pointing model found {phrase} at {fmt_point(point)}.")
    (anchor_point,), _ = locate(replay, [anchor], reserve=0) if replay.turns_left > 0 else ([None], [])
    guess = _nudge(anchor_point or (0.5, 0.5), relation)
    return Answer(
        fmt_points([guess]), f"No free space was reported; I guess a point {relation} the {anchor}."
    )


def plan_location(task: Task, replay: ToolReplay) -> Answer:
    """RefSpatial location: point at the object the spatial phrase picks out."""
    match = _match(_LOCATION_RE, task.question, "location")
    expression = f"{match.group('a').strip()} {match.group('rel').lower()} the {match.group('b').strip()}"
    (point,), _ = locate(replay, [expression], reserve=0)
    if point is None:
        return Answer(
            "[(0.500, 0.500)]", f"Neither pointing model found the {expression}; I answer the centre."
        )
    return Answer(fmt_points([point]), f"The {expression} is at {fmt_point(point)}.")


def plan_blink_depth(task: Task, replay: ToolReplay) -> Answer:
    """BLINK relative depth: read the depth map at the two marked points."""
    marked = task.extra_info.get("marked_points")
    if not marked or len(marked) != 2:
        raise QuestionNotUnderstood("BLINK depth questions need extra_info['marked_points'] (points A and B)")
    point_a, point_b = (float(marked[0][0]), float(marked[0][1])), (float(marked[1][0]), float(marked[1][1]))
    choices = choices_of(task)
    _, (depth,) = locate(replay, [], [DEPTH], reserve=1)
    if depth.is_error:
        return Answer(letter_of(choices, "A"), "The depth estimate failed; I guess A.")
    readings = replay.call(
        "I read the depth map at the two marked points.",
        index_at("depth_map", point_a),
        index_at("depth_map", point_b),
    )
    depth_a, depth_b = scalar(readings[0]), scalar(readings[1])
    if depth_a is None or depth_b is None:
        return Answer(letter_of(choices, "A"), "A depth reading failed; I guess A.")
    closer = "A" if depth_a <= depth_b else "B"
    return Answer(
        letter_of(choices, closer),
        f"Depth at A is {depth_a:.3f} m, at B {depth_b:.3f} m: {closer} is closer.",
    )


def plan_relation_2d(task: Task, replay: ToolReplay) -> Answer:
    """CV-Bench 2D relation: compare the two objects' image positions."""
    match = _match(_PAIR_2D_RE, task.question, "2D relation")
    a, b = _group(match, "a", "a2"), _group(match, "b", "b2")
    choices = choices_of(task)
    (pa, pb), _ = locate(replay, [a, b], reserve=0)
    if pa is None or pb is None:
        return Answer("(A)", f"I could not find both the {a} and the {b}; I guess (A).")
    du, dv = pa[0] - pb[0], pa[1] - pb[1]
    # Each option pairs a direction with its opposite; judge along that option's axis.
    wanted = {"left": du < 0, "right": du > 0, "above": dv < 0, "below": dv > 0}
    picked = next((c for c in choices if wanted.get(c.strip().lower(), False)), None)
    if picked is None:
        picked = ("left" if du < 0 else "right") if abs(du) >= abs(dv) else ("above" if dv < 0 else "below")
    return Answer(
        letter_of(choices, picked), f"The {a} is at {fmt_point(pa)} and the {b} at {fmt_point(pb)}."
    )


def plan_depth_3d(task: Task, replay: ToolReplay) -> Answer:
    """CV-Bench 3D depth: which of the two named objects is closer, from the depth at each."""
    choices = choices_of(task)
    if len(choices) != 2:
        raise QuestionNotUnderstood(f"3D depth questions need two choices, got {choices}")
    (pa, pb), (depth,) = locate(replay, choices, [DEPTH], reserve=1)
    if pa is None or pb is None or depth.is_error:
        return Answer("(A)", "I could not measure both objects; I guess (A).")
    readings = replay.call(
        "I read the depth at both objects.", index_at("depth_map", pa), index_at("depth_map", pb)
    )
    depth_a, depth_b = scalar(readings[0]), scalar(readings[1])
    if depth_a is None or depth_b is None:
        return Answer("(A)", "A depth reading failed; I guess (A).")
    closer = choices[0] if depth_a <= depth_b else choices[1]
    return Answer(
        letter_of(choices, closer),
        f"The {choices[0]} is at {depth_a:.3f} m and the {choices[1]} at {depth_b:.3f} m: the {closer} is closer.",
    )


def _square_around(point: Point, half: float = 0.04) -> list[Point]:
    """Eight corners of a small box around a point (a guess when no box could be fitted)."""
    x, y = point
    face = [(x - half, y + half), (x + half, y + half), (x + half, y - half), (x - half, y - half)]
    return face + [(u, v - half) for u, v in face]


def plan_pose(task: Task, replay: ToolReplay) -> Answer:
    """BOP-ASK pose: detect, segment, depth with point cloud, fit the box, copy its image corners."""
    target = _group(_match(_TARGET_RE, task.question, "pose"), "a")
    (point,), (depth,) = locate(replay, [target], [DEPTH_WITH_CLOUD], reserve=2)
    if point is None:
        return Answer(fmt_points(_square_around((0.5, 0.5))), f"The {target} was not found; I guess a box.")
    box = object_box(replay, target, point) if not depth.is_error else None
    if box is None:
        return Answer(
            fmt_points(_square_around(point)), "The box fit failed; I answer a small box at the object."
        )
    return Answer(fmt_points(box.corners_2d), f"The fitted box of the {target} projects to these 8 corners.")


def _grasp_from_box(box: Box3D) -> list[Point]:
    """A top-down grasp across the top face's shorter side, from the box's image corners.

    The finger bases sit at the mid-points of the top face's two long edges, the tips half-way down
    towards the bottom face; the centre is the top face's centre.
    """
    c = box.corners_2d

    def mid(i: int, j: int) -> Point:
        return ((c[i][0] + c[j][0]) / 2, (c[i][1] + c[j][1]) / 2)

    short_first = math.dist(box.corners_3d[4], box.corners_3d[5]) < math.dist(
        box.corners_3d[5], box.corners_3d[6]
    )
    # Long edges of the top face (and the bottom edges below them).
    (i1, j1), (i2, j2) = ((4, 7), (5, 6)) if short_first else ((4, 5), (7, 6))
    left, right = mid(i1, j1), mid(i2, j2)
    left_low, right_low = mid(i1 - 4, j1 - 4), mid(i2 - 4, j2 - 4)
    centre = ((left[0] + right[0]) / 2, (left[1] + right[1]) / 2)
    left_tip = ((left[0] + left_low[0]) / 2, (left[1] + left_low[1]) / 2)
    right_tip = ((right[0] + right_low[0]) / 2, (right[1] + right_low[1]) / 2)
    return [centre, left, right, left_tip, right_tip]


def plan_grasp(task: Task, replay: ToolReplay) -> Answer:
    """BOP-ASK grasp: the pose chain, then ``compute_grasp`` with the same variables."""
    target = _group(_match(_TARGET_RE, task.question, "grasp"), "a")
    (point,), (depth,) = locate(replay, [target], [DEPTH_WITH_CLOUD], reserve=2)
    if point is None or depth.is_error:
        guess = point or (0.5, 0.5)
        return Answer(fmt_grasp([guess] * 5), f"I could not measure the {target}; I guess a grasp at it.")
    if segment(replay, target, point).is_error:
        return Answer(fmt_grasp([point] * 5), "Segmentation failed; I guess a grasp at the detected point.")
    fitted = replay.call("I fit its 3D box and generate a collision-free grasp.", FIT_BOX, FIT_GRASP)
    grasp = read_grasp(fitted[1])
    if grasp is not None:
        return Answer(fmt_grasp(grasp), f"The grasp generator's projected gripper points for the {target}.")
    box = read_box(fitted[0])
    if box is not None:
        return Answer(
            fmt_grasp(_grasp_from_box(box)),
            "No grasp was generated; I grasp the box's top across its short side.",
        )
    return Answer(
        fmt_grasp([point] * 5), "Neither a grasp nor a box came back; I guess a grasp at the point."
    )


def _box_2d(points: Sequence[Point]) -> tuple[float, float, float, float]:
    xs, ys = [min(max(p[0], 0.0), 1.0) for p in points], [min(max(p[1], 0.0), 1.0) for p in points]
    return (min(xs), min(ys), max(xs), max(ys))


def fmt_boxes(boxes: Sequence[Sequence[float]]) -> str:
    """``[[x1, y1, x2, y2], …]``."""
    return "[" + ", ".join("[" + ", ".join(f"{v:.3f}" for v in box) + "]" for box in boxes) + "]"


_CROP_RE = re.compile(
    rf"from \(({_NUMBER_RE.pattern}), ({_NUMBER_RE.pattern})\) to \(({_NUMBER_RE.pattern}), ({_NUMBER_RE.pattern})\)"
)


def read_crop_box(outcome: ToolOutcome, width: int, height: int) -> tuple[float, float, float, float] | None:
    """The normalized box of a ``vision_ops.mask_crop`` result (its pixel corners over the image size)."""
    match = None if outcome.is_error else _CROP_RE.search(outcome.text)
    if match is None:
        return None
    x0, y0, x1, y1 = (float(v) for v in match.groups())
    return (x0 / width, y0 / height, x1 / width, y1 / height)


def plan_detect_2d(task: Task, replay: ToolReplay) -> Answer:
    """2D detection: point at every instance, then segment each and crop its mask to read the box."""
    category = _group(_match(_CATEGORY_RE, task.question, "detection"), "a")
    height, width = task.images[0].shape[:2]
    found = replay.call(
        f"I point at every {category} first.",
        ("roborefer.detect_all", {"obj_name": category, "image_index": 0}),
    )[0]
    points = found.points()
    if not points:
        return Answer("[]", f"No {category} was found.")
    boxes: list[tuple[float, float, float, float] | None] = []
    for point in points:
        # Two tool turns per instance: the mask variable is shared, so instances go one at a time.
        box = None
        if replay.turns_left >= 2:
            segmented = replay.call(
                f"I segment the {category} at {fmt_point(point)}.",
                ("sam2.segment_from_point", point_args(point)),
            )[0]
            if not segmented.is_error:
                crop = replay.call(
                    "Its mask's bounding rectangle is its box.",
                    ("vision_ops.mask_crop", {"image_index": 0, "mask": "$segmentation_mask"}),
                )[0]
                box = read_crop_box(crop, width, height)
        boxes.append(box)
    sizes = [(b[2] - b[0], b[3] - b[1]) for b in boxes if b is not None] or [(0.1, 0.1)]
    box_w, box_h = (sum(s[k] for s in sizes) / len(sizes) for k in (0, 1))
    answer = [
        b
        if b is not None
        else _box_2d([(p[0] - box_w / 2, p[1] - box_h / 2), (p[0] + box_w / 2, p[1] + box_h / 2)])
        for b, p in zip(boxes, points, strict=True)
    ]
    return Answer(fmt_boxes(answer), f"Boxes of the {len(points)} {category} instance(s), from their masks.")


#: The plan for each SpatialSim family and each paper benchmark key.
PLANS: dict[str, Plan] = {
    "configuration": plan_configuration,
    "compatibility": plan_compatibility,
    "vacant": plan_free_space_point,
    "reflocation": plan_location,
    "refplacement": plan_free_space_point,
    "refunseen": plan_location,
    "blinkdepth": plan_blink_depth,
    "cvb2drelation": plan_relation_2d,
    "cvb3ddepth": plan_depth_3d,
    "boppose": plan_pose,
    "bopgrasp": plan_grasp,
    "detect2d": plan_detect_2d,
}


def choose_plan(task: Task) -> Plan:
    """The plan for a task, from its data source and, for RoboSpatial, the question type."""
    family = task.data_source.removeprefix("spatialsim_")
    if family == "robospatial":
        qa_type = str(task.extra_info.get("qa_type") or task.extra_info.get("category") or "")
        if qa_type in ("configuration", "compatibility", "vacant"):
            return PLANS[qa_type]
        if _POINTING_QUESTION_RE.search(task.question):
            return plan_free_space_point
        return plan_compatibility if _COMPATIBILITY_RE.search(task.question) else plan_configuration
    if family == "refspatial":
        qa_type = str(task.extra_info.get("qa_type") or "")
        return plan_free_space_point if "placement" in qa_type else plan_location
    try:
        return PLANS[family]
    except KeyError:
        raise QuestionNotUnderstood(
            f"the scripted policy has no plan for data source {task.data_source!r}"
        ) from None


class ScriptedPolicy:
    """The deterministic expert: one tool chain per task family, answers from tool outputs only."""

    name = "scripted"

    def __init__(self, max_turns: int = 8) -> None:
        if max_turns < 2:
            raise ValueError(f"max_turns must be at least 2 (one tool turn and the answer), got {max_turns}")
        self.max_turns = max_turns

    async def act(self, state: EpisodeState) -> str:
        """Re-run the task's plan over the results so far; emit its next tool turn or its answer."""
        plan = choose_plan(state.task)
        replay = ToolReplay(tool_batches(state.messages), max_tool_turns=self.max_turns - 1)
        try:
            answer = plan(state.task, replay)
        except _Pending as pending:
            return format_tool_turn(pending.thought, pending.calls)
        return format_answer_turn(answer)
