"""Plans for the spatial-relation families: RoboSpatial (configuration, compatibility, vacant space)
and RefSpatial (location, placement)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from spacetools.agent.policies.scripted.measure import (
    DEPTH_WITH_CLOUD,
    FIT_BOX,
    Box3D,
    Point,
    Vector,
    detect,
    dot,
    first_point,
    index_at,
    locate,
    object_box,
    read_box,
    segment_call,
    unit,
    vector3,
)
from spacetools.agent.policies.scripted.questions import (
    COMPATIBILITY_RE,
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


# --- compatibility: measure the free space at the spot the pointer proposes -------------------------

RING_SAMPLES = 16
"""Points read around the proposed spot, on a circle the item's footprint covers at any yaw."""
RING_MARGIN_M = 0.0075
"""How far beyond the footprint's inscribed circle the ring lies (half the fit clearance)."""
ON_TABLE_M = 0.015
"""A point within this height of the table plane is bare table."""
BOX_TOLERANCE_M = 0.01


def _ray(point: Point, focal: float, width: int, height: int) -> Vector:
    """The camera-frame direction through a normalized image point (principal point at the centre)."""
    return ((point[0] - 0.5) * width / focal, (point[1] - 0.5) * height / focal, 1.0)


def _project(x: Vector, focal: float, width: int, height: int) -> Point:
    return (0.5 + focal * x[0] / (x[2] * width), 0.5 + focal * x[1] / (x[2] * height))


def _inside(box: Box3D, x: Sequence[float], tolerance: float = BOX_TOLERANCE_M) -> bool:
    """Whether a camera-frame point lies in a box (grown by `tolerance`)."""
    c = box.corners_3d
    for k in (1, 3, 4):
        axis = [c[k][i] - c[0][i] for i in range(3)]
        length = math.sqrt(dot(axis, axis)) or 1e-9
        along = dot([x[i] - c[0][i] for i in range(3)], axis) / length
        if not -tolerance <= along <= length + tolerance:
            return False
    return True


def _ring(
    spot: Point, anchor: Box3D, item: Box3D, focal: float, width: int, height: int
) -> tuple[list[Vector], list[Point | None]] | None:
    """Table points around the spot (camera frame) and where to read them in the image.

    A point whose footprint circle leaves the image has no reading (None): the space there cannot be
    seen, so it does not count as free (the visible table is where a placement must fit).
    """
    up = anchor.up
    floor = [sum(c[k] for c in anchor.corners_3d[:4]) / 4 for k in range(3)]
    ray = _ray(spot, focal, width, height)
    along = dot(ray, up)
    if abs(along) < 1e-9:
        return None
    centre = [t * dot(floor, up) / along for t in ray]
    if centre[2] <= 0:
        return None
    helper = (1.0, 0.0, 0.0) if abs(up[0]) < 0.9 else (0.0, 0.0, 1.0)
    e1 = unit([helper[i] - dot(helper, up) * up[i] for i in range(3)])
    e2 = (up[1] * e1[2] - up[2] * e1[1], up[2] * e1[0] - up[0] * e1[2], up[0] * e1[1] - up[1] * e1[0])
    inscribed = item.footprint[0] / 2
    places: list[Vector] = []
    pixels: list[Point | None] = []
    for k in range(RING_SAMPLES):
        angle = 2 * math.pi * k / RING_SAMPLES
        direction = [math.cos(angle) * e1[i] + math.sin(angle) * e2[i] for i in range(3)]
        edge = [centre[i] + inscribed * direction[i] for i in range(3)]
        place = [centre[i] + (inscribed + RING_MARGIN_M) * direction[i] for i in range(3)]
        places.append((place[0], place[1], place[2]))
        u, v = _project((edge[0], edge[1], edge[2]), focal, width, height)
        seen = edge[2] > 0 and 0.0 <= u <= 1.0 and 0.0 <= v <= 1.0
        pu, pv = _project((place[0], place[1], place[2]), focal, width, height) if place[2] > 0 else (u, v)
        pixels.append((min(max(pu, 0.0), 1.0), min(max(pv, 0.0), 1.0)) if seen else None)
    return places, pixels


def _blocked(place: Vector, seen: Vector | None, anchor: Box3D, item: Box3D) -> bool:
    """Whether the table at `place` is taken, from the 3D point the camera sees along its ray."""
    if seen is None:
        return False  # no reading: no evidence of an obstacle
    up = anchor.up
    rise = dot([seen[i] - place[i] for i in range(3)], up)
    if rise < -ON_TABLE_M:
        return True  # the ray passes the table's edge: the spot overhangs it
    if rise <= ON_TABLE_M or _inside(item, seen):
        return False  # bare table, or the item itself (it is the one being moved)
    if _inside(anchor, seen):
        return _inside(anchor, place)  # the anchor only hides the spot unless the spot is in it
    return True


def plan_compatibility(task: Task, replay: ToolReplay) -> Answer:
    """Yes/no "can the A fit <side> the B?": measure the free space at the spot the pointer proposes.

    RoboRefer proposes the best spot for the A beside the B (it always answers a point). The expert
    fits both objects' 3D boxes and reads the point cloud on a circle around the spot that the A's
    footprint would cover at any turn: the A fits when every reading there is bare table, or the
    B seen in front of the spot.
    """
    found = match(COMPATIBILITY_RE, task.question, "compatibility")
    item, anchor, rel = group(found, "a", "a2"), group(found, "b"), relation(found)
    phrase = placement_phrase(rel, anchor, item)
    (p_item, p_anchor), (proposed, depth) = locate(
        replay, [item, anchor], [detect(phrase), DEPTH_WITH_CLOUD], reserve=4
    )
    spot = first_point(proposed)
    if p_item is None or p_anchor is None or spot is None or depth.is_error:
        return Answer("No", f"I could not find the {item}, the {anchor} and a spot beside it.", True)
    item_box = object_box(replay, item, p_item, reserve=3)
    anchor_box = object_box(replay, anchor, p_anchor, reserve=1) if item_box is not None else None
    focal, width, height = depth.get("focal_length_px"), depth.get("width"), depth.get("height")
    ring = (
        _ring(spot, anchor_box, item_box, float(focal), int(width), int(height))
        if item_box and anchor_box and focal and width and height and replay.turns_left >= 1
        else None
    )
    if ring is None:
        return Answer("No", f"I could not measure the space {side_words(rel)} the {anchor}.", True)
    places, pixels = ring
    readable = [pixel for pixel in pixels if pixel is not None]
    readings = iter(
        replay.call(
            f"The {item}'s footprint is {item_box.footprint[0]:.3f} x {item_box.footprint[1]:.3f} m (from its "  # type: ignore[union-attr]
            f"box); I read the 3D points on a circle it would cover around the spot {format_point(spot)}.",
            *(index_at("point_cloud", pixel) for pixel in readable),
        )
        if readable
        else []
    )
    blocked = [
        pixel is None or _blocked(place, vector3(next(readings)), anchor_box, item_box)  # type: ignore[arg-type]
        for place, pixel in zip(places, pixels, strict=True)
    ]
    fits = not any(blocked)
    detail = (
        "all bare table"
        if fits
        else f"{sum(blocked)} of {len(blocked)} points are taken, off the table or out of sight"
    )
    return Answer(
        format_yes_no(fits),
        f"Around the spot ({detail}), the {item} {'fits' if fits else 'does not fit'} {rel} the {anchor}.",
    )


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
