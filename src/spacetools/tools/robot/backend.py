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
