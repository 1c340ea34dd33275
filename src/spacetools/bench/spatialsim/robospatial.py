"""RoboSpatial-style questions: configuration and compatibility (yes/no) and vacant-space pointing."""

from __future__ import annotations

import itertools

import numpy as np

from spacetools.bench.spatialsim import templates
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.question import Question, format_points
from spacetools.bench.spatialsim.relations import RELATIONS, relation_holds
from spacetools.sim.freespace import compatibility, vacant_region
from spacetools.sim.observation import SIDES

QA_TYPES = ("configuration", "compatibility", "vacant")
#: Vacant ground truth: how many free-region points to list, and the fewest that make a question.
VACANT_POINTS = 12
MIN_VACANT_POINTS = 8


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def configuration(ctx: SceneContext, rng: np.random.Generator, want_yes: bool) -> Question | None:
    """ "Is the A left of the B?" for a pair whose relation is clear and whose answer is the wanted one."""
    objects = ctx.referable()
    pairs = list(itertools.permutations(objects, 2))
    for k in rng.permutation(len(pairs)):
        a, b = pairs[k]
        for relation in rng.permutation(RELATIONS):
            if relation_holds(a, b, str(relation)) is want_yes:
                text = templates.pick(templates.CONFIGURATION, rng, a=a.name, b=b.name, relation=relation)
                answer = _yes_no(want_yes)
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
                answer = _yes_no(want_yes)
                return Question(
                    text=f"{text} {templates.YES_NO_INSTRUCTION}",
                    ground_truth=answer,
                    answer=answer,
                    qa_type="compatibility",
                    image=ctx.view.rgb,
                )
    return None


def vacant(ctx: SceneContext, rng: np.random.Generator) -> Question | None:
    """Point to free table space on one side of an object; truth is a list of free-region points."""
    objects = ctx.referable()
    for k in rng.permutation(len(objects)):
        anchor = objects[k]
        for side in rng.permutation(SIDES):
            mask = ctx.region_mask(vacant_region(ctx, anchor.index, str(side)))
            ys, xs = np.nonzero(mask)
            if len(xs) < MIN_VACANT_POINTS * 20:  # too small a patch to point into reliably
                continue
            chosen = rng.choice(len(xs), size=VACANT_POINTS, replace=False)
            height, width = mask.shape
            points = np.stack([(xs[chosen] + 0.5) / width, (ys[chosen] + 0.5) / height], axis=1)
            text = templates.pick(templates.VACANT, rng, b=anchor.name, side=side_phrase(str(side)))
            return Question(
                text=f"{text} {templates.POINTS_INSTRUCTION}",
                ground_truth=format_points(points),
                answer=format_points(points[:1]),
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
