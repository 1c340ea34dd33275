"""The robot HTTP API as strict as the HTTP Toolshed, against the real server on 127.0.0.1.

Hostile poses and bodies get a 4xx that says why (never a 500), the kept-alive connection keeps
serving, bodies are capped, a token guards the arm, and a motion whose answer is lost is not retried.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI

from slow_client import SLOW_HEADERS, body_request, drip, read_until_closed
from spacetools.integrations.robot_api.server import create_robot_app, robot_server_limits
from spacetools.sim.layout import build_scene
from spacetools.tools.robot import RobotUnavailableError
from spacetools.tools.robot.backend import pose_problem
from spacetools.tools.robot.http_client import TOKEN_ENV, HttpRobot
from spacetools.tools.robot.simulated import SimulatedRobot
from spacetools.toolshed.slow_clients import server_options

TOKEN = "a-robot-token-of-32-characters!!"
IDENTITY_AT_HALF_A_METRE = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.5], [0, 0, 0, 1]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(app: FastAPI, **options: Any) -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="off", **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the robot server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def robot() -> Iterator[SimulatedRobot]:
    with build_scene(1, n_objects=4, with_robot=True) as built:
        spec = built.spec.model_dump_json()
    simulated = SimulatedRobot.from_spec(spec, record_frames=False)
    yield simulated
    simulated.close()


@pytest.fixture(scope="module")
def url(robot: SimulatedRobot) -> Iterator[str]:
    """The robot API with its default limits and no token (loopback)."""
    yield from _serve(create_robot_app(robot))


def _scaled(factor: float) -> list[list[float]]:
    pose = np.asarray(IDENTITY_AT_HALF_A_METRE, dtype=np.float64)
    pose[:3, :3] *= factor
    return pose.tolist()


HOSTILE_POSES: list[tuple[str, Any, str]] = [
    ("all-zero", [[0.0] * 4] * 4, "last row must be [0, 0, 0, 1]"),
    ("zero-rotation", _scaled(0.0), "must be orthonormal"),
    ("degenerate", [[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0.5], [0, 0, 0, 1]], "must be orthonormal"),
    ("scaled-1e300", _scaled(1e300), "must be orthonormal"),
    ("entries-1e-320", _scaled(1e-320), "must be orthonormal"),
    ("reflection", [[-1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.5], [0, 0, 0, 1]], "reflection"),
    ("3x3", [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "4x4"),
    ("ragged", [[1, 0, 0, 0], [0, 1], [0, 0, 1, 0.5], [0, 0, 0, 1]], "4x4"),
]


@pytest.mark.parametrize(
    ("pose", "reason"), [(p, r) for _, p, r in HOSTILE_POSES], ids=[c[0] for c in HOSTILE_POSES]
)
def test_a_hostile_pose_is_a_422_that_says_why_and_the_connection_keeps_serving(
    url: str, pose: Any, reason: str
) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        refused = client.post("/execute_grasp", json={"grasp_pose": pose})
        assert refused.status_code == 422, refused.text
        assert reason in refused.json()["detail"]
        # The same kept-alive connection serves the next command.
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/capture_image").headers["content-type"] == "image/png"


def test_a_target_far_out_of_reach_is_a_409_that_reads_briefly(url: str) -> None:
    pose = np.eye(4)
    pose[:3, 3] = (1e300, 0.0, 0.5)  # rigid and finite: the arm, not the check, finds it out of reach
    refused = httpx.post(f"{url}/execute_grasp", json={"grasp_pose": pose.tolist()}, timeout=60)
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert detail.startswith("no inverse-kinematics solution reaches (")
    assert "e+299" in detail and len(detail) < 200


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        (
            "/execute_grasp",
            '{"grasp_pose": [[NaN, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]}',
            "finite",
        ),
        ("/place_object_at_3d_location", '{"placement_point_3d": [NaN, 0, 1]}', "finite"),
        ("/place_object_at_3d_location", '{"placement_point_3d": [0, Infinity, 1]}', "finite"),
        ("/place_object_at_2d_location", '{"placement_point_2d": [NaN, 0.5]}', "normalized to [0, 1]"),
    ],
)
def test_non_finite_numbers_are_refused_before_the_arm_moves(
    url: str, path: str, body: str, reason: str
) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        refused = client.post(path, content=body, headers={"content-type": "application/json"})
        assert refused.status_code == 422, refused.text
        assert reason in refused.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        '{"grasp_pose": NaN}',
        '{"placement_point_2d": [NaN, Infinity, -Infinity]}',
        '{"grasp_pose": [[1e999, "x"]]}',
    ],
)
def test_a_422_never_echoes_the_input_so_nan_cannot_break_it(url: str, body: str) -> None:
    path = "/execute_grasp" if "grasp_pose" in body else "/place_object_at_2d_location"
    with httpx.Client(base_url=url, timeout=30) as client:
        refused = client.post(path, content=body, headers={"content-type": "application/json"})
        assert refused.status_code == 422, refused.text
        details = refused.json()["detail"]
        assert details and all("input" not in detail and detail["msg"] for detail in details)
        assert client.get("/health").status_code == 200


def test_bodies_over_the_limit_are_refused_with_413(url: str) -> None:
    rows = json.dumps([[0.0] * 4] * 4)
    padding = " " * (1 << 20)  # 1 MiB of whitespace is still a valid pose body
    with httpx.Client(base_url=url, timeout=30) as client:
        refused = client.post(
            "/execute_grasp",
            content=f'{{"grasp_pose": {rows}{padding}}}',
            headers={"content-type": "application/json"},
        )
        assert refused.status_code == 413
        assert client.get("/health").status_code == 200


def test_the_token_guards_every_endpoint_but_health(
    robot: SimulatedRobot, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in _serve(create_robot_app(robot, token=TOKEN)):
        assert httpx.get(f"{url}/health").status_code == 200
        refused = httpx.get(f"{url}/capture_image")
        assert refused.status_code == 401
        assert refused.json()["detail"] == "this robot requires 'Authorization: Bearer <token>'"
        wrong = {"Authorization": "Bearer " + "x" * len(TOKEN)}
        assert httpx.post(f"{url}/execute_grasp", json={"grasp_pose": []}, headers=wrong).status_code == 401
        monkeypatch.delenv(TOKEN_ENV, raising=False)
        with pytest.raises(
            RobotUnavailableError, match=f"requires a bearer token and got no token: set {TOKEN_ENV}"
        ):
            HttpRobot(url, timeout_s=30).capture_image()
        with pytest.raises(RobotUnavailableError, match="got a token it does not accept"):
            HttpRobot(url, timeout_s=30, token="z" * len(TOKEN)).execute_grasp(np.eye(4))
        client = HttpRobot(url, timeout_s=30, token=TOKEN)
        assert np.array_equal(client.capture_image(), robot.capture_image())
        client.close()
        monkeypatch.setenv(TOKEN_ENV, TOKEN)  # the client's default comes from the environment
        client = HttpRobot(url, timeout_s=30)
        assert client.get_depth().depth.shape == robot.get_depth().depth.shape
        client.close()


def test_a_motion_whose_answer_is_lost_is_not_retried() -> None:
    """A server that reads each request and hangs up: the arm may have moved, so one request only."""
    requests = []
    done = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)

        def hang_up_after_reading() -> None:
            while not done.is_set():
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                with connection:
                    requests.append(connection.recv(65536))

        thread = threading.Thread(target=hang_up_after_reading, daemon=True)
        thread.start()
        client = HttpRobot(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=10)
        with pytest.raises(RobotUnavailableError, match="may have been carried out, so it was not retried"):
            client.execute_grasp(np.asarray(IDENTITY_AT_HALF_A_METRE, dtype=np.float64))
        client.close()
        done.set()
        thread.join(timeout=10)
    assert len(requests) == 1 and requests[0].startswith(b"POST /execute_grasp")


@pytest.mark.parametrize(("_name", "pose", "reason"), HOSTILE_POSES[:-2])
def test_pose_problem_names_the_flaw_and_accepts_a_rounded_rotation(
    _name: str, pose: Any, reason: str
) -> None:
    problem = pose_problem(np.asarray(pose, dtype=np.float64))
    assert problem is not None and reason in problem
    angle = np.deg2rad(30)
    rounded = np.round(
        [
            [np.cos(angle), -np.sin(angle), 0, 0.1],
            [np.sin(angle), np.cos(angle), 0, 0],
            [0, 0, 1, 0.5],
            [0, 0, 0, 1],
        ],
        3,
    )
    assert pose_problem(rounded) is None


def test_slow_clients_are_cut_off_and_cannot_lock_the_arm_out(robot: SimulatedRobot) -> None:
    """`robot serve`'s settings: 70 sockets that drip headers locked the robot API out before."""
    limits = robot_server_limits(max_connections=4).model_copy(
        update={"header_timeout_s": 1.0, "body_timeout_s": 1.0}
    )
    for url in _serve(create_robot_app(robot), **server_options(limits)):
        host, port = url.removeprefix("http://").split(":")
        slow = [socket.create_connection((host, int(port)), timeout=30) for _ in range(2)]
        try:
            for raw in slow:
                raw.sendall(SLOW_HEADERS[:10])  # and never the rest
            # The slow client holds its 2 connections, half of 4: its next one is refused at once.
            with socket.create_connection((host, int(port)), timeout=30) as third:
                refused = read_until_closed(third).decode()
            local = httpx.HTTPTransport(local_address="127.0.0.2")
            with httpx.Client(transport=local, timeout=30) as other_client:
                assert other_client.get(f"{url}/health").status_code == 200
            answers = [read_until_closed(raw).decode() for raw in slow]
        finally:
            for raw in slow:
                raw.close()
        slow_body = drip(url, b"[" + b" " * 50, 1.0, head=body_request("/execute_grasp"))
        assert refused.startswith("HTTP/1.1 503") and "retry-after: 1" in refused.lower()
        assert all(answer.startswith("HTTP/1.1 408") for answer in answers), answers
        assert slow_body.decode().startswith("HTTP/1.1 408")
