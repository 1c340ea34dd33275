"""The reference pose/grasp chain through a real Toolshed session on ~10 simulated scenes.

detect_one → segment_from_point → estimate_depth_with_pointcloud → compute_bbox($variables) →
compute_grasp: on the `exact` profile the box's 8 projected corners score a median hull IoU of at
least 0.7 with the truth (scored by the project's pose scorer), the 3D box matches too, and grasps
come out collision-free on most objects.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tests.tools.conftest import RenderedScene, render_scene

from spacetools.rewards import compute_score
from spacetools.tools.toolsets import TOOLSETS
from spacetools.toolshed import ToolDeployment, Toolshed

CHAIN_SEEDS = range(10, 20)


def _inprocess_v1() -> list[ToolDeployment]:
    """The V1 tools in the server process: the same classes, without 9 worker start-ups."""
    return [d.model_copy(update={"backend": "inprocess", "instances": 1}) for d in TOOLSETS["v1"]]


def _corners_text(points: np.ndarray) -> str:
    return "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in points) + "]"


async def _chain(shed: Toolshed, rendered: RenderedScene, name: str) -> dict:
    session = shed.open_session([rendered.view.rgb], [rendered.spec_json])
    detection = await session.call("roborefer.detect_one", {"obj_name": name, "image_index": 0})
    x, y = session.variables[name.replace(" ", "_") + "_detection"][0]
    segmentation = await session.call(
        "sam2.segment_from_point", {"x": float(x), "y": float(y), "image_index": 0}
    )
    depth = await session.call("depth_estimator.estimate_depth_with_pointcloud", {"image_index": 0})
    refs = {
        "point_cloud": "$point_cloud",
        "mask": "$segmentation_mask",
        "focal_length_px": "$focal_length_px",
    }
    box = await session.call("bounding_box.compute_bbox", refs)
    grasp = await session.call("grasp_generator.compute_grasp", {**refs, "image_index": 0})
    for result in (detection, segmentation, depth, box):
        assert not result.is_error, result.text
    outcome = {
        "corners_2d": np.asarray(session.variables["obb_corners_2d"]),
        "corners_3d": np.asarray(session.variables["obb_corners_3d"]),
        "grasp": grasp,
        "grasp_pose": session.variables.get("grasp_pose"),
    }
    session.close()
    return outcome


@pytest.mark.slow
def test_reference_chain_recovers_poses_on_ten_scenes() -> None:
    async def run() -> list[tuple[float, float, object]]:
        rows = []
        async with Toolshed(_inprocess_v1(), profile="exact") as shed:
            for seed in CHAIN_SEEDS:
                rendered = render_scene(seed)
                candidates = rendered.referable()
                truth = candidates[seed % len(candidates)]
                outcome = await _chain(shed, rendered, truth.name)
                answer = _corners_text(outcome["corners_2d"])
                iou = compute_score("boppose", answer, _corners_text(truth.obb_corners_2d))["score"]
                centre_error = float(
                    np.linalg.norm(outcome["corners_3d"].mean(0) - truth.obb_corners_camera.mean(0))
                )
                rows.append((iou, centre_error, outcome))
        return rows

    rows = asyncio.run(run())
    ious = [iou for iou, _, _ in rows]
    centre_errors = [error for _, error, _ in rows]
    assert np.median(ious) >= 0.7, ious
    assert np.median(centre_errors) < 0.015, centre_errors
    grasps = [outcome["grasp"] for _, _, outcome in rows]
    succeeded = [g for g in grasps if not g.is_error]
    assert len(succeeded) >= 7, [g.text for g in grasps]
    for failure in (g for g in grasps if g.is_error):
        assert failure.text.startswith("Error: RuntimeError: "), failure.text
    for _, _, outcome in rows:
        if outcome["grasp_pose"] is not None:
            pose = np.asarray(outcome["grasp_pose"])
            np.testing.assert_allclose(pose[:3, :3] @ pose[:3, :3].T, np.eye(3), atol=1e-9)
            assert pose[2, 3] > 0  # in front of the camera
