"""Gripper keypoints follow the grasp-pose convention."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from spacetools.sim.gripper import FINGER_LENGTH, GRIPPER_MAX_WIDTH, gripper_points


def test_points_in_the_pose_frame() -> None:
    pose = np.eye(4)
    pose[:3, :3] = Rotation.from_euler("xyz", [0.3, -0.2, 1.1]).as_matrix()
    pose[:3, 3] = [0.1, -0.05, 0.8]
    centre, left_base, right_base, left_tip, right_tip = gripper_points(pose, 0.06)
    np.testing.assert_allclose(centre, pose[:3, 3])
    np.testing.assert_allclose(right_base - left_base, 0.06 * pose[:3, 0])  # closing along +x
    np.testing.assert_allclose(left_tip - left_base, FINGER_LENGTH * pose[:3, 2])  # fingers along approach
    np.testing.assert_allclose(right_tip - right_base, FINGER_LENGTH * pose[:3, 2])
    np.testing.assert_allclose((left_base + right_base) / 2, centre)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="4x4"):
        gripper_points(np.eye(3), 0.05)
    with pytest.raises(ValueError, match="width"):
        gripper_points(np.eye(4), GRIPPER_MAX_WIDTH + 0.01)
