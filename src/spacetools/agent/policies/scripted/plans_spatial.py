"""Plans for the spatial-relation families: RoboSpatial (configuration, compatibility, vacant space)
and RefSpatial (location, placement)."""

from __future__ import annotations

from collections.abc import Sequence

from spacetools.agent.policies.scripted.measure import (
    DEPTH_WITH_CLOUD,
    FIT_BOX,
    Box3D,
    Point,
    Vector,
    dot,
    index_at,
    locate,
    object_box,
    read_box,
    segment_call,
    vector3,
)
from spacetools.agent.policies.scripted.questions import (
    CONFIGURATION_RE,
    LOCATION_RE,
    SIDE_OF_RE,
    group,
    match,
    relation,
    side_words,
)
from spacetools.agent.policies.scripted.replay import Answer, ToolReplay
from spacetools.agent.types import Task
from spacetools.rewards.formats import format_point, format_points, format_yes_no


def _height(box: Box3D | None, point_3d: Vector | None, up: Sequence[float]) -> float | None:
    if box is not None:
        return dot(box.centre, up)
    return dot(point_3d, up) if point_3d is not None else None


def plan_configuration(task: Task, replay: ToolReplay) -> Answer:
    """Yes/no "is the A <relation> the B?": compare the two objects' 3D box centres."""
    found = match(CONFIGURATION_RE, task.question, "configuration")
    a, b, rel = group(found, "a"), group(found, "b"), relation(found)
    (pa, pb), (depth,) = locate(replay, [a, b], [DEPTH_WITH_CLOUD], reserve=3)
    if pa is None or pb is None or depth.is_error:
        return Answer("No", f"I could not locate both the {a} and the {b}, so I cannot confirm it.", True)
    probes = replay.call(
        f"I read the 3D points under both detections and segment the {a}.",
        segment_call(pa),
        index_at("point_cloud", pa),
        index_at("point_cloud", pb),
    )
    point_a, point_b = vector3(probes[1]), vector3(probes[2])
    box_a = read_box(replay.call(f"I fit the {a}'s 3D box.", FIT_BOX)[0]) if not probes[0].is_error else None
    box_b = object_box(replay, b, pb, reserve=0) if replay.turns_left >= 2 else None
    centre_a = box_a.centre if box_a else point_a
    centre_b = box_b.centre if box_b else point_b
    if centre_a is None or centre_b is None:
        return Answer("No", "The depth readings failed, so I cannot confirm the relation.", True)
    up = (box_a or box_b).up if (box_a or box_b) else (0.0, -1.0, 0.0)  # type: ignore[union-attr]
    if rel in ("left of", "right of"):
        gap = centre_b[0] - centre_a[0]
        holds = gap > 0 if rel == "left of" else gap < 0
        detail = f"camera x: {a} {centre_a[0]:.3f} m, {b} {centre_b[0]:.3f} m"
    elif rel in ("in front of", "behind"):
        gap = centre_b[2] - centre_a[2]
        holds = gap > 0 if rel == "in front of" else gap < 0
        detail = f"depth: {a} {centre_a[2]:.3f} m, {b} {centre_b[2]:.3f} m"
    else:
        height_a, height_b = _height(box_a, point_a, up), _height(box_b, point_b, up)
        assert height_a is not None and height_b is not None  # centres exist, so heights do
        holds = height_a > height_b if rel == "above" else height_a < height_b
        detail = f"height along the table normal: {a} {height_a:.3f}, {b} {height_b:.3f}"
    return Answer(
        format_yes_no(holds),
        f"From the 3D measurements ({detail}), the {a} is {'' if holds else 'not '}{rel} the {b}.",
        fallback=box_a is None or (box_b is None and point_b is None),
    )


def placement_phrase(rel: str, anchor: str, item: str) -> str:
    """The pointing request for a spot beside ``anchor`` where ``item`` fits."""
    return f"free space {side_words(rel)} the {anchor} where the {item} can be placed"


# --- pointing at places and objects -------------------------------------------------------------------


def _nudge(point: Point, rel: str, step: float = 0.08) -> Point:
    """A point moved in the image towards a side (a last-resort guess when pointing failed)."""
    du, dv = {
        "left of": (-step, 0.0),
        "right of": (step, 0.0),
        "in front of": (0.0, step),
        "behind": (0.0, -step),
    }.get(rel, (0.0, 0.0))
    return (min(max(point[0] + du, 0.0), 1.0), min(max(point[1] + dv, 0.0), 1.0))


def plan_free_space_point(task: Task, replay: ToolReplay) -> Answer:
    """Vacant space / placement pointing: ask the pointing model for free space on that side."""
    found = match(SIDE_OF_RE, task.question, "free-space pointing")
    anchor, rel = found.group("b").strip(), relation(found)
    phrase = f"vacant space {side_words(rel)} the {anchor}"
    (point,), _ = locate(replay, [phrase], reserve=1)
    if point is not None:
        return Answer(format_points([point]), f"The pointing model found {phrase} at {format_point(point)}.")
    (anchor_point,), _ = locate(replay, [anchor], reserve=0) if replay.turns_left > 0 else ([None], [])
    guess = _nudge(anchor_point or (0.5, 0.5), rel)
    return Answer(
        format_points([guess]), f"No free space was reported; I guess a point {rel} the {anchor}.", True
    )


def plan_location(task: Task, replay: ToolReplay) -> Answer:
    """RefSpatial location: point at the object the spatial phrase picks out."""
    found = match(LOCATION_RE, task.question, "location")
    expression = f"{found.group('a').strip()} {found.group('rel').lower()} the {found.group('b').strip()}"
    (point,), _ = locate(replay, [expression], reserve=0)
    if point is None:
        return Answer(format_points([(0.5, 0.5)]), f"Neither pointing model found the {expression}.", True)
    return Answer(format_points([point]), f"The {expression} is at {format_point(point)}.")
