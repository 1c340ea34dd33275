"""The robot HTTP API of the original, served over any `RobotBackend` (the simulation by default).

`create_robot_app(robot)` gives the FastAPI app; `spacetools robot serve` runs it with a simulated
world. One robot serves one caller's motions at a time (a lock), as a physical arm would.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Annotated

import numpy as np
from fastapi import Body, FastAPI, HTTPException, Response
from PIL import Image

from spacetools.tools.robot.backend import MotionOutcome, RobotBackend, RobotMotionError


def create_robot_app(robot: RobotBackend) -> FastAPI:
    """The robot API: capture_image, get_depth, execute_grasp and the two place motions."""
    app = FastAPI(title="spacetools robot", description="The robot HTTP API of SpaceTools' V2 tools.")
    lock = threading.Lock()  # sync endpoints run in a thread pool; the arm does one thing at a time

    def motion(action: Callable[[], MotionOutcome]) -> MotionOutcome:
        with lock:
            try:
                return action()
            except RobotMotionError as exc:
                raise HTTPException(status_code=409, detail=str(exc)) from None

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/capture_image", response_class=Response, responses={200: {"content": {"image/png": {}}}})
    def capture_image() -> Response:
        """The camera's RGB frame as PNG."""
        with lock:
            rgb = robot.capture_image()
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format="PNG")
        return Response(buffer.getvalue(), media_type="image/png")

    @app.get("/get_depth", response_class=Response)
    def get_depth() -> Response:
        """The metric depth map (float32, metres) and focal length (pixels) as an npz file."""
        with lock:
            frame = robot.get_depth()
        buffer = io.BytesIO()
        np.savez_compressed(
            buffer, depth=frame.depth.astype(np.float32), focal_length_px=frame.focal_length_px
        )
        return Response(buffer.getvalue(), media_type="application/octet-stream")

    @app.post("/execute_grasp")
    def execute_grasp(
        grasp_pose: Annotated[list[list[float]], Body(embed=True, description="4x4 camera-frame pose.")],
    ) -> MotionOutcome:
        """Pre-grasp, approach, close the gripper, lift."""
        pose = np.asarray(grasp_pose, dtype=np.float64)
        if pose.shape != (4, 4):
            raise HTTPException(status_code=422, detail=f"grasp_pose must be 4x4, got shape {pose.shape}")
        return motion(lambda: robot.execute_grasp(pose))

    @app.post("/place_object_at_2d_location")
    def place_2d(
        placement_point_2d: Annotated[list[float], Body(embed=True, min_length=2, max_length=2)],
    ) -> MotionOutcome:
        """Place the held object where the normalized image point's ray meets the depth."""
        x, y = placement_point_2d
        return motion(lambda: robot.place_object_at_2d_location((x, y)))

    @app.post("/place_object_at_3d_location")
    def place_3d(
        placement_point_3d: Annotated[list[float], Body(embed=True, min_length=3, max_length=3)],
    ) -> MotionOutcome:
        """Place the held object at a camera-frame point (metres)."""
        x, y, z = placement_point_3d
        return motion(lambda: robot.place_object_at_3d_location((x, y, z)))

    return app
