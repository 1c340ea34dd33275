"""Oriented boxes in BOP-ASK order and top-down grasps, on hand-made objects."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from spacetools.sim.camera import Camera
from spacetools.sim.gripper import gripper_points
from spacetools.sim.groundtruth import oriented_box, top_down_grasp
from spacetools.sim.scene import ObjectSpec

CAMERA = Camera.look_at((0.0, -0.8, 0.7), (0.0, 0.0, 0.0), 320, 240)


def _box(half: tuple[float, float, float], quat: tuple[float, ...] = (0, 0, 0, 1),
         position: tuple[float, float, float] = (0.0, 0.0, 0.05)) -> ObjectSpec:  # fmt: skip
    return ObjectSpec(index=0, name="box", category="box", shape="box", position=position,
                      orientation=quat, half_extents=half)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(*[st.floats(0.01, 0.1)] * 3),
    st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(lambda q: np.linalg.norm(q) > 0.1),
)
def test_corner_order_is_bop_ask(half: tuple[float, float, float], quat: list[float]) -> None:
    corners, extent = oriented_box(_box(half, tuple(np.asarray(quat) / np.linalg.norm(quat))))
    assert corners.shape == (8, 3)
    assert sorted(extent) == pytest.approx(sorted(2 * np.asarray(half)))
    vertical = corners[4:] - corners[:4]
    assert np.all(vertical[:, 2] > 0)  # corner i + 4 above corner i
    for face in (corners[:4], corners[4:]):
        x, y = face[:, 0], face[:, 1]
        signed_area = 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)
        assert signed_area >= -1e-12  # counter-clockwise seen from above
    np.testing.assert_allclose(corners.mean(axis=0), [0.0, 0.0, 0.05], atol=1e-12)


def test_box_offset_moves_the_box_with_the_pose() -> None:
    quat = tuple(Rotation.from_euler("z", 90, degrees=True).as_quat())
    spec = _box((0.02, 0.03, 0.04), quat).model_copy(update={"box_offset": (0.01, 0.0, 0.0)})
    corners, _ = oriented_box(spec)
    np.testing.assert_allclose(corners.mean(axis=0), [0.0, 0.01, 0.05], atol=1e-12)


def test_grasp_closes_across_the_narrow_side_from_above() -> None:
    corners, _ = oriented_box(_box((0.02, 0.05, 0.03), position=(0.0, 0.0, 0.03)))
    pose, width = top_down_grasp(corners, [], CAMERA)
    assert width == pytest.approx(0.04 + 0.01)
    pose_world = CAMERA.cam_to_world @ pose
    np.testing.assert_allclose(pose_world[:3, 2], [0, 0, -1], atol=1e-12)  # approach straight down
    np.testing.assert_allclose(np.abs(pose_world[:3, 0]), [1, 0, 0], atol=1e-12)  # close across x
    tips = CAMERA.camera_to_world(gripper_points(pose, width)[3:])
    assert np.all(tips[:, 2] > 0.0) and np.all(tips[:, 2] < 0.06)
    left_tip_px, right_tip_px = CAMERA.project(gripper_points(pose, width)[3:])
    assert left_tip_px[0] < right_tip_px[0]


def test_grasp_uses_other_side_or_gives_up() -> None:
    wide, _ = oriented_box(_box((0.02, 0.06, 0.03), position=(0.0, 0.0, 0.03)))
    blocker, _ = oriented_box(_box((0.01, 0.01, 0.03), position=(0.0, 0.035, 0.03)))
    # a neighbour beyond the wide side leaves the narrow grasp (fingers at x = ±0.025) free
    pose, _ = top_down_grasp(wide, [blocker], CAMERA)
    assert pose is not None
    side_blocker, _ = oriented_box(_box((0.01, 0.01, 0.03), position=(0.03, 0.0, 0.03)))
    assert top_down_grasp(wide, [side_blocker], CAMERA) is None  # narrow side blocked, wide side too wide
    huge, _ = oriented_box(_box((0.1, 0.1, 0.03), position=(0.0, 0.0, 0.03)))
    assert top_down_grasp(huge, [], CAMERA) is None
