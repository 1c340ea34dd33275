"""What the robot tools need from a robot: the `RobotBackend` protocol and its wire-level results.

Two implementations: `SimulatedRobot` (a pybullet world, in-process) and `HttpRobot` (any server with
the original's HTTP API, a real arm included). Poses and 3D points are in the robot camera's OpenCV
frame, as the perception tools give them; 2D points are normalized image coordinates of its camera.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

#: How far a grasp pose's rotation may be from orthonormal (max |RᵀR - I|): a pose a model wrote with
#: three decimals passes, a scaled or sheared matrix does not.
ORTHONORMAL_TOLERANCE = 1e-2


class RobotMotionError(Exception):
    """A motion was not carried out (no IK solution, a collision on the path, nothing held)."""


class RobotUnavailableError(Exception):
    """The robot cannot be reached (a server that is down, a timeout)."""


class MotionOutcome(BaseModel):
    """The robot's report after a motion that was carried out (also the HTTP API's response body)."""

    success: bool = Field(description="Whether the motion did what it was for, as the robot's sensors tell.")
    message: str = Field(description="What happened, in a sentence.")
    execution_time_s: float = Field(ge=0.0, description="Duration of the motion, seconds.")


@dataclass
class DepthFrame:
    """A metric depth map (H, W) float32 in metres and the camera's focal length in pixels."""

    depth: np.ndarray
    focal_length_px: float


@runtime_checkable
class RobotBackend(Protocol):
    """A robot arm with an RGB-D camera, as the V2 tools use it."""

    def capture_image(self) -> np.ndarray:
        """An RGB frame (H, W, 3) uint8 of the robot's camera."""
        ...

    def get_depth(self) -> DepthFrame:
        """The camera's metric depth map and focal length."""
        ...

    def execute_grasp(self, grasp_pose: np.ndarray) -> MotionOutcome:
        """Move through a pre-grasp pose to the 4x4 camera-frame grasp pose, close the gripper, lift."""
        ...

    def place_object_at_2d_location(self, point_2d: tuple[float, float]) -> MotionOutcome:
        """Place the held object where the normalized image point's ray meets the depth."""
        ...

    def place_object_at_3d_location(self, point_3d: tuple[float, float, float]) -> MotionOutcome:
        """Place the held object at a camera-frame surface point (metres)."""
        ...


def pose_problem(pose: np.ndarray) -> str | None:
    """Why `pose` is not a rigid 4x4 camera-frame pose a robot can move to, or None when it is one.

    Finite entries, a last row of [0, 0, 0, 1], and a rotation that is orthonormal within
    `ORTHONORMAL_TOLERANCE` with determinant +1 (not a reflection). Anything else would reach the arm's
    inverse kinematics as a NaN direction or an overflow.
    """
    if pose.shape != (4, 4):
        return f"grasp_pose must be a 4x4 matrix, got shape {pose.shape}"
    if not np.all(np.isfinite(pose)):
        return "grasp_pose must hold finite numbers only"
    if not np.allclose(pose[3], (0.0, 0.0, 0.0, 1.0), rtol=0.0, atol=1e-9):
        return "grasp_pose must be homogeneous: its last row must be [0, 0, 0, 1]"
    rotation = pose[:3, :3]
    with np.errstate(all="ignore"):  # entries of 1e300 overflow, which the checks below refuse
        deviation = float(np.max(np.abs(rotation.T @ rotation - np.eye(3))))
        determinant = float(np.linalg.det(rotation))
    if not deviation <= ORTHONORMAL_TOLERANCE:  # `not <=` also refuses a NaN from an overflow
        return (
            "grasp_pose's rotation (its upper-left 3x3) must be orthonormal: RᵀR differs from the "
            f"identity by {deviation:.3g} (tolerance {ORTHONORMAL_TOLERANCE:g})"
        )
    if determinant <= 0:
        return "grasp_pose's rotation is a reflection (determinant -1); a rotation has determinant +1"
    return None
