"""The simulated robot backend: a `RobotWorld` seen through its camera, and a pool of per-session worlds.

The backend converts between the camera frame the tools speak and the world frame the arm moves in
with the camera's calibration, which a real robot knows too. It reports what a real arm measures;
the world's truth stays in the `RobotWorld` for scoring.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from spacetools.sim.robot import MotionError, MotionReport, RobotWorld
from spacetools.sim.scene import SceneSpec
from spacetools.tools.robot.backend import DepthFrame, MotionOutcome, RobotMotionError, pose_problem

DEFAULT_MAX_WORLDS = 8
CLOSED_SESSIONS_KEPT = 4096
"""How many closed session ids a pool remembers, so that a call still queued when its session closed
does not build that session a world again."""


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


class SimulatedRobots:
    """Simulated robots keyed by tool session: a robot is state, so sessions never share one.

    Worlds are built on a session's first robot call from the scene of its first image and kept,
    least recently used first out, up to `max_worlds`, and freed when their session closes
    (`release_session`) unless `keep_closed`: an evaluation that scores the world its episode left
    keeps it, and frees it with `release`. Thread-safe.
    """

    def __init__(
        self, max_worlds: int = DEFAULT_MAX_WORLDS, record_frames: bool = True, keep_closed: bool = False
    ) -> None:
        self.max_worlds = max_worlds
        self.record_frames = record_frames
        self.keep_closed = keep_closed
        self._robots: OrderedDict[str, tuple[str, SimulatedRobot]] = OrderedDict()
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._robots)

    def for_session(self, session_id: str, spec_json: str) -> SimulatedRobot:
        """The session's robot, built from `spec_json` the first time (`RobotMotionError` once the
        session was closed)."""
        with self._lock:
            if session_id in self._closed:
                raise RobotMotionError("the session was closed; its robot's world is gone")
            if session_id in self._robots:
                self._robots.move_to_end(session_id)
                return self._robots[session_id][1]
        robot = SimulatedRobot.from_spec(spec_json, self.record_frames)
        with self._lock:
            self._robots[session_id] = (spec_json, robot)
            evicted = []
            while len(self._robots) > self.max_worlds:
                evicted.append(self._robots.popitem(last=False)[1][1])
        for old in evicted:
            old.close()
        return robot

    def find_by_scene(self, spec_json: str) -> SimulatedRobot | None:
        """The most recent robot built for this scene (how an evaluation finds the world it scores)."""
        with self._lock:
            for key in reversed(self._robots):
                if self._robots[key][0] == spec_json:
                    return self._robots[key][1]
        return None

    def release_session(self, session_id: str) -> None:
        """Free the world of a closed session (kept when `keep_closed`)."""
        if self.keep_closed:
            return
        with self._lock:
            entry = self._robots.pop(session_id, None)
            self._closed[session_id] = None
            while len(self._closed) > CLOSED_SESSIONS_KEPT:
                self._closed.popitem(last=False)
        if entry is not None:
            entry[1].close()

    def release(self, robot: SimulatedRobot) -> None:
        """Forget and close a robot."""
        with self._lock:
            for key, (_, held) in list(self._robots.items()):
                if held is robot:
                    del self._robots[key]
        robot.close()

    def close(self) -> None:
        """Close every world."""
        with self._lock:
            robots = [robot for _, robot in self._robots.values()]
            self._robots.clear()
        for robot in robots:
            robot.close()
