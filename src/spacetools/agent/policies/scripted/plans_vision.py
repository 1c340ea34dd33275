"""Plans for the perception families: BLINK and CV-Bench (depth, 2D relation), BOP-ASK (pose, grasp)
and 2D detection."""

from __future__ import annotations

import math
from collections.abc import Sequence

from spacetools.agent.policies.scripted.measure import (
    CROP_MASK,
    DEPTH,
    DEPTH_WITH_CLOUD,
    FIT_BOX,
    FIT_GRASP,
    Box3D,
    Point,
    depth_patch,
    index_at,
    lift_points,
    locate,
    median_or_none,
    object_box,
    points_3d,
    points_of,
    read_box,
    read_crop_box,
    read_grasp,
    scalar,
    segment,
    segment_call,
)
from spacetools.agent.policies.scripted.questions import (
    CATEGORY_RE,
    PAIR_2D_RE,
    TARGET_RE,
    QuestionNotUnderstood,
    choices_of,
    group,
    letter_of,
    match,
)
from spacetools.agent.policies.scripted.replay import Answer, ToolReplay
from spacetools.agent.types import Task
from spacetools.rewards.formats import format_boxes, format_corners, format_grasp, format_point


def plan_blink_depth(task: Task, replay: ToolReplay) -> Answer:
    """BLINK relative depth: read the depth map at the two marked points."""
    marked = task.extra_info.get("marked_points")
    if not marked or len(marked) != 2:
        raise QuestionNotUnderstood("BLINK depth questions need extra_info['marked_points'] (points A and B)")
    point_a, point_b = (float(marked[0][0]), float(marked[0][1])), (float(marked[1][0]), float(marked[1][1]))
    choices = choices_of(task)
    _, (depth,) = locate(replay, [], [DEPTH], reserve=1)
    if depth.is_error:
        return Answer(letter_of(choices, "A"), "The depth estimate failed; I guess A.", True)
    readings = replay.call(
        "I read the depth map at the two marked points.",
        index_at("depth_map", point_a),
        index_at("depth_map", point_b),
    )
    depth_a, depth_b = scalar(readings[0]), scalar(readings[1])
    if depth_a is None or depth_b is None:
        return Answer(letter_of(choices, "A"), "A depth reading failed; I guess A.", True)
    closer = "A" if depth_a <= depth_b else "B"
    return Answer(
        letter_of(choices, closer),
        f"Depth at A is {depth_a:.3f} m, at B {depth_b:.3f} m: {closer} is closer.",
    )


def plan_relation_2d(task: Task, replay: ToolReplay) -> Answer:
    """CV-Bench 2D relation: compare the two objects' image positions."""
    found = match(PAIR_2D_RE, task.question, "2D relation")
    a, b = group(found, "a", "a2"), group(found, "b", "b2")
    choices = choices_of(task)
    (pa, pb), _ = locate(replay, [a, b], reserve=0)
    if pa is None or pb is None:
        return Answer(
            letter_of(choices, ""), f"I could not find both the {a} and the {b}; I guess (A).", True
        )
    du, dv = pa[0] - pb[0], pa[1] - pb[1]
    # Each option pairs a direction with its opposite; judge along that option's axis.
    wanted = {"left": du < 0, "right": du > 0, "above": dv < 0, "below": dv > 0}
    picked = next((c for c in choices if wanted.get(c.strip().lower(), False)), None)
    if picked is None:
        picked = ("left" if du < 0 else "right") if abs(du) >= abs(dv) else ("above" if dv < 0 else "below")
    letter = letter_of(choices, picked)
    # The comparison spelled out, one step at a time, so that a student trained on the thought can
    # learn it: the coordinates, the axis the options ask about, the direction, the option's letter.
    direction = picked.strip().lower()
    axis, (ua, ub) = ("y", (pa[1], pb[1])) if direction in ("above", "below") else ("x", (pa[0], pb[0]))
    sign = "<" if ua < ub else ">" if ua > ub else "="
    where = f"{direction} of" if direction in ("left", "right") else direction
    return Answer(
        letter,
        f"The {a} is at {format_point(pa)} and the {b} at {format_point(pb)}: {axis} {ua:.3f} {sign} "
        f"{ub:.3f}, so the {a} is {where} the {b}, which is {letter}.",
    )


def plan_depth_3d(task: Task, replay: ToolReplay) -> Answer:
    """CV-Bench 3D depth: which of two named objects is closer, by the median depth around each one.

    One pixel is not enough: a point inside a mug's opening sees its far wall. The expert reads the
    depth map on a small patch around each detected point (one ``project_2d_points_to_3d`` call per
    object, both in one turn) and compares the medians: five calls in three turns, as the original.
    """
    choices = choices_of(task)
    if len(choices) != 2:
        raise QuestionNotUnderstood(f"3D depth questions need two choices, got {choices}")
    (pa, pb), (depth,) = locate(replay, choices, [DEPTH], reserve=1)
    if pa is None or pb is None or depth.is_error:
        return Answer(letter_of(choices, choices[0]), "I could not measure both objects; I guess (A).", True)
    readings = replay.call(
        "I read the depth map on a small patch around each object's point.",
        lift_points(depth_patch(pa), "$depth_map"),
        lift_points(depth_patch(pb), "$depth_map"),
    )
    depth_a, depth_b = (median_or_none([p[2] for p in points_3d(r)]) for r in readings)
    if depth_a is None or depth_b is None:
        return Answer(letter_of(choices, choices[0]), "The depth readings failed; I guess (A).", True)
    closer = choices[0] if depth_a <= depth_b else choices[1]
    return Answer(
        letter_of(choices, closer),
        f"Median depth of the {choices[0]} is {depth_a:.3f} m and of the {choices[1]} {depth_b:.3f} m: "
        f"the {closer} is closer.",
    )


