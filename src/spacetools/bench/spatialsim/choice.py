"""Multiple-choice families: BLINK relative depth and CV-Bench 2D relation / 3D depth.

The correct letter alternates with the question index (A for even, B for odd) so the letters are
balanced; which object or point gets which label follows from that.
"""

from __future__ import annotations

import itertools

import numpy as np

from spacetools.bench.spatialsim import templates
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.draw import draw_labelled_boxes, draw_point_markers
from spacetools.bench.spatialsim.question import Question
from spacetools.bench.spatialsim.relations import CLOSER_MARGIN, image_relation, mask_depth
from spacetools.rewards.formats import format_choice
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.masks import inside_distance

OPPOSITE_2D = {"left": "right", "right": "left", "above": "below", "below": "above"}
#: A marked point sits at least this share of the object's deepest inside distance from its border.
MARKER_INTERIOR = 0.5


def _marker_pixel(truth: ObjectTruth, rng: np.random.Generator) -> tuple[int, int]:
    """A pixel (x, y) well inside the object's mask, so the marker clearly sits on it."""
    distance = inside_distance(truth.mask)
    ys, xs = np.nonzero(distance >= MARKER_INTERIOR * distance.max())
    k = int(rng.integers(len(xs)))
    return int(xs[k]), int(ys[k])


def blink_depth(ctx: SceneContext, rng: np.random.Generator, index: int) -> Question | None:
    """Two circled points A and B on two objects; which is closer to the camera?"""
    correct = index % 2
    objects = ctx.visible
    pairs = list(itertools.combinations(range(len(objects)), 2))
    height, width = ctx.view.depth.shape
    for k in rng.permutation(len(pairs)):
        first, second = (objects[j] for j in pairs[k])
        pixels = [_marker_pixel(first, rng), _marker_pixel(second, rng)]
        depths = [float(ctx.view.depth[y, x]) for x, y in pixels]
        if abs(depths[0] - depths[1]) < CLOSER_MARGIN:
            continue
        closer_first = depths[0] < depths[1]
        # Label so that the closer point gets the wanted letter.
        if closer_first != (correct == 0):
            pixels.reverse()
        points = [[(x + 0.5) / width, (y + 0.5) / height] for x, y in pixels]
        text = templates.with_choices(templates.pick(templates.BLINK_DEPTH, rng), ["A", "B"])
        return Question(
            text=text,
            ground_truth=format_choice(correct),
            answer=format_choice(correct),
            qa_type="relative_depth",
            image=draw_point_markers(ctx.view.rgb, points, ["A", "B"]),
            choices=["A", "B"],
            marked_points=points,
        )
    return None


def cvb_2d_relation(ctx: SceneContext, rng: np.random.Generator, index: int) -> Question | None:
    """Where is the A with respect to the B in the image? (left/right or above/below)."""
    correct = index % 2
    objects = ctx.referable()
    pairs = list(itertools.permutations(objects, 2))
    for k in rng.permutation(len(pairs)):
        a, b = pairs[k]
        relation = image_relation(a, b)
        if relation is None:
            continue
        options = [relation, OPPOSITE_2D[relation]]
        if correct == 1:
            options.reverse()
        text = templates.with_choices(
            templates.pick(templates.CVB_2D_RELATION, rng, a=a.name, b=b.name), options
        )
        return Question(
            text=text,
            ground_truth=format_choice(correct),
            answer=format_choice(correct),
            qa_type="relation_2d",
            image=ctx.view.rgb,
            choices=options,
        )
    return None


def cvb_3d_depth(ctx: SceneContext, rng: np.random.Generator, index: int) -> Question | None:
    """Which of two boxed objects is closer to the camera? The first named is boxed red, the second blue."""
    correct = index % 2
    objects = ctx.referable()
    pairs = list(itertools.combinations(objects, 2))
    for k in rng.permutation(len(pairs)):
        pair = list(pairs[k])
        depths = [mask_depth(t, ctx.view.depth) for t in pair]
        if abs(depths[0] - depths[1]) < CLOSER_MARGIN:
            continue
        if (depths[0] < depths[1]) != (correct == 0):
            pair.reverse()
        a, b = pair
        image = draw_labelled_boxes(ctx.view.rgb, [a.bbox_2d, b.bbox_2d], [(255, 0, 0), (0, 0, 255)])
        text = templates.with_choices(
            templates.pick(templates.CVB_3D_DEPTH, rng, a=a.name, b=b.name), [a.name, b.name]
        )
        return Question(
            text=text,
            ground_truth=format_choice(correct),
            answer=format_choice(correct),
            qa_type="depth_3d",
            image=image,
            choices=[a.name, b.name],
        )
    return None
