"""RefSpatial-style pointing: an object named by a spatial phrase, or free space to place one (mask truth)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from spacetools.bench.spatialsim import templates
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.question import Question
from spacetools.bench.spatialsim.relations import relation_holds
from spacetools.bench.spatialsim.robospatial import side_phrase
from spacetools.kit.imagecodec import to_data_url
from spacetools.rewards.formats import format_points
from spacetools.sim.freespace import compatibility, vacant_region
from spacetools.sim.observation import SIDES
from spacetools.sim.referring import interior_point

#: The smallest free-space mask (pixels) worth asking about.
MIN_PLACEMENT_PIXELS = 400


def _mask_question(text: str, mask: np.ndarray, qa_type: str, ctx: SceneContext) -> Question:
    return Question(
        text=f"{text} {templates.REF_POINTS_INSTRUCTION}",
        ground_truth=to_data_url(mask),
        answer=format_points([interior_point(mask)]),
        qa_type=qa_type,
        image=ctx.view.rgb,
    )


def duplicated_names(ctx: SceneContext) -> set[str]:
    """Names that two or more objects of the scene share."""
    counts = Counter(truth.name for truth in ctx.truths)
    return {name for name, count in counts.items() if count > 1}


def location(ctx: SceneContext, rng: np.random.Generator, index: int = 0) -> Question | None:
    """ "the mug left of the red box": the phrase picks out exactly one object; truth is its mask.

    In a scene where two objects share a name, the target is one of them, called by that name, so the
    relation alone tells the twins apart (None when no twin is visible enough to ask about).
    """
    twins = duplicated_names(ctx)
    targets = [t for t in ctx.visible if t.name in twins] if twins else ctx.visible
    # Prefer the bare category so that the spatial phrase is what disambiguates; twins keep their name.
    labels = ("name",) if twins else ("category", "name")
    anchors = ctx.referable()
    pairs = [(t, b) for t, b in itertools.product(targets, anchors) if t.index != b.index]
    for k in rng.permutation(len(pairs)):
        target, anchor = pairs[k]
        for label in labels:
            words = getattr(target, label)
            rivals = [
                t
                for t in ctx.truths
                if getattr(t, label) == words and t.index not in (target.index, anchor.index)
            ]
            for relation in rng.permutation(SIDES):
                if relation_holds(target, anchor, str(relation)) is not True:
                    continue
                if all(relation_holds(r, anchor, str(relation)) is False for r in rivals):
                    text = templates.pick(templates.LOCATION, rng, a=words, b=anchor.name, relation=relation)
                    return _mask_question(text, target.mask, "location", ctx)
    return None


def placement(ctx: SceneContext, rng: np.random.Generator, index: int = 0) -> Question | None:
    """Free table space on one side of an object where another one fits; truth is the free region's mask.

    Only sides where the item clearly fits are asked about (`freespace.compatibility` is True), so the
    question "where the A could be placed" always has an answer.
    """
    objects = ctx.referable()
    pairs = list(itertools.permutations(objects, 2))
    for k in rng.permutation(len(pairs)):
        item, anchor = pairs[k]
        for side in rng.permutation(SIDES):
            if compatibility(ctx, item.index, anchor.index, str(side)) is not True:
                continue
            mask = ctx.region_mask(vacant_region(ctx, anchor.index, str(side)))
            if int(mask.sum()) < MIN_PLACEMENT_PIXELS:
                continue
            text = templates.pick(
                templates.PLACEMENT, rng, a=item.name, b=anchor.name, side=side_phrase(str(side))
            )
            return _mask_question(text, mask, "placement", ctx)
    return None
