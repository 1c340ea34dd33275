"""The robot HTTP API of the original, served over any `RobotBackend` (the simulation by default).

`create_robot_app(robot)` gives the FastAPI app; `spacetools robot serve` runs it with a simulated
world. One robot serves one caller's motions at a time (a lock), as a physical arm would.

It is as strict as the HTTP Toolshed, with whose pieces it is built: poses and points are checked
before the arm moves (422 that says why), answers are the Toolshed's safe JSON (a refused body is
never echoed back), request bodies are capped (413), and a bearer token guards every endpoint but
`/health` (required to listen beyond loopback, see `check_exposure`). Served with the Toolshed's
connection settings (`robot_server_limits`): slow clients are cut off and one client may hold at most
half the connections.
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable
from typing import Annotated

import numpy as np
from fastapi import Body, FastAPI, HTTPException, Response
from fastapi.exceptions import RequestValidationError
from PIL import Image

from spacetools.tools.robot.backend import MotionOutcome, RobotBackend, RobotMotionError, pose_problem
from spacetools.tools.robot.http_client import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, TOKEN_ENV
from spacetools.toolshed.http import BearerTokenMiddleware
from spacetools.toolshed.http_responses import SafeJSONResponse, invalid_body
from spacetools.toolshed.limits import ServerLimits, is_loopback

__all__ = ["MIN_TOKEN_LENGTH", "check_exposure", "create_robot_app", "robot_server_limits"]

MIN_TOKEN_LENGTH = 16


def check_exposure(host: str, token: str | None) -> None:
    """`ValueError` when the robot would listen beyond loopback without a token, or the token is short."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"the token must have at least {MIN_TOKEN_LENGTH} characters")
    if token is None and not is_loopback(host):
        raise ValueError(
            f"listening on {host} lets anyone on the network move the robot: set a bearer token "
            f"(--token or the {TOKEN_ENV} environment variable), or listen on 127.0.0.1"
        )


def robot_server_limits(max_connections: int = DEFAULT_MAX_CONNECTIONS) -> ServerLimits:
    """The connection limits `spacetools robot serve` runs uvicorn with (through
    `spacetools.toolshed.slow_clients.server_options`): the Toolshed's read deadlines, and one client
    may hold at most half of `max_connections`, so a few dozen slow sockets cannot lock the arm out."""
    return ServerLimits(max_connections=max_connections)


def create_robot_app(
    robot: RobotBackend, *, token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    """The robot API: capture_image, get_depth, execute_grasp and the two place motions."""
    app = FastAPI(
        title="spacetools robot",
        description="The robot HTTP API of SpaceTools' V2 tools.",
        max_body_size=max_body_bytes,
        default_response_class=SafeJSONResponse,
    )
    if token is not None:
        app.add_middleware(BearerTokenMiddleware, token=token, service="this robot")
    lock = threading.Lock()  # sync endpoints run in a thread pool; the arm does one thing at a time

    # As the Toolshed's: the default handler echoes the input, which may hold a NaN JSON cannot write.
    app.add_exception_handler(RequestValidationError, invalid_body)

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
        grasp_pose: Annotated[
            list[list[float]], Body(embed=True, description="4x4 camera-frame pose (a rigid transform).")
        ],
    ) -> MotionOutcome:
        """Pre-grasp, approach, close the gripper, lift."""
        try:
            pose = np.asarray(grasp_pose, dtype=np.float64)
        except ValueError:  # ragged rows
            raise HTTPException(422, "grasp_pose must be a 4x4 matrix (4 rows of 4 numbers)") from None
        if (problem := pose_problem(pose)) is not None:
            raise HTTPException(422, problem)
        return motion(lambda: robot.execute_grasp(pose))

    @app.post("/place_object_at_2d_location")
    def place_2d(
        placement_point_2d: Annotated[list[float], Body(embed=True, min_length=2, max_length=2)],
    ) -> MotionOutcome:
        """Place the held object where the normalized image point's ray meets the depth."""
        x, y = placement_point_2d
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):  # also refuses NaN
            raise HTTPException(422, f"placement_point_2d must be normalized to [0, 1], got [{x}, {y}]")
        return motion(lambda: robot.place_object_at_2d_location((x, y)))

    @app.post("/place_object_at_3d_location")
    def place_3d(
        placement_point_3d: Annotated[list[float], Body(embed=True, min_length=3, max_length=3)],
    ) -> MotionOutcome:
        """Place the held object at a camera-frame point (metres)."""
        x, y, z = placement_point_3d
        if not all(math.isfinite(c) for c in (x, y, z)):
            raise HTTPException(422, "placement_point_3d must hold finite numbers only")
        return motion(lambda: robot.place_object_at_3d_location((x, y, z)))

    return app
