"""Every V1 tool on simulated scenes, called directly (no Toolshed): formats, truth and failures."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tests.tools.conftest import MakeContext, RenderedScene

from spacetools.kit.definition import ToolContext, ToolResult, invoke_tool_method
from spacetools.tools.depth import DepthEstimatorTool
from spacetools.tools.grasp import GraspGeneratorTool
from spacetools.tools.pointing import RoboReferTool, VLMPointingTool
from spacetools.tools.projection import pixel_index
from spacetools.tools.segmentation import Sam2Tool
from spacetools.tools.simworld import render_observation
from spacetools.tools.vision_ops import VisionOpsTool

POINTS_TEXT = re.compile(
    r"^Detected (\d+) instance\(s\) of '(.+)': \[((?:\(\d\.\d{1,3}, \d\.\d{1,3}\)(?:, )?)*)\]"
)


def call(tool: object, name: str, ctx: ToolContext, **kwargs: object) -> ToolResult:
    return invoke_tool_method(tool, name, kwargs, ctx)  # type: ignore[arg-type]


def object_at(rendered: RenderedScene, point: np.ndarray) -> int:
    height, width = rendered.view.segmentation.shape
    return int(rendered.view.segmentation[pixel_index(float(point[0]), float(point[1]), width, height)])


@pytest.fixture(scope="module")
def tools() -> dict[str, object]:
    return {
        "roborefer": RoboReferTool(),
        "vlm": VLMPointingTool(),
        "sam2": Sam2Tool(),
        "depth": DepthEstimatorTool(),
        "ops": VisionOpsTool(),
    }


def test_detect_one_points_inside_every_named_object(tools, scenes, make_ctx: MakeContext) -> None:
    checked = 0
    for rendered in scenes:
        for truth in rendered.referable():
            result = call(
                tools["roborefer"],
                "roborefer.detect_one",
                make_ctx(rendered),
                obj_name=truth.name,
                image_index=0,
            )
            assert POINTS_TEXT.match(result.text), result.text
            points = np.asarray(result.value["points"])
            assert (
                result.text
                == f"Detected 1 instance(s) of '{truth.name}': [{tuple(points[0].round(3).tolist())}]"
            )
            assert result.variables == {}  # roborefer stores nothing
            assert points.shape == (1, 2)
            assert object_at(rendered, points[0]) == truth.index
            assert len(result.images) == 1 and result.images[0].shape == rendered.view.rgb.shape
            checked += 1
    assert checked >= 10


def test_detect_all_finds_every_instance_of_a_category(tools, scenes, make_ctx: MakeContext) -> None:
    for rendered in scenes:
        categories = [t.category for t in rendered.truths if t.mask.any()]
        category = max(set(categories), key=categories.count)
        result = call(
            tools["roborefer"],
            "roborefer.detect_all",
            make_ctx(rendered),
            obj_name=category + "s",
            image_index=0,
        )
        points = result.value["points"]
        hit = sorted(object_at(rendered, p) for p in points)
        assert hit == sorted(t.index for t in rendered.truths if t.category == category and t.mask.any())


def test_relations_pick_an_object_on_that_side_of_the_anchor(tools, scenes, make_ctx: MakeContext) -> None:
    for rendered in scenes:
        observation = render_observation(rendered_spec(rendered), *rendered.view.rgb.shape[1::-1])
        anchor = rendered.referable()[0]
        for side in ("left of", "right of", "in front of", "behind"):
            expression = f"the object {side} the {anchor.name}"
            result = call(
                tools["roborefer"],
                "roborefer.detect_one",
                make_ctx(rendered),
                obj_name=expression,
                image_index=0,
            )
            others = [t.index for t in rendered.truths if t.index != anchor.index and t.mask.any()]
            on_side = [
                i
                for i in others
                if (observation.centre(i) - observation.centre(anchor.index))
                @ observation.side_direction(side)
                > 0
            ]
            if not on_side:
                assert result.text.startswith("Detected 0 instance(s)")
                continue
            (point,) = result.value["points"]
            assert object_at(rendered, point) in on_side, (side, result.text)


def rendered_spec(rendered: RenderedScene):
    from spacetools.sim.scene import SceneSpec

    return SceneSpec.model_validate_json(rendered.spec_json)


def test_vacant_space_points_at_free_table_on_that_side(tools, scene, make_ctx: MakeContext) -> None:
    observation = render_observation(rendered_spec(scene), 640, 480)
    table = observation.table_pixels
    anchor = scene.referable()[0]
    for side in ("in front of", "left of"):
        result = call(
            tools["roborefer"],
            "roborefer.detect_all",
            make_ctx(scene),
            obj_name=f"vacant space {side} the {anchor.name}",
            image_index=0,
        )
        points = result.value["points"]
        for u, v in points:
            row, col = pixel_index(u, v, 640, 480)
            assert table[row, col]
            offset = observation.world_points[row, col, :2] - observation.centre(anchor.index)
            assert offset @ observation.side_direction(side) > 0


def test_unknown_names_find_nothing_on_the_exact_profile(tools, scene, make_ctx: MakeContext) -> None:
    result = call(
        tools["roborefer"], "roborefer.detect_one", make_ctx(scene), obj_name="giraffe", image_index=0
    )
    assert result.text == "Detected 0 instance(s) of 'giraffe': []"
    assert result.variables == {} and not result.is_error


def test_the_generic_vlm_ignores_relations(tools, scene, make_ctx: MakeContext) -> None:
    anchor = scene.referable()[0]
    plain = call(tools["vlm"], "vlm.detect_all", make_ctx(scene), obj_name="object", image_index=0)
    related = call(
        tools["vlm"],
        "vlm.detect_all",
        make_ctx(scene),
        obj_name=f"object left of the {anchor.name}",
        image_index=0,
    )
    assert len(next(iter(plain.variables.values()))) == len(next(iter(related.variables.values())))


def test_segment_from_point_returns_the_instance_mask(tools, scenes, make_ctx: MakeContext) -> None:
    for rendered in scenes:
        truth = rendered.referable()[0]
        ys, xs = np.nonzero(truth.mask)
        x, y = (xs[len(xs) // 2] + 0.5) / 640, (ys[len(ys) // 2] + 0.5) / 480
        result = call(tools["sam2"], "sam2.segment_from_point", make_ctx(rendered), x=x, y=y, image_index=0)
        assert re.fullmatch(
            rf"Segmented object at normalized coords \({x:.3f}, {y:.3f}\) with IoU score: 0\.990\. "
            r"Use \$segmentation_mask \(boolean array, 480x640\) to reference it\.",
            result.text,
        ), result.text
        np.testing.assert_array_equal(result.variables["segmentation_mask"], truth.mask)


def test_segmenting_the_table_gives_a_surface_with_a_lower_score(tools, scene, make_ctx: MakeContext) -> None:
    observation = render_observation(rendered_spec(scene), 640, 480)
    rows, cols = np.nonzero(observation.table_pixels)
    point = f"[({(cols[0] + 0.5) / 640:.4f}, {(rows[0] + 0.5) / 480:.4f})]"
    result = call(tools["sam2"], "sam2.segment_from_points", make_ctx(scene), points=point, image_index=0)
    mask = result.variables["segmentation_mask"]
    assert not np.any(mask & (scene.view.segmentation >= 0))
    assert float(re.search(r"score: (\d\.\d+)", result.text).group(1)) < 0.8


def test_realistic_masks_differ_from_the_truth_but_reproducibly(tools, scene, make_ctx: MakeContext) -> None:
    truth = scene.referable()[0]
    points = np.argwhere(truth.mask)[:1][:, ::-1] / [480, 640][::-1]
    results = [
        call(
            Sam2Tool(profile="harsh"),
            "sam2.segment_from_points",
            make_ctx(scene, seed),
            points=points,
            image_index=0,
        )
        for seed in (1, 1, 2, 3, 4, 5)
    ]
    first, again = results[:2]  # the same seed: the same mask (or the same transient failure)
    assert first.text == again.text and first.is_error == again.is_error
    if not first.is_error:
        np.testing.assert_array_equal(
            first.variables["segmentation_mask"], again.variables["segmentation_mask"]
        )
    masks = [r.variables["segmentation_mask"] for r in results if not r.is_error]
    assert any(not np.array_equal(m, truth.mask) for m in masks)


def test_depth_is_the_rendered_metric_depth_with_a_per_pixel_cloud(
    tools, scene, make_ctx: MakeContext
) -> None:
    result = call(
        tools["depth"], "depth_estimator.estimate_depth_with_pointcloud", make_ctx(scene), image_index=0
    )
    assert re.match(
        r"Generated 640x480 depth map and 307,200 3D points\. Depth range in point cloud: ", result.text
    )
    np.testing.assert_array_equal(result.variables["depth_map"], scene.view.depth)
    assert result.variables["focal_length_px"] == pytest.approx(scene.view.camera.fx)
    cloud = result.variables["point_cloud"]
    expected = scene.view.camera.backproject(scene.view.depth).reshape(-1, 3)
    np.testing.assert_allclose(cloud, expected, atol=1e-5)
    plain = call(tools["depth"], "depth_estimator.estimate_depth", make_ctx(scene), image_index=0)
    assert set(plain.variables) == {"depth_map", "focal_length_px"}
    assert "Depth (m)" not in plain.text and plain.images[0].shape[0] == 480


def test_realistic_depth_is_noisy_scaled_and_reproducible(tools, scene, make_ctx: MakeContext) -> None:
    realistic = DepthEstimatorTool(profile="realistic")
    first = call(realistic, "depth_estimator.estimate_depth", make_ctx(scene, 7), image_index=0)
    again = call(realistic, "depth_estimator.estimate_depth", make_ctx(scene, 7), image_index=0)
    np.testing.assert_array_equal(first.variables["depth_map"], again.variables["depth_map"])
    error = np.abs(first.variables["depth_map"] - scene.view.depth)
    assert 0 < np.median(error) < 0.2


def test_simulated_tools_need_a_scene(tools, scene) -> None:
    ctx = ToolContext("test", {0: scene.view.rgb}, [(480, 640)], [{}], np.random.default_rng(0))
    for tool, name, kwargs in (
        (tools["roborefer"], "roborefer.detect_one", {"obj_name": "mug"}),
        (tools["sam2"], "sam2.segment_from_point", {"x": 0.5, "y": 0.5}),
        (tools["depth"], "depth_estimator.estimate_depth", {}),
    ):
        result = call(tool, name, ctx, image_index=0, **kwargs)
        assert result.is_error
        assert (
            result.text
            == "Error: image 0 has no simulated scene: simulated tools need a SpatialSim sample or scene"
        )
    out_of_range = call(tools["depth"], "depth_estimator.estimate_depth", ctx, image_index=3)
    assert out_of_range.is_error and "out of range" in out_of_range.text


def test_index_at_reads_depth_clouds_and_masks(tools, scene, make_ctx: MakeContext) -> None:
    ctx = make_ctx(scene)
    depth = call(
        tools["depth"], "depth_estimator.estimate_depth_with_pointcloud", ctx, image_index=0
    ).variables
    u, v = 0.5, 0.5
    value = call(tools["ops"], "vision_ops.index_at", ctx, data=depth["depth_map"], u=u, v=v)
    expected = float(scene.view.depth[240, 320])  # the float32 element's full repr, not rounded
    assert value.text == f"Pixel value at (0.500, 0.500) is {expected!r}" and value.value == expected
    point = call(tools["ops"], "vision_ops.index_at", ctx, data=depth["point_cloud"], u=u, v=v)
    assert point.value[2] == pytest.approx(expected, rel=1e-6) and point.text.endswith(f"{point.value[2]!r}]")
    mask = call(tools["ops"], "vision_ops.index_at", ctx, data=scene.view.segmentation >= 0, u=u, v=v)
    assert mask.text.endswith(str(bool(scene.view.segmentation[240, 320] >= 0)))
    bad = call(tools["ops"], "vision_ops.index_at", ctx, data=depth["depth_map"], u=1.5, v=0.5)
    assert bad.is_error and "[0, 1]" in bad.text


def test_crops_and_projections(tools, scene, make_ctx: MakeContext) -> None:
    ctx = make_ctx(scene)
    truth = scene.referable()[0]
    crop = call(tools["ops"], "vision_ops.mask_crop", ctx, image_index=0, mask=truth.mask)
    x0, y0, x1, y1 = (truth.bbox_2d * [640, 480, 640, 480]).round().astype(int)
    assert crop.variables["masked_crop"].shape == (y1 - y0, x1 - x0, 3)
    empty = call(tools["ops"], "vision_ops.mask_crop", ctx, image_index=0, mask=np.zeros((480, 640), bool))
    assert empty.is_error and "empty" in empty.text
    cut = call(
        tools["ops"], "vision_ops.point_crop", ctx, image_index=0, points="[(0.25, 0.25), (0.75, 0.5)]"
    )
    assert cut.variables["cropped_image"].shape == (120, 320, 3)
    fx = scene.view.camera.fx
    down = call(
        tools["ops"],
        "vision_ops.project_3d_points_to_2d",
        ctx,
        points_3d=truth.obb_corners_camera,
        focal_length_px=fx,
        width=640,
        height=480,
    )
    np.testing.assert_allclose(down.variables["projected_2d_points"], truth.obb_corners_2d, atol=1e-9)
    centre = truth.centroid_2d[None]
    up = call(
        tools["ops"],
        "vision_ops.project_2d_points_to_3d",
        ctx,
        points_2d=centre,
        depth=scene.view.depth,
        focal_length_px=fx,
    )
    row, col = pixel_index(*centre[0], 640, 480)
    assert up.variables["projected_3d_points"][0, 2] == pytest.approx(scene.view.depth[row, col])


def test_grasp_rejects_a_mask_of_another_size_naming_both_sizes(scene, make_ctx: MakeContext) -> None:
    cloud = scene.view.camera.backproject(scene.view.depth).reshape(-1, 3)
    result = call(
        GraspGeneratorTool(),
        "grasp_generator.compute_grasp",
        make_ctx(scene),
        point_cloud=cloud,
        mask=np.ones((48, 64), dtype=bool),
        focal_length_px=float(scene.view.camera.fx),
        image_index=0,
    )
    assert result.text == "Error: mask shape (48, 64) does not match image 0 (480x640)"


def test_points_outside_the_image_are_named_in_the_error(tools, scene, make_ctx: MakeContext) -> None:
    result = call(tools["sam2"], "sam2.segment_from_point", make_ctx(scene), x=1.5, y=0.25, image_index=0)
    assert result.text == "Error: Point 0 (1.5, 0.25) must be in range [0, 1] (normalized image coordinates)"
