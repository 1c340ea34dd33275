"""A Franka-like parallel-jaw gripper and its five BOP-ASK keypoints."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

GRIPPER_MAX_WIDTH = 0.08
"""Maximum opening between the fingers, metres (Franka Hand)."""

FINGER_LENGTH = 0.045
"""Distance from a finger base (at the palm) to its tip along the approach axis, metres."""


def gripper_points(pose: ArrayLike, width: float) -> NDArray[np.float64]:
    """The five gripper points (5, 3) in the frame the pose is expressed in (the camera frame).

    The pose's z axis is the approach direction, its x axis the closing direction (left finger at -x,
    right finger at +x) and its origin the palm centre between the finger bases. Order: centre, left
    finger base, right finger base, left finger tip, right finger tip.
    """
    matrix = np.asarray(pose, dtype=np.float64)
    if matrix.shape != (4, 4):
        raise ValueError(f"grasp pose must be 4x4, got {matrix.shape}")
    if not 0.0 <= width <= GRIPPER_MAX_WIDTH + 1e-9:
        raise ValueError(f"grasp width must be in [0, {GRIPPER_MAX_WIDTH}] m, got {width}")
    half = width / 2.0
    local = np.array(
        [
            [0.0, 0.0, 0.0],
            [-half, 0.0, 0.0],
            [half, 0.0, 0.0],
            [-half, 0.0, FINGER_LENGTH],
            [half, 0.0, FINGER_LENGTH],
        ]
    )
    points: NDArray[np.float64] = local @ matrix[:3, :3].T + matrix[:3, 3]
    return points
