"""`HttpRobot`: the robot backend for any server with the original's robot HTTP API.

Endpoints: `GET /capture_image` (PNG), `GET /get_depth` (npz with `depth` and `focal_length_px`),
`POST /execute_grasp` (`{"grasp_pose": 4x4}`), `POST /place_object_at_2d_location`
(`{"placement_point_2d": [x, y]}`), `POST /place_object_at_3d_location` (`{"placement_point_3d":
[x, y, z]}`). A motion answers a `MotionOutcome` as JSON, or HTTP 409 with a `detail` when it was not
carried out. A real arm plugs in by URL; `spacetools robot serve` is the simulated one. A token (the
`SPACETOOLS_ROBOT_TOKEN` environment variable by default) is sent as `Authorization: Bearer <token>`.

A motion is sent once and never retried: when the connection breaks or times out after it was sent,
the arm may have moved, so the error says so instead of moving it again.
"""

from __future__ import annotations

import io
import os
from typing import Any

import httpx
import numpy as np
from PIL import Image

from spacetools.tools.robot.backend import DepthFrame, MotionOutcome, RobotMotionError, RobotUnavailableError

DEFAULT_TIMEOUT_S = 120.0
"""Motions of a real arm take seconds to tens of seconds."""
TOKEN_ENV = "SPACETOOLS_ROBOT_TOKEN"
"""The environment variable `HttpRobot` and `spacetools robot serve` read the bearer token from."""
DEFAULT_MAX_BODY_BYTES = 64 * 1024
"""The largest request body a robot server takes by default: a motion's is a pose or a point."""
DEFAULT_MAX_CONNECTIONS = 64
"""The connections a robot server holds open by default (past them a request gets a 503): one arm
serves one motion at a time."""


class HttpRobot:
    """A `RobotBackend` that calls a robot server."""

    def __init__(self, base_url: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None, token: str | None = None) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._has_token = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        # httpx retries nothing by default (no `retries` on the transport): a motion goes out once.
        self._client = httpx.Client(
            base_url=self.base_url, timeout=timeout_s, transport=transport, headers=headers
        )

    def capture_image(self) -> np.ndarray:
        response = self._request("GET", "/capture_image")
        try:
            with Image.open(io.BytesIO(response.content)) as image:
                return np.asarray(image.convert("RGB"))
        except OSError as exc:
            raise RobotUnavailableError(f"the robot server sent an unreadable image: {exc}") from None

    def get_depth(self) -> DepthFrame:
        response = self._request("GET", "/get_depth")
        try:
            with np.load(io.BytesIO(response.content), allow_pickle=False) as data:
                return DepthFrame(np.asarray(data["depth"], dtype=np.float32), float(data["focal_length_px"]))
        except (OSError, KeyError, ValueError) as exc:
            raise RobotUnavailableError(f"the robot server sent an unreadable depth file: {exc}") from None

    def execute_grasp(self, grasp_pose: np.ndarray) -> MotionOutcome:
        pose = np.asarray(grasp_pose, dtype=np.float64)
        return self._motion("/execute_grasp", {"grasp_pose": pose.tolist()})

    def place_object_at_2d_location(self, point_2d: tuple[float, float]) -> MotionOutcome:
        return self._motion(
            "/place_object_at_2d_location", {"placement_point_2d": [float(c) for c in point_2d]}
        )

    def place_object_at_3d_location(self, point_3d: tuple[float, float, float]) -> MotionOutcome:
        return self._motion(
            "/place_object_at_3d_location", {"placement_point_3d": [float(c) for c in point_3d]}
        )

    def close(self) -> None:
        self._client.close()

    def _motion(self, path: str, body: dict[str, Any]) -> MotionOutcome:
        response = self._request("POST", path, json=body)
        try:
            return MotionOutcome.model_validate_json(response.content)
        except ValueError as exc:
            raise RobotUnavailableError(
                f"the robot server sent an unreadable answer to {path}: {exc}"
            ) from None

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # Past the connection, a POST (a motion) may have reached the arm: say so rather than retry it.
        maybe_moved = (
            "; the motion may have been carried out, so it was not retried: capture an image to see "
            "the arm's state before moving it again"
            if method == "POST"
            else ""
        )
        try:
            response = self._client.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            raise RobotUnavailableError(f"the robot at {self.base_url} is unreachable: {exc}") from None
        except httpx.TimeoutException:
            raise RobotUnavailableError(
                f"the robot at {self.base_url} did not answer {path} in time{maybe_moved}"
            ) from None
        except httpx.TransportError as exc:
            raise RobotUnavailableError(
                f"the connection to the robot at {self.base_url} broke during {path} "
                f"({type(exc).__name__}: {exc}){maybe_moved}"
            ) from None
        if response.status_code == 401:  # the server's text speaks of a Toolshed: say what to set here
            sent = "a token it does not accept" if self._has_token else "no token"
            raise RobotUnavailableError(
                f"the robot at {self.base_url} requires a bearer token and got {sent}: set {TOKEN_ENV} "
                "to the server's token"
            )
        if response.status_code in (409, 422):
            raise RobotMotionError(_detail(response))
        if not response.is_success:
            raise RobotUnavailableError(
                f"HTTP {response.status_code} from the robot's {path}: {_detail(response)}"
            )
        return response


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        return response.text
    return detail if isinstance(detail, str) else str(detail)
