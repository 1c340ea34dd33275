"""The V2 robot tools through a Toolshed (a simulated world per session) and over the robot HTTP API."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import uvicorn

from spacetools.integrations.robot_api.server import create_robot_app
from spacetools.sim.layout import build_scene
from spacetools.tools.robot import RobotMotionError, RobotTool, RobotUnavailableError
from spacetools.tools.robot.http_client import HttpRobot
from spacetools.tools.robot.simulated import SimulatedRobot
from spacetools.toolshed import ToolDeployment, Toolshed

SEED = 1


@pytest.fixture(scope="module")
def scene() -> dict[str, Any]:
    """The scene's spec, its image and the ground-truth grasp of its first object (camera frame)."""
    with build_scene(SEED, n_objects=4, with_robot=True) as built:
        view = built.render()
        truth = built.ground_truth(view)[0]
        return {
            "spec": built.spec.model_dump_json(),
            "image": view.rgb,
            "grasp": truth.grasp_pose,
            "view": view,
        }


def _shed(**config: Any) -> Toolshed:
    return Toolshed([ToolDeployment(tool=RobotTool, backend="inprocess", timeout_s=120, config=config)])


def test_capture_and_depth_describe_the_robot_camera(scene: dict[str, Any]) -> None:
    async def scenario() -> None:
        async with _shed() as shed:
            session = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            captured = await session.call("robot.capture_image", {})
            assert not captured.is_error
            assert captured.text == (
                "Captured 640x480 image from the robot camera (image 1 in the conversation). "
                "Use $captured_image to reference it."
            )
            assert captured.images[0].shape == (480, 640, 3) and "captured_image" in session.variables
            assert captured.value["image_index"] == 1
            # The same camera as the task image: the robot world starts as the scene was rendered.
            difference = np.abs(captured.images[0].astype(int) - scene["image"].astype(int)).mean()
            assert difference < 3.0
            depth = await session.call("robot.get_depth_with_pointcloud", {})
            assert re.fullmatch(
                r"Generated 640x480 depth map and 307,200 3D points\. Depth range in point cloud: "
                r"\d+\.\d\dm to \d+\.\d\dm \(mean: \d+\.\d\dm\)\. Use \$depth_map \(numpy array, 480x640\), "
                r"\$point_cloud \(numpy array, 307200x3\) and \$focal_length_px \(float\) to reference the results\.",
                depth.text,
            )
            assert depth.value["focal_length_px"] == pytest.approx(scene["view"].camera.fx)
            plain = await session.call("robot.get_depth", {})
            assert plain.text.startswith("Captured depth map for 640x480 image. Focal length: ")
            assert "$depth_map" in plain.text

    asyncio.run(scenario())


def test_grasp_then_place_and_sessions_do_not_share_a_robot(scene: dict[str, Any]) -> None:
    async def scenario() -> None:
        async with _shed() as shed:
            first = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            other = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            assert first.set_variable("grasp_pose", scene["grasp"])
            grasped = await first.call("robot.execute_grasp", {"grasp_pose": "$grasp_pose"})
            assert not grasped.is_error, grasped.text
            assert re.match(r"Grasp succeeded in \d+\.\d\ds: object held", grasped.text)
            assert grasped.value["success"] and len(grasped.images) == 1
            # The other session's robot holds nothing: a robot is state, never shared.
            refused = await other.call(
                "robot.place_object_at_2d_location", {"placement_point_2d": [0.5, 0.6]}
            )
            assert refused.is_error
            assert refused.text == (
                "Error: Placement not executed: the gripper holds nothing; execute a grasp first"
            )
            placed = await first.call("robot.place_object_at_2d_location", {"placement_point_2d": [0.5, 0.6]})
            assert not placed.is_error and placed.text.startswith("Placement succeeded in")

    asyncio.run(scenario())


def test_bad_arguments_and_missing_scenes_are_error_results(scene: dict[str, Any]) -> None:
    async def scenario() -> None:
        async with _shed() as shed:
            session = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            outside = await session.call(
                "robot.place_object_at_2d_location", {"placement_point_2d": [1.5, 0.2]}
            )
            assert outside.is_error and "must be in range [0, 1]" in outside.text
            assert session.set_variable("not_a_pose", np.eye(3))
            wrong = await session.call("robot.execute_grasp", {"grasp_pose": "$not_a_pose"})
            assert wrong.is_error and "4x4" in wrong.text
            shear = np.array([[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.5], [0, 0, 0, 1]], dtype=np.float64)
            assert session.set_variable("sheared", shear)
            sheared = await session.call("robot.execute_grasp", {"grasp_pose": "$sheared"})
            assert sheared.is_error and "must be orthonormal" in sheared.text
            no_scene = shed.open_session([scene["image"]])
            missing = await no_scene.call("robot.capture_image", {})
            assert missing.is_error and "no simulated scene" in missing.text

    asyncio.run(scenario())


