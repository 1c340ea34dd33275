"""The reference pose/grasp chain through a real Toolshed session on ~10 simulated scenes.

detect_one → segment_from_point → estimate_depth_with_pointcloud → compute_bbox($variables) →
compute_grasp: on the `exact` profile the box's 8 projected corners score a median hull IoU of at
least 0.7 with the truth (scored by the project's pose scorer), the 3D box matches too, and grasps
come out collision-free on most objects. The realism profiles degrade the same chain in order:
exact > realistic > harsh.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tests.tools.conftest import RenderedScene, render_scene

from spacetools.rewards import compute_score
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.toolsets import TOOLSETS, with_profile

CHAIN_SEEDS = range(10, 20)


@pytest.fixture(scope="module")
def chain_scenes() -> list[RenderedScene]:
    return [render_scene(seed) for seed in CHAIN_SEEDS]


def _target(rendered: RenderedScene) -> ObjectTruth:
    """The object whose pose is asked for in a scene (a well-visible, uniquely named one)."""
    candidates = rendered.referable()
    return candidates[rendered.seed % len(candidates)]


def _inprocess_v1() -> list[ToolDeployment]:
    """The V1 tools in the server process: the same classes, without 9 worker start-ups."""
    return [d.model_copy(update={"backend": "inprocess", "instances": 1}) for d in TOOLSETS["v1"]]


def _corners_text(points: np.ndarray) -> str:
    return "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in points) + "]"


REFS = {"point_cloud": "$point_cloud", "mask": "$segmentation_mask", "focal_length_px": "$focal_length_px"}


async def _chain(
    shed: Toolshed, rendered: RenderedScene, name: str, grasp: bool = True, seed: int = 0
) -> dict:
    """Run the chain in one session; ``corners_2d`` is None when a call failed before the box."""
    session = shed.open_session([rendered.view.rgb], [{"scene": rendered.spec_json}], seed=seed)
    results = [await session.call("roborefer.detect_one", {"obj_name": name, "image_index": 0})]
    detection = results[0].value["points"] if not results[0].is_error else []
    if detection:
        x, y = detection[0]
        results.append(
            await session.call("sam2.segment_from_point", {"x": float(x), "y": float(y), "image_index": 0})
        )
        results.append(
            await session.call("depth_estimator.estimate_depth_with_pointcloud", {"image_index": 0})
        )
        results.append(await session.call("bounding_box.compute_bbox", REFS))
    box_ok = bool(detection) and not any(result.is_error for result in results)
    outcome = {
        "results": results,
        "corners_2d": np.asarray(session.variables["obb_corners_2d"]) if box_ok else None,
        "corners_3d": np.asarray(session.variables["obb_corners_3d"]) if box_ok else None,
        "grasp": None,
        "grasp_pose": None,
    }
    if grasp and box_ok:
        outcome["grasp"] = await session.call("grasp_generator.compute_grasp", {**REFS, "image_index": 0})
        outcome["grasp_pose"] = session.variables.get("grasp_pose")
    session.close()
    return outcome


def _pose_iou(corners_2d: np.ndarray | None, truth: ObjectTruth) -> float:
    """The BOP-ASK pose score of the chain's corners (0 when the chain gave none)."""
    if corners_2d is None:
        return 0.0
    return compute_score("boppose", _corners_text(corners_2d), _corners_text(truth.obb_corners_2d))["score"]


@pytest.mark.slow
def test_reference_chain_recovers_poses_on_ten_scenes(chain_scenes: list[RenderedScene]) -> None:
    async def run() -> list[tuple[float, float, dict]]:
        rows = []
        async with Toolshed(with_profile(_inprocess_v1(), "exact")) as shed:
            for rendered in chain_scenes:
                truth = _target(rendered)
                outcome = await _chain(shed, rendered, truth.name)
                for result in outcome["results"]:
                    assert not result.is_error, result.text
                centre_error = float(
                    np.linalg.norm(outcome["corners_3d"].mean(0) - truth.obb_corners_camera.mean(0))
                )
                rows.append((_pose_iou(outcome["corners_2d"], truth), centre_error, outcome))
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


@pytest.mark.slow
def test_realism_profiles_degrade_the_chain_in_order(chain_scenes: list[RenderedScene]) -> None:
    """Median pose IoU over the ten scenes: exact > realistic > harsh, each by a clear margin.

    A chain whose call failed (a profile's transient failures) scores 0, as a model would get nothing.
    """

    async def median_iou(profile: str) -> float:
        async with Toolshed(with_profile(_inprocess_v1(), profile)) as shed:
            ious = []
            for rendered in chain_scenes:
                truth = _target(rendered)
                outcome = await _chain(shed, rendered, truth.name, grasp=False, seed=rendered.seed)
                ious.append(_pose_iou(outcome["corners_2d"], truth))
        return float(np.median(ious))

    medians = {profile: asyncio.run(median_iou(profile)) for profile in ("exact", "realistic", "harsh")}
    assert medians["exact"] >= 0.9, medians
    assert medians["exact"] - medians["realistic"] >= 0.05, medians
    assert medians["realistic"] - medians["harsh"] >= 0.1, medians
