"""`robot.*`: the V2 robot tools (capture an image, read depth, grasp, place), over a `RobotBackend`.

Configured with `url`, every session drives the robot server there (one physical arm). Without it,
each session gets its own simulated world, built from the scene of the conversation's first image.
Motions answer success, execution time and a camera view after the motion (`$captured_image`, also
added to the conversation); a motion that cannot be carried out, or a robot that cannot be reached,
is an error result the model reads. A simulated robot's pictures carry the scene as it is when they
are taken, so the simulated perception tools work on them as on the task's image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, tool_method
from spacetools.sim.realism import get_profile, perturb_sensor_depth
from spacetools.tools.depth import depth_map_text, point_cloud_text
from spacetools.tools.overlays import colorize_depth
from spacetools.tools.projection import as_normalized_points, as_points_3d, depth_to_point_cloud
from spacetools.tools.robot.backend import (
    DepthFrame,
    MotionOutcome,
    RobotBackend,
    RobotMotionError,
    RobotUnavailableError,
    pose_problem,
)

_T = TypeVar("_T")


class RobotTool(Tool):
    """A robot arm with an RGB-D camera: the simulated one per session, or a robot server by URL.

    Config: `url` (a robot server; default: simulation), `timeout_s` (HTTP), `max_worlds` (simulated
    worlds kept), `record_frames` (keep motion frames for reports, default off), `worlds` (a
    `sim.robotworlds.RobotWorlds` pool to share with an in-process evaluation).
    """

    name: ClassVar[str] = "robot"
    config_keys: ClassVar[frozenset[str]] = frozenset({"url", "timeout_s", "max_worlds", "worlds", "profile"})

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """The realism profile (of the simulated depth sensor) must be a known one."""
        get_profile(str(config.get("profile", "exact")))

    def setup(self) -> None:
        url = self.config.get("url")
        self._remote: RobotBackend | None = None
        if url:
            from spacetools.tools.robot.http_client import DEFAULT_TIMEOUT_S, HttpRobot

            self._remote = HttpRobot(str(url), float(self.config.get("timeout_s", DEFAULT_TIMEOUT_S)))
            return
        from spacetools.sim.robotworlds import DEFAULT_MAX_WORLDS, RobotWorlds

        worlds = self.config.get("worlds")
        self._worlds = worlds if worlds is not None else RobotWorlds(
            int(self.config.get("max_worlds", DEFAULT_MAX_WORLDS)),
            record_frames=bool(self.config.get("record_frames", False)),  # report frames cost renders
        )  # fmt: skip

    def release_session(self, session_id: str) -> None:
        """A closed session's simulated world is freed (a robot server's arm is not the tool's)."""
        if self._remote is None:
            self._worlds.release_session(session_id)

    def backend(self, ctx: ToolContext) -> RobotBackend:
        """The robot of this call's session."""
        if self._remote is not None:
            return self._remote
        scene = ctx.attachment(0).get("scene")
        if not isinstance(scene, str):
            raise ToolError("the robot's workspace is unknown: image 0 has no simulated scene attached")
        from spacetools.tools.robot.simulated import SimulatedRobot

        return _robot_call(lambda: SimulatedRobot.of_session(self._worlds, ctx.session_id, scene))

    @tool_method
    def capture_image(self, *, ctx: ToolContext) -> ToolResult:
        """Capture an image with the robot's camera and add it to the conversation.

        Text output: the image size and its index in the conversation. Stored variables:
        $captured_image (HxWx3 RGB array).
        """
        robot = self.backend(ctx)
        rgb = _robot_call(robot.capture_image)
        height, width = rgb.shape[:2]
        text = (
            f"Captured {width}x{height} image from the robot camera (image {ctx.image_count} in the "
            f"conversation). Use $captured_image to reference it."
        )
        return ToolResult(text=text, images=[rgb], attachments=[self._picture_attachment(robot)],
                          variables={"captured_image": rgb},
                          value={"image_index": ctx.image_count, "width": width, "height": height})  # fmt: skip

    @tool_method
    def get_depth(self, *, ctx: ToolContext) -> ToolResult:
        """Read a metric depth map from the robot's depth camera.

        Text output: image size, focal length and depth statistics. Stored variables: $depth_map (HxW
        array, metres) and $focal_length_px (float).
        """
        frame = self._depth(ctx)
        depth = frame.depth
        height, width = depth.shape
        return ToolResult(
            text=depth_map_text(depth, frame.focal_length_px, "Captured"),
            images=[colorize_depth(depth)],
            variables={"depth_map": depth, "focal_length_px": frame.focal_length_px},
            value={"focal_length_px": frame.focal_length_px, "shape": [height, width]},
        )

    @tool_method
    def get_depth_with_pointcloud(self, *, ctx: ToolContext) -> ToolResult:
        """Read a metric depth map and the 3D point cloud (camera frame) from the robot's depth camera.

        Text output: image size, number of points and their depth range. Stored variables: $depth_map
        (HxW array, metres), $point_cloud (Nx3 array, one point per pixel in row-major order, OpenCV
        camera frame) and $focal_length_px (float).
        """
        frame = self._depth(ctx)
        cloud = depth_to_point_cloud(frame.depth, frame.focal_length_px)
        return ToolResult(
            text=point_cloud_text(frame.depth, cloud),
            images=[colorize_depth(frame.depth)],
            variables={
                "depth_map": frame.depth,
                "point_cloud": cloud,
                "focal_length_px": frame.focal_length_px,
            },
            value={"focal_length_px": frame.focal_length_px, "points": len(cloud)},
        )

    @tool_method
    def execute_grasp(self, grasp_pose: np.ndarray, *, ctx: ToolContext) -> ToolResult:
        """Execute a grasp: move through a pre-grasp pose, close the gripper on the object and lift it.

        Text output: success, execution time and the index of the camera image captured after the
        motion. Stored variables: $captured_image.

        Args:
            grasp_pose: 4x4 grasp pose in the camera frame, e.g. "$grasp_pose" from compute_grasp.
        """
        pose = np.asarray(grasp_pose, dtype=np.float64)
        if (problem := pose_problem(pose)) is not None:
            raise ToolError(problem)
        return self._motion(ctx, "Grasp", lambda robot: robot.execute_grasp(pose))

    @tool_method
    def place_object_at_2d_location(self, placement_point_2d: list[float], *, ctx: ToolContext) -> ToolResult:
        """Place the held object at a point of the image (its ray is cast into the depth to find the spot).

        Text output: success, execution time and the index of the camera image captured after the
        motion. Stored variables: $captured_image.

        Args:
            placement_point_2d: Normalized image coordinates [x, y] of the spot, e.g. [0.42, 0.61].
        """
        point = as_normalized_points(placement_point_2d)
        if len(point) != 1:
            raise ToolError(f"placement_point_2d must be one point [x, y], got {len(point)} points")
        x, y = (float(c) for c in point[0])
        return self._motion(ctx, "Placement", lambda robot: robot.place_object_at_2d_location((x, y)))

    @tool_method
    def place_object_at_3d_location(self, placement_point_3d: list[float], *, ctx: ToolContext) -> ToolResult:
        """Place the held object at a 3D point in the camera frame (metres), e.g. from the point cloud.

        Text output: success, execution time and the index of the camera image captured after the
        motion. Stored variables: $captured_image.

        Args:
            placement_point_3d: Camera-frame coordinates [x, y, z] in metres of the surface to place on.
        """
        point = as_points_3d(placement_point_3d)
        if len(point) != 1:
            raise ToolError(f"placement_point_3d must be one point [x, y, z], got {len(point)} points")
        x, y, z = (float(c) for c in point[0])
        return self._motion(ctx, "Placement", lambda robot: robot.place_object_at_3d_location((x, y, z)))

    def _picture_attachment(self, robot: RobotBackend) -> dict[str, Any] | None:
        """The scene a simulated robot's picture shows, for the simulated tools; a real arm's has none."""
        from spacetools.tools.robot.simulated import SimulatedRobot

        return {"scene": robot.current_scene()} if isinstance(robot, SimulatedRobot) else None

    def _depth(self, ctx: ToolContext) -> DepthFrame:
        frame = _robot_call(lambda: self.backend(ctx).get_depth())
        if self._remote is None:  # a simulated RGB-D camera: a depth sensor's noise, not an estimator's
            profile = get_profile(str(self.config.get("profile", "exact")))
            return DepthFrame(perturb_sensor_depth(frame.depth, profile, ctx.rng), frame.focal_length_px)
        return frame

    def _motion(
        self, ctx: ToolContext, what: str, act: Callable[[RobotBackend], MotionOutcome]
    ) -> ToolResult:
        robot = self.backend(ctx)
        try:
            outcome = _robot_call(lambda: act(robot))
        except ToolError as exc:
            return ToolResult.error(f"{what} not executed: {exc}")
        rgb = _robot_call(robot.capture_image)
        index = ctx.image_count
        status = "succeeded" if outcome.success else "failed"
        text = (
            f"{what} {status} in {outcome.execution_time_s:.2f}s: {outcome.message}. "
            f"Captured image after the motion (image {index} in the conversation). "
            f"Use $captured_image to reference it."
        )
        return ToolResult(
            text=f"Error: {text}" if not outcome.success else text,
            images=[rgb],
            attachments=[self._picture_attachment(robot)],
            variables={"captured_image": rgb},
            is_error=not outcome.success,
            value={**outcome.model_dump(), "image_index": index},
        )


def _robot_call(call: Callable[[], _T]) -> _T:
    """Run a robot call; motions not carried out and unreachable robots become `ToolError`s."""
    try:
        return call()
    except RobotMotionError as exc:
        raise ToolError(str(exc)) from None
    except RobotUnavailableError as exc:
        raise ToolError(f"robot unavailable: {exc}") from None
