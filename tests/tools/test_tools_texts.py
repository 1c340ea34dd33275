"""Every V1 tool's result text, byte for byte the original's template (reference section 2), with its
structured value beside it; and the input checks of issue 9 (masks, focal lengths, NaN).

The expected texts are written here from the templates and filled from each result's `value`, so a
change of wording, rounding or separators fails; the values themselves are checked against the scene
in test_tools_sim.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tests.tools.conftest import RenderedScene, scene_context

from spacetools.kit.definition import ToolContext, ToolResult, invoke_tool_method
from spacetools.tools.bbox import BoundingBoxTool
from spacetools.tools.depth import DepthEstimatorTool
from spacetools.tools.grasp import GraspGeneratorTool
from spacetools.tools.pointing import RoboReferTool, VLMPointingTool
from spacetools.tools.segmentation import Sam2Tool
from spacetools.tools.vision_ops import VisionOpsTool

EDGES = "[(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7)]"
PY_FLOAT_3 = r"-?\d+\.\d{1,3}"  # a float rounded to 3 decimals, printed by Python: 0.34, not 0.340


def call(tool: object, name: str, ctx: ToolContext, **kwargs: object) -> ToolResult:
    result = invoke_tool_method(tool, name, kwargs, ctx)  # type: ignore[arg-type]
    assert not result.is_error, result.text
    return result


def _target(scene: RenderedScene) -> tuple[str, np.ndarray]:
    truth = scene.referable()[0]
    return truth.name, truth.mask


def test_roborefer_prints_rounded_points_and_stores_nothing(scene: RenderedScene) -> None:
    name, _ = _target(scene)
    for method in ("detect_one", "detect_all"):
        result = call(
            RoboReferTool(), f"roborefer.{method}", scene_context(scene), obj_name=name, image_index=0
        )
        points = [(round(x, 3), round(y, 3)) for x, y in result.value["points"]]
        assert result.text == f"Detected {len(points)} instance(s) of '{name}': {points}"
        assert re.fullmatch(
            rf"Detected 1 instance\(s\) of '.+': \[\(({PY_FLOAT_3}), ({PY_FLOAT_3})\)\]", result.text
        )
        assert result.variables == {} and "Use $" not in result.text


def test_vlm_prints_unrounded_points_and_names_its_detections_variable(scene: RenderedScene) -> None:
    name, _ = _target(scene)
    variable = re.sub(r"\W+", "_", name) + "_detections"
    for method in ("detect_one", "detect_all"):
        result = call(VLMPointingTool(), f"vlm.{method}", scene_context(scene), obj_name=name, image_index=0)
        points = [(float(x), float(y)) for x, y in result.value["points"]]
        assert result.text == (
            f"Detected {len(points)} instance(s) of '{name}': {points} Use ${variable} to reference them."
        )
        np.testing.assert_array_equal(result.variables[variable], np.asarray(points))


def test_segmentation_text(scene: RenderedScene) -> None:
    result = call(Sam2Tool(), "sam2.segment_from_point", scene_context(scene), x=0.5, y=0.6, image_index=0)
    height, width = scene.view.rgb.shape[:2]
    assert result.value["shape"] == [height, width] and result.value["point"] == [0.5, 0.6]
    assert result.text == (
        f"Segmented object at normalized coords (0.500, 0.600) with IoU score: {result.value['iou']:.3f}. "
        f"Use $segmentation_mask (boolean array, {height}x{width}) to reference it."
    )


def test_depth_texts(scene: RenderedScene) -> None:
    tool, ctx = DepthEstimatorTool(), scene_context(scene)
    v = call(tool, "depth_estimator.estimate_depth", ctx, image_index=0).value
    plain = call(tool, "depth_estimator.estimate_depth", ctx, image_index=0)
    w, h = v["width"], v["height"]
    assert plain.text == (
        f"Estimated depth map for {w}x{h} image. Focal length: {v['focal_length_px']:.1f}px. "
        f"Depth range: {v['depth_min']:.2f}m to {v['depth_max']:.2f}m (mean: {v['depth_mean']:.2f}m). "
        f"Use $depth_map (numpy array, {h}x{w}) to reference the depth data and $focal_length_px (float) "
        "to reference the focal length."
    )
    cloud = call(tool, "depth_estimator.estimate_depth_with_pointcloud", ctx, image_index=0)
    c = cloud.value
    assert cloud.text == (
        f"Generated {w}x{h} depth map and {c['points']:,} 3D points. Depth range in point cloud: "
        f"{c['cloud_depth_min']:.2f}m to {c['cloud_depth_max']:.2f}m (mean: {c['cloud_depth_mean']:.2f}m). "
        f"Use $depth_map (numpy array, {h}x{w}), $point_cloud (numpy array, {c['points']}x3) and "
        "$focal_length_px (float) to reference the results."
    )
    assert "," in f"{c['points']:,}" and c["points"] == w * h


def _chain_inputs(scene: RenderedScene) -> tuple[np.ndarray, np.ndarray, float]:
    _, mask = _target(scene)
    cloud = scene.view.camera.backproject(scene.view.depth).reshape(-1, 3)
    return cloud, mask, float(scene.view.camera.fx)


def test_compute_bbox_text_joins_its_first_two_lines_and_rounds_to_3_decimals(scene: RenderedScene) -> None:
    cloud, mask, focal = _chain_inputs(scene)
    result = call(
        BoundingBoxTool(),
        "bounding_box.compute_bbox",
        scene_context(scene),
        point_cloud=cloud,
        mask=mask,
        focal_length_px=focal,
    )
    v = result.value
    rounded = lambda rows: str(np.round(np.asarray(rows), 3).tolist())  # noqa: E731
    assert result.text == (
        f"Oriented bounding box computed from {v['points_used']}/{v['points_total']} points."
        f"Corners in 3D: {rounded(v['corners_3d'])}\n"
        f"Corners in normalized image coordinates: {rounded(v['corners_2d'])}\n"
        f"Edges: {EDGES}\n"
        f"Extent: {rounded(v['extent'])}\n"
        f"Volume: {v['volume']:.3f}"
    )
    assert len(result.text.splitlines()) == 5 and ".Corners in 3D: [[" in result.text
    assert not re.search(r"\d\.\d{4,}", result.text) and not re.search(r"\.\d+0[,\]]", result.text)


def test_compute_grasp_text(scene: RenderedScene) -> None:
    cloud, mask, focal = _chain_inputs(scene)
    result = invoke_tool_method(
        GraspGeneratorTool(),
        "grasp_generator.compute_grasp",
        {"point_cloud": cloud, "mask": mask, "focal_length_px": focal, "image_index": 0},
        scene_context(scene),
    )
    if result.is_error:  # the original's failure wording
        assert result.text.startswith("Error: RuntimeError: ")
        return
    v = result.value
    points = "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in v["points_2d"]) + "]"
    assert result.text == (
        f"Generated collision-free grasp with confidence {v['confidence']:.3f} from "
        f"{v['masked_points']}/{v['total_points']} masked points. "
        f"Filtered {v['sampled']} \u2192 {v['collision_free']} collision-free grasps. "
        f"Projected 2D gripper points: {points}"
    )


def test_index_at_prints_the_full_float(scene: RenderedScene) -> None:
    depth = scene.view.depth.astype(np.float32)
    result = call(VisionOpsTool(), "vision_ops.index_at", scene_context(scene), data=depth, u=0.44, v=0.899)
    row, col = int(0.899 * depth.shape[0]), int(0.44 * depth.shape[1])
    assert result.value == float(depth[row, col])
    assert result.text == f"Pixel value at (0.440, 0.899) is {float(depth[row, col])!r}"


# --- input validation (issue 9) ------------------------------------------------------------------------


def test_a_depth_map_passed_as_a_mask_is_refused_with_what_it_is(scene: RenderedScene) -> None:
    cloud, _, focal = _chain_inputs(scene)
    result = invoke_tool_method(
        BoundingBoxTool(),
        "bounding_box.compute_bbox",
        {"point_cloud": cloud, "mask": scene.view.depth, "focal_length_px": focal},
        scene_context(scene),
    )
    assert result.is_error and "mask must be a boolean (H, W) array" in result.text
    assert "a depth map or an image is not a mask" in result.text and "float" in result.text


def test_a_mask_of_another_size_is_refused(scene: RenderedScene) -> None:
    cloud, _, focal = _chain_inputs(scene)
    result = invoke_tool_method(
        BoundingBoxTool(),
        "bounding_box.compute_bbox",
        {"point_cloud": cloud, "mask": np.ones((48, 64), bool), "focal_length_px": focal},
        scene_context(scene),
    )
    height, width = scene.view.rgb.shape[:2]
    assert result.text == f"Error: mask is 48x64 but the conversation's images are {height}x{width}"


@pytest.mark.parametrize(
    ("focal", "expected"),
    [
        (float("nan"), "must be a positive finite number"),
        (float("inf"), "must be a positive finite number"),
        (0.0, "must be a positive finite number"),
        (1e-9, "is not plausible"),
        (1e9, "is not plausible"),
    ],
)
def test_focal_lengths_must_be_finite_and_plausible(
    scene: RenderedScene, focal: float, expected: str
) -> None:
    cloud, mask, _ = _chain_inputs(scene)
    for tool, name, extra in (
        (BoundingBoxTool(), "bounding_box.compute_bbox", {}),
        (GraspGeneratorTool(), "grasp_generator.compute_grasp", {"image_index": 0}),
    ):
        result = invoke_tool_method(
            tool,
            name,
            {"point_cloud": cloud, "mask": mask, "focal_length_px": focal, **extra},
            scene_context(scene),
        )
        assert result.is_error and expected in result.text, result.text


def test_a_nan_reading_is_an_error_not_a_value(scene: RenderedScene) -> None:
    depth = np.full((4, 4), np.nan, np.float32)
    result = invoke_tool_method(
        VisionOpsTool(), "vision_ops.index_at", {"data": depth, "u": 0.5, "v": 0.5}, scene_context(scene)
    )
    assert result.is_error and "not a finite number" in result.text
