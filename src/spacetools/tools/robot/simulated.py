"""The simulated robot backend: a `RobotWorld` seen through its camera.

The backend converts between the camera frame the tools speak and the world frame the arm moves in
with the camera's calibration, which a real robot knows too. It reports what a real arm measures;
the world's truth stays in the `RobotWorld` for scoring. A session's world comes from a
`sim.robotworlds.RobotWorlds` pool (`SimulatedRobot.of_session`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spacetools.sim.robot import MotionError, MotionReport, RobotWorld
from spacetools.sim.robotworlds import RobotWorlds
from spacetools.sim.scene import SceneSpec
from spacetools.tools.robot.backend import DepthFrame, MotionOutcome, RobotMotionError, pose_problem


class SimulatedRobot:
    """A `RobotBackend` over one simulated world."""

    def __init__(self, world: RobotWorld) -> None:
        self.world = world

    @classmethod
    def from_spec(cls, spec: SceneSpec | str, record_frames: bool = True) -> SimulatedRobot:
        """A robot beside the scene of a spec (or its JSON)."""
        if isinstance(spec, str):
            spec = SceneSpec.model_validate_json(spec)
        return cls(RobotWorld.from_spec(spec, record_frames))

    @classmethod
    def of_session(cls, worlds: RobotWorlds, session_id: str, spec_json: str) -> SimulatedRobot:
        """The robot of a session's world in `worlds` (`RobotMotionError` once the session was closed)."""
        try:
            return cls(worlds.for_session(session_id, spec_json))
        except MotionError as exc:
            raise RobotMotionError(str(exc)) from None

    def capture_image(self) -> np.ndarray:
        return self.world.render().rgb

    def get_depth(self) -> DepthFrame:
        return DepthFrame(self.world.render().depth, float(self.world.camera.fx))

    def current_scene(self) -> str:
        """The scene spec JSON of the world as it is now (what a picture taken now shows)."""
        return self.world.current_spec().model_dump_json()

    def execute_grasp(self, grasp_pose: np.ndarray) -> MotionOutcome:
        pose = np.asarray(grasp_pose, dtype=np.float64)
        if (problem := pose_problem(pose)) is not None:
            raise RobotMotionError(problem)
        return self._run(lambda: self.world.grasp(self.world.camera.cam_to_world @ pose))

    def place_object_at_2d_location(self, point_2d: tuple[float, float]) -> MotionOutcome:
        u, v = (float(c) for c in point_2d)
        if not (0.0 <= u <= 1.0 and 0.0 <= v <= 1.0):
            raise RobotMotionError(f"placement_point_2d must be normalized to [0, 1], got [{u}, {v}]")
        camera = self.world.camera
        depth = self.world.render().depth
        row, col = (
            min(int(v * camera.height), camera.height - 1),
            min(int(u * camera.width), camera.width - 1),
        )
        if depth[row, col] >= camera.far * 0.999:
            raise RobotMotionError(f"the depth camera sees no surface at ({u:.3f}, {v:.3f})")
        point_camera = camera.backproject(depth)[row, col]
        return self._place_world(camera.camera_to_world(point_camera.reshape(1, 3))[0])

    def place_object_at_3d_location(self, point_3d: tuple[float, float, float]) -> MotionOutcome:
        point = np.asarray(point_3d, dtype=np.float64).reshape(1, 3)
        if not np.all(np.isfinite(point)):
            raise RobotMotionError("placement_point_3d must hold finite numbers only")
        return self._place_world(self.world.camera.camera_to_world(point)[0])

    def close(self) -> None:
        self.world.close()

    def _place_world(self, point: np.ndarray) -> MotionOutcome:
        return self._run(lambda: self.world.place(point))

    @staticmethod
    def _run(motion: Callable[[], MotionReport]) -> MotionOutcome:
        try:
            report = motion()
        except MotionError as exc:
            raise RobotMotionError(str(exc)) from None
        return MotionOutcome(success=report.success, message=report.message,
                             execution_time_s=report.execution_time_s)  # fmt: skip