def test_an_unreachable_robot_server_is_an_error_result(scene: dict[str, Any]) -> None:
    async def scenario() -> None:
        async with _shed(url=f"http://127.0.0.1:{_free_port()}", timeout_s=2) as shed:
            session = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            result = await session.call("robot.capture_image", {})
            assert result.is_error and "robot unavailable" in result.text and "unreachable" in result.text

    asyncio.run(scenario())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def robot_server(scene: dict[str, Any]) -> Iterator[tuple[str, SimulatedRobot]]:
    """The simulated robot behind the robot HTTP API on 127.0.0.1."""
    robot = SimulatedRobot.from_spec(scene["spec"], record_frames=False)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_robot_app(robot), host="127.0.0.1", port=port, log_level="error", lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the robot server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", robot
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        robot.close()


def test_http_api_round_trips_against_the_simulation(
    robot_server: tuple[str, SimulatedRobot], scene: dict[str, Any]
) -> None:
    url, robot = robot_server
    client = HttpRobot(url, timeout_s=120)
    try:
        assert np.array_equal(client.capture_image(), robot.capture_image())  # PNG is lossless
        frame = client.get_depth()
        assert frame.depth.dtype == np.float32 and np.array_equal(frame.depth, robot.get_depth().depth)
        assert frame.focal_length_px == pytest.approx(robot.world.camera.fx)
        with pytest.raises(RobotMotionError, match="holds nothing"):  # HTTP 409
            client.place_object_at_2d_location((0.5, 0.6))
        with pytest.raises(RobotMotionError, match="4x4"):  # HTTP 422
            client._motion("/execute_grasp", {"grasp_pose": [[1.0, 0.0], [0.0, 1.0]]})
        outcome = client.execute_grasp(scene["grasp"])
        assert outcome.success and outcome.execution_time_s > 1.0
        assert robot.world.log.picks[-1].picked  # the server's world really moved
        view = scene["view"]
        table_point = view.camera.backproject(view.depth)[300, 320]  # a point of the table top
        placed = client.place_object_at_3d_location(tuple(float(c) for c in table_point))
        assert placed.execution_time_s > 0.5
    finally:
        client.close()


def test_the_tools_drive_a_robot_server_by_url(
    robot_server: tuple[str, SimulatedRobot], scene: dict[str, Any]
) -> None:
    url, robot = robot_server

    async def scenario() -> None:
        async with _shed(url=url) as shed:
            session = shed.open_session([scene["image"]])  # a real arm needs no simulated scene
            captured = await session.call("robot.capture_image", {})
            assert not captured.is_error and np.array_equal(captured.images[0], robot.capture_image())
            refused = await session.call(
                "robot.place_object_at_3d_location", {"placement_point_3d": [0, 0, 1]}
            )
            assert refused.is_error and "holds nothing" in refused.text

    asyncio.run(scenario())


def test_http_client_reports_a_dead_server() -> None:
    client = HttpRobot(f"http://127.0.0.1:{_free_port()}", timeout_s=2)
    with pytest.raises(RobotUnavailableError, match="unreachable"):
        client.capture_image()
    client.close()


def test_v2_is_v1_plus_the_robot_tools() -> None:
    v1 = {spec.name for spec in Toolshed("v1").specs()}
    v2 = {spec.name for spec in Toolshed("v2").specs()}
    assert v2 - v1 == {
        "robot.capture_image",
        "robot.get_depth",
        "robot.get_depth_with_pointcloud",
        "robot.execute_grasp",
        "robot.place_object_at_2d_location",
        "robot.place_object_at_3d_location",
    }
    assert v1 < v2
    grasp = next(spec for spec in Toolshed("v2").specs() if spec.name == "robot.execute_grasp")
    assert grasp.parameters["required"] == ["grasp_pose"]
    assert grasp.parameters["properties"]["grasp_pose"]["type"] == "string"  # a "$var" reference
