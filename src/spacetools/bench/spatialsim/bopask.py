"""BOP-ASK-style pose (8 projected box corners) and grasp (five gripper points), and 2D box detection."""

from __future__ import annotations

import numpy as np

from spacetools.bench.spatialsim import templates
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.question import Question
from spacetools.rewards.formats import format_boxes, format_corners, format_grasp


def _inside_image(points: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(points)) and np.all((points >= 0.0) & (points <= 1.0)))


def pose(ctx: SceneContext, rng: np.random.Generator, index: int = 0) -> Question | None:
    """The 8 corners of an object's 3D box in the image, in BOP order."""
    objects = ctx.referable()
    for k in rng.permutation(len(objects)):
        target = objects[k]
        corners = np.asarray(target.obb_corners_2d)
        if not _inside_image(corners):
            continue
        text = templates.pick(templates.POSE, rng, a=target.name)
        truth = format_corners(corners)
        return Question(
            text=f"{text} {templates.CORNERS_INSTRUCTION}",
            ground_truth=truth,
            answer=truth,
            qa_type="pose",
            image=ctx.view.rgb,
        )
    return None


def grasp(ctx: SceneContext, rng: np.random.Generator, index: int = 0) -> Question | None:
    """The five labelled gripper points of a collision-free grasp of an object."""
    objects = ctx.referable()
    for k in rng.permutation(len(objects)):
        target = objects[k]
        if target.grasp_points_2d is None:  # no collision-free grasp for this object
            continue
        points = np.asarray(target.grasp_points_2d)
        if not _inside_image(points):
            continue
        text = templates.pick(templates.GRASP, rng, a=target.name)
        truth = format_grasp(points)
        return Question(
            text=f"{text} {templates.GRASP_INSTRUCTION}",
            ground_truth=truth,
            answer=truth,
            qa_type="grasp",
            image=ctx.view.rgb,
        )
    return None


def detect(ctx: SceneContext, rng: np.random.Generator, index: int = 0) -> Question | None:
    """2D boxes of every instance of a category; categories with a poorly visible instance are skipped."""
    visible = {t.index for t in ctx.visible}
    categories = sorted({t.category for t in ctx.truths})
    for k in rng.permutation(len(categories)):
        instances = [t for t in ctx.truths if t.category == categories[k]]
        if any(t.index not in visible for t in instances):
            continue
        text = templates.pick(templates.DETECT, rng, a=categories[k])
        truth = format_boxes(t.bbox_2d for t in instances)
        return Question(
            text=f"{text} {templates.BOXES_INSTRUCTION}",
            ground_truth=truth,
            answer=truth,
            qa_type="detection",
            image=ctx.view.rgb,
        )
    return None
