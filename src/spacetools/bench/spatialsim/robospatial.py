"""RoboSpatial-style questions: configuration and compatibility (yes/no) and vacant-space pointing."""

from __future__ import annotations

import itertools

import numpy as np
import shapely
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

from spacetools.bench.spatialsim import templates
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.question import Question
from spacetools.bench.spatialsim.relations import RELATIONS, relation_holds
from spacetools.rewards.formats import format_points, format_yes_no
from spacetools.sim.freespace import compatibility, vacant_region
from spacetools.sim.observation import SIDES
from spacetools.sim.referring import interior_point

QA_TYPES = ("configuration", "compatibility", "vacant")
#: Vacant ground truth (scored by the convex hull of its points, as RoboSpatial's are; the original lists
#: have 9 to 22 points): at most this many points on the free region's outline, then this many inside it.
VACANT_OUTLINE_POINTS = 16
VACANT_INSIDE_POINTS = 4
#: The fewest pixels a free region needs to be asked about (a smaller one is too fiddly to point into).
MIN_VACANT_PIXELS = 160


def configuration(ctx: SceneContext, rng: np.random.Generator, want_yes: bool) -> Question | None:
    """ "Is the A left of the B?" for a pair whose relation is clear and whose answer is the wanted one."""
    objects = ctx.referable()
    pairs = list(itertools.permutations(objects, 2))
    for k in rng.permutation(len(pairs)):
        a, b = pairs[k]
        for relation in rng.permutation(RELATIONS):
            if relation_holds(a, b, str(relation)) is want_yes:
                text = templates.pick(templates.CONFIGURATION, rng, a=a.name, b=b.name, relation=relation)
                answer = format_yes_no(want_yes)
                return Question(
                    text=f"{text} {templates.YES_NO_INSTRUCTION}",
                    ground_truth=answer,
                    answer=answer,
                    qa_type="configuration",
                    image=ctx.view.rgb,
                )
    return None


def compatibility_question(ctx: SceneContext, rng: np.random.Generator, want_yes: bool) -> Question | None:
    """ "Can the A fit left of the B?" decided from free table space; ambiguous fits are skipped."""
    objects = ctx.referable()
    pairs = list(itertools.permutations(objects, 2))
    for k in rng.permutation(len(pairs)):
        a, b = pairs[k]
        for side in rng.permutation(SIDES):
            if compatibility(ctx, a.index, b.index, str(side)) is want_yes:
                text = templates.pick(templates.COMPATIBILITY, rng, a=a.name, b=b.name, side=side)
                answer = format_yes_no(want_yes)
                return Question(
                    text=f"{text} {templates.YES_NO_INSTRUCTION}",
                    ground_truth=answer,
                    answer=answer,
                    qa_type="compatibility",
                    image=ctx.view.rgb,
                )
    return None


def vacant_points(mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """Normalized ``(N, 2)`` points of a free region that describe it under a convex-hull scorer, and
    the region's deepest point ``(2,)`` (a reference answer; it is one of the N).

    First the region's outline: vertices of the convex hull of its mask pixels, thinned to at most
    `VACANT_OUTLINE_POINTS` while keeping the hull's shape, so that their hull covers the region but for a
    sliver along its rim. Then points inside it: its deepest point and random ones. Every point is the
    centre of a region pixel (rounding to 3 decimals keeps it in that pixel for images up to 1000 pixels
    wide). None when the region has fewer than `MIN_VACANT_PIXELS` pixels or is a line.
    """
    ys, xs = np.nonzero(mask)
    if len(xs) < MIN_VACANT_PIXELS:
        return None
    pixels = np.stack([xs + 0.5, ys + 0.5], axis=1)
    try:
        hull = ConvexHull(pixels)
    except QhullError:  # every pixel on one line
        return None
    outline = pixels[hull.vertices]  # counter-clockwise in image coordinates
    tolerance = 0.5
    while len(outline) > VACANT_OUTLINE_POINTS:
        # Douglas-Peucker keeps a subset of the vertices: every kept point is still a region pixel.
        simplified = shapely.Polygon(pixels[hull.vertices]).simplify(tolerance)
        outline = np.asarray(simplified.exterior.coords)[:-1]
        tolerance *= 1.5
    height, width = mask.shape
    deepest = np.asarray(interior_point(mask))
    # Inside points come from the region's core (pixels off its rim, so never an outline point again).
    core = ndimage.binary_erosion(mask)
    core[min(int(deepest[1] * height), height - 1), min(int(deepest[0] * width), width - 1)] = False
    core_ys, core_xs = np.nonzero(core if core.sum() >= VACANT_INSIDE_POINTS else mask)
    chosen = rng.choice(len(core_xs), size=VACANT_INSIDE_POINTS - 1, replace=False)
    inside = np.stack([core_xs[chosen] + 0.5, core_ys[chosen] + 0.5], axis=1)
    return np.concatenate([outline / [width, height], deepest[None], inside / [width, height]]), deepest


def vacant(ctx: SceneContext, rng: np.random.Generator) -> Question | None:
    """Point to free table space on one side of an object; truth is points that outline the free region."""
    objects = ctx.referable()
    for k in rng.permutation(len(objects)):
        anchor = objects[k]
        for side in rng.permutation(SIDES):
            found = vacant_points(ctx.region_mask(vacant_region(ctx, anchor.index, str(side))), rng)
            if found is None:
                continue
            points, deepest = found
            text = templates.pick(templates.VACANT, rng, b=anchor.name, side=side_phrase(str(side)))
            return Question(
                text=f"{text} {templates.POINTS_INSTRUCTION}",
                ground_truth=format_points(points),
                answer=format_points([deepest]),
                qa_type="vacant",
                image=ctx.view.rgb,
            )
    return None


def side_phrase(side: str) -> str:
    """ "to the left of" / "in front of": how a side reads after "close to and"."""
    return f"to the {side}" if side in ("left of", "right of") else side


def generate(ctx: SceneContext, rng: np.random.Generator, index: int) -> Question | None:
    """Question `index` of the family: types cycle in pairs, yes/no answers alternate within each pair."""
    qa_type = QA_TYPES[(index // 2) % len(QA_TYPES)]
    want_yes = index % 2 == 0
    if qa_type == "configuration":
        return configuration(ctx, rng, want_yes)
    if qa_type == "compatibility":
        return compatibility_question(ctx, rng, want_yes)
    return vacant(ctx, rng)