def _square_around(point: Point, half: float = 0.04) -> list[Point]:
    """Eight corners of a small box around a point (a guess when no box could be fitted)."""
    x, y = point
    face = [(x - half, y + half), (x + half, y + half), (x + half, y - half), (x - half, y - half)]
    return face + [(u, v - half) for u, v in face]


def plan_pose(task: Task, replay: ToolReplay) -> Answer:
    """BOP-ASK pose: detect, segment, depth with point cloud, fit the box, copy its image corners."""
    target = group(match(TARGET_RE, task.question, "pose"), "a")
    (point,), (depth,) = locate(replay, [target], [DEPTH_WITH_CLOUD], reserve=2)
    if point is None:
        return Answer(
            format_corners(_square_around((0.5, 0.5))), f"The {target} was not found; I guess a box.", True
        )
    box = object_box(replay, target, point) if not depth.is_error else None
    if box is None:
        return Answer(
            format_corners(_square_around(point)), "The box fit failed; I answer a box at the object.", True
        )
    return Answer(
        format_corners(box.corners_2d), f"The fitted box of the {target} projects to these 8 corners."
    )


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
    (i1, j1), (i2, j2) = ((4, 7), (5, 6)) if short_first else ((4, 5), (7, 6))
    left, right = mid(i1, j1), mid(i2, j2)
    left_low, right_low = mid(i1 - 4, j1 - 4), mid(i2 - 4, j2 - 4)
    centre = ((left[0] + right[0]) / 2, (left[1] + right[1]) / 2)
    left_tip = ((left[0] + left_low[0]) / 2, (left[1] + left_low[1]) / 2)
    right_tip = ((right[0] + right_low[0]) / 2, (right[1] + right_low[1]) / 2)
    return [centre, left, right, left_tip, right_tip]


def plan_grasp(task: Task, replay: ToolReplay) -> Answer:
    """BOP-ASK grasp: the pose chain, then ``compute_grasp`` with the same variables."""
    target = group(match(TARGET_RE, task.question, "grasp"), "a")
    (point,), (depth,) = locate(replay, [target], [DEPTH_WITH_CLOUD], reserve=2)
    if point is None or depth.is_error:
        guess = point or (0.5, 0.5)
        return Answer(
            format_grasp([guess] * 5), f"I could not measure the {target}; I guess a grasp at it.", True
        )
    if segment(replay, target, point).is_error:
        return Answer(
            format_grasp([point] * 5), "Segmentation failed; I guess a grasp at the detected point.", True
        )
    grasp = read_grasp(replay.call("I generate a collision-free grasp on its masked points.", FIT_GRASP)[0])
    if grasp is not None:
        return Answer(
            format_grasp(grasp), f"The grasp generator's projected gripper points for the {target}."
        )
    # No grasp: the box, asked for only now, gives a grasp across its top (one more turn, when left).
    box = (
        read_box(replay.call("No grasp came back; I fit its 3D box.", FIT_BOX)[0])
        if replay.turns_left
        else None
    )
    if box is not None:
        return Answer(
            format_grasp(_grasp_from_box(box)),
            "No grasp was generated; I grasp the box's top across its short side.",
            True,
        )
    return Answer(
        format_grasp([point] * 5), "Neither a grasp nor a box came back; I guess a grasp at the point.", True
    )


def _box_2d(points: Sequence[Point]) -> tuple[float, float, float, float]:
    xs, ys = [min(max(p[0], 0.0), 1.0) for p in points], [min(max(p[1], 0.0), 1.0) for p in points]
    return (min(xs), min(ys), max(xs), max(ys))


def plan_detect_2d(task: Task, replay: ToolReplay) -> Answer:
    """2D detection: point at every instance, then segment each and crop its mask to read the box."""
    category = group(match(CATEGORY_RE, task.question, "detection"), "a")
    height, width = task.images[0].shape[:2]
    found = replay.call(
        f"I point at every {category} first.",
        ("roborefer.detect_all", {"obj_name": category, "image_index": 0}),
    )[0]
    points = points_of(found)
    if not points:
        return Answer("[]", f"No {category} was found.", fallback=found.is_error)
    boxes: list[tuple[float, float, float, float] | None] = []
    for point in points:
        # Two tool turns per instance: the mask variable is shared, so instances go one at a time.
        box = None
        if replay.turns_left >= 2:
            segmented = replay.call(
                f"I segment the {category} at {format_point(point)}.", segment_call(point)
            )[0]
            if not segmented.is_error:
                crop = replay.call("Its mask's bounding rectangle is its box.", CROP_MASK)[0]
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
    return Answer(
        format_boxes(answer),
        f"Boxes of the {len(points)} {category} instance(s), from their masks.",
        fallback=any(b is None for b in boxes),
    )
