"""Placement requests to the pointing tools: "free space left of the B where the A can be placed".

RoboRefer answers the projected centre of a spot where the A fits (the shared `sim.freespace` fit
search that also decides SpatialSim's compatibility answers) and, when it does not fit, still the
best spot it found: a real pointing model always answers a point, never "it does not fit".
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tests.tools.conftest import MakeContext, RenderedScene

from spacetools.kit.definition import ToolResult, invoke_tool_method
from spacetools.sim.freespace import best_placement, compatibility, placement
from spacetools.sim.observation import SIDES, Observation
from spacetools.sim.referring import matching_objects, parse_descriptor, parse_expression
from spacetools.sim.scene import SceneSpec
from spacetools.tools.pointing import RoboReferTool, VLMPointingTool
from spacetools.tools.simworld import render_observation

PLACEMENT_PHRASES = (
    "free space {side} the {b} where the {a} can be placed",
    "vacant space {side} the {b} for the {a}",
    "a spot {side} the {b} to place the {a}",
    "space {side} the {b} that fits the {a}",
)


def side_words(side: str) -> str:
    return f"to the {side}" if side in ("left of", "right of") else side


def detect(tool: object, ctx: object, obj_name: str, method: str = "detect_one") -> ToolResult:
    name = f"{tool.name}.{method}"  # type: ignore[attr-defined]
    return invoke_tool_method(tool, name, {"obj_name": obj_name, "image_index": 0}, ctx)  # type: ignore[arg-type]


def observe(rendered: RenderedScene) -> Observation:
    height, width = rendered.view.depth.shape
    return render_observation(SceneSpec.model_validate_json(rendered.spec_json), width, height)


@pytest.mark.parametrize("phrase", PLACEMENT_PHRASES)
def test_placement_phrases_parse_into_anchor_side_and_item(phrase: str) -> None:
    expression = parse_expression(phrase.format(side="to the left of", b="red mug", a="small blue box"))
    assert expression.free_space and expression.relation == "left of"
    assert expression.anchor == parse_descriptor("red mug")
    assert expression.item == parse_descriptor("small blue box")


def test_plain_vacant_space_names_no_item() -> None:
    for text in ("vacant space in front of the red mug", "free space behind the box for placing"):
        expression = parse_expression(text)
        assert expression.free_space and expression.item is None
        assert expression.anchor is not None and expression.anchor.words[-1] in ("mug", "box")


@pytest.mark.slow
def test_roborefer_points_where_the_item_fits_and_at_the_best_spot_otherwise(
    scenes, make_ctx: MakeContext
) -> None:
    """On every decided case one point comes back: the placement's centre, or the least-blocked spot."""
    tool = RoboReferTool()
    decided = {True: 0, False: 0}
    for rendered in scenes:
        obs = observe(rendered)
        ctx = make_ctx(rendered)
        names = [t for t in rendered.referable() if len(matching_objects(obs, parse_descriptor(t.name))) == 1]
        for k, ((item, anchor), side) in enumerate(
            itertools.product(itertools.permutations(names, 2), SIDES)
        ):
            expected = compatibility(obs, item.index, anchor.index, side)
            if expected is None:
                continue
            phrase = PLACEMENT_PHRASES[k % len(PLACEMENT_PHRASES)]
            request = phrase.format(side=side_words(side), b=anchor.name, a=item.name)
            result = detect(tool, ctx, request)
            decided[expected] += 1
            points = np.asarray(result.value["points"])
            assert result.text.startswith(f"Detected 1 instance(s) of '{request}': [(")
            centre = placement(obs, item.index, anchor.index, side)
            if not expected:
                assert centre is None
                centre = best_placement(obs, item.index, anchor.index, side)
            assert centre is not None
            np.testing.assert_allclose(points[0], obs.project(centre), atol=1e-12)
    assert decided[True] >= 10 and decided[False] >= 10, decided


def test_realistic_placements_are_jittered_reproducibly(scene, make_ctx: MakeContext) -> None:
    obs = observe(scene)
    tool = RoboReferTool()
    fitting = next(
        (item, anchor, side)
        for (item, anchor), side in itertools.product(itertools.permutations(scene.referable(), 2), SIDES)
        if compatibility(obs, item.index, anchor.index, side) is True
    )
    item, anchor, side = fitting
    request = f"free space {side_words(side)} the {anchor.name} where the {item.name} can be placed"
    exact = detect(tool, make_ctx(scene), request).value["points"]
    realistic = RoboReferTool(profile="realistic")
    first = detect(realistic, make_ctx(scene, 3), request)
    again = detect(realistic, make_ctx(scene, 3), request)
    assert first.text == again.text and not first.is_error  # seed 3 draws no transient failure
    jittered, truth = np.asarray(first.value["points"]), np.asarray(exact)
    assert 0 < np.linalg.norm(jittered - truth) < 0.1


def test_the_generic_vlm_ignores_placements(scene, make_ctx: MakeContext) -> None:
    anchor, item = scene.referable()[:2]
    request = f"free space to the left of the {anchor.name} where the {item.name} can be placed"
    result = detect(VLMPointingTool(), make_ctx(scene), request)
    (points,) = result.variables.values()  # the VLM stores $<obj_name>_detections
    height, width = scene.view.segmentation.shape
    u, v = points[0]
    assert scene.view.segmentation[int(v * height), int(u * width)] >= 0  # on an object, not free table


def test_an_unknown_item_finds_nothing(scene, make_ctx: MakeContext) -> None:
    anchor = scene.referable()[0]
    request = f"free space behind the {anchor.name} where the giraffe can be placed"
    result = detect(RoboReferTool(), make_ctx(scene), request, "detect_all")
    assert result.text == f"Detected 0 instance(s) of '{request}': []"
