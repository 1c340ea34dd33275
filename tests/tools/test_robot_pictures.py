"""The robot's pictures carry the scene they show: the simulated perception tools work on them.

After a grasp lifts an object, pointing, segmentation and depth on the captured image see the object
where it now is (in the gripper), in process and over HTTP; the scene never reaches the policy.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from tests.toolshed.serving import serving

from spacetools.agent.rollout import run_episode
from spacetools.agent.types import EpisodeInput, EpisodeState, Task
from spacetools.sim.layout import build_scene
from spacetools.sim.scene import SceneSpec
from spacetools.tools.simworld import render_observation
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.client import RemoteToolshed
from spacetools.toolshed.protocol import ToolProvider, ToolSession

SEED = 1
TARGET = 0
TOOLS = (
    "spacetools.tools.pointing:RoboReferTool",
    "spacetools.tools.segmentation:Sam2Tool",
    "spacetools.tools.depth:DepthEstimatorTool",
    "spacetools.tools.robot:RobotTool",
)


@pytest.fixture(scope="module")
def scene() -> dict[str, Any]:
    with build_scene(SEED, n_objects=4, with_robot=True) as built:
        view = built.render()
        truth = built.ground_truth(view)[TARGET]
        return {"spec": built.spec.model_dump_json(), "image": view.rgb, "grasp": truth.grasp_pose}


def _shed(backend: str = "inprocess") -> Toolshed:
    return Toolshed([ToolDeployment(tool=tool, backend=backend, timeout_s=120) for tool in TOOLS])


def _point_in(mask: np.ndarray, point: list[float]) -> bool:
    height, width = mask.shape
    return bool(mask[int(point[1] * height), int(point[0] * width)])


async def _pick_and_look(session: ToolSession, scene: dict[str, Any], name: str) -> dict[str, Any]:
    """Grasp the target, then point at, segment and estimate depth on the picture taken after it."""
    grasp_pose = scene["grasp"].tolist()  # by value: a remote session holds no variable set here
    grasped = await session.call("robot.execute_grasp", {"grasp_pose": grasp_pose})
    assert not grasped.is_error, grasped.text
    (captured,) = grasped.image_indices
    before, after = await session.call_many(
        [
            ("roborefer.detect_one", {"obj_name": name, "image_index": 0}),
            ("roborefer.detect_one", {"obj_name": name, "image_index": captured}),
        ]
    )
    point = after.value["points"][0]
    segmented, depth = await session.call_many(
        [
            ("sam2.segment_from_point", {"x": point[0], "y": point[1], "image_index": captured}),
            ("depth_estimator.estimate_depth", {"image_index": captured}),
        ]
    )
    assert not (segmented.is_error or depth.is_error), (segmented.text, depth.text)
    return {
        "captured": captured,
        "before": before.value["points"][0],
        "after": point,
        "segmented": segmented.value,
    }


def _check_moved(seen: dict[str, Any], attachment: dict[str, Any], scene: dict[str, Any]) -> np.ndarray:
    """Check what the tools saw on the captured picture against the moved object; its mask now."""
    now = SceneSpec.model_validate_json(attachment["scene"])
    initial = SceneSpec.model_validate_json(scene["spec"])
    lift = now.objects[TARGET].position[2] - initial.objects[TARGET].position[2]
    assert lift > 0.05  # the attached scene is the world after the grasp: the object is up in the hand
    assert now.robot_joints is not None  # and the arm stands where it grasped
    truth_now = render_observation(now, 640, 480).truths[TARGET]
    truth_before = render_observation(initial, 640, 480).truths[TARGET]
    assert _point_in(truth_now.mask, seen["after"]) and _point_in(truth_before.mask, seen["before"])
    assert seen["after"][1] < seen["before"][1]  # lifted: higher in the picture
    overlap = np.logical_and(truth_now.mask, truth_before.mask).sum() / truth_now.mask.sum()
    assert overlap < 0.5  # the object really moved in the picture: old and new silhouettes barely overlap
    assert abs(seen["segmented"]["area"] - int(truth_now.mask.sum())) < 0.2 * truth_now.mask.sum()
    return truth_now.mask


@pytest.mark.parametrize("backend", ["inprocess", "process"])  # (a worker sends attachments back too)
def test_tools_on_the_picture_after_a_grasp_see_the_moved_object(backend: str, scene: dict[str, Any]) -> None:
    name = SceneSpec.model_validate_json(scene["spec"]).objects[TARGET].name

    async def scenario() -> None:
        async with _shed(backend) as shed:
            session = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            seen = await _pick_and_look(session, scene, name)
            attachment = session.attachments[seen["captured"]]
            mask = _check_moved(seen, attachment, scene)
            segmented = session.variables["segmentation_mask"]
            assert np.logical_and(segmented, mask).sum() / np.logical_or(segmented, mask).sum() > 0.8
            estimated = np.array(session.variables["depth_map"])
            assert not (await session.call("robot.get_depth", {})).is_error
            measured = session.variables["depth_map"]
            # Depth estimated on the picture is what the robot's depth camera measures now, on the object too.
            assert np.median(np.abs(estimated[mask] - measured[mask])) < 0.01
            captured = await session.call("robot.capture_image", {})
            (index,) = captured.image_indices
            assert json.loads(session.attachments[index]["scene"]) == json.loads(attachment["scene"])

    asyncio.run(scenario())


def test_over_http_the_server_keeps_the_scene_and_the_client_mirrors_only_the_picture(
    scene: dict[str, Any],
) -> None:
    name = SceneSpec.model_validate_json(scene["spec"]).objects[TARGET].name

    async def scenario(url: str, shed: Toolshed) -> None:
        async with RemoteToolshed(url) as remote:
            session = remote.open_session([scene["image"]], [{"scene": scene["spec"]}])
            seen = await _pick_and_look(session, scene, name)
            server_side = shed.session(session._id)  # type: ignore[attr-defined]  # (the server is idle now)
            _check_moved(seen, server_side.attachments[seen["captured"]], scene)
            mirrored = session._attachments  # type: ignore[attr-defined]
            assert len(session.images) == len(server_side.images) and mirrored[seen["captured"]] == {}

    shed = _shed()  # started by the server
    with serving(shed) as url:
        asyncio.run(scenario(url, shed))


class _PickPolicy:
    """Grasps at the scene's ground-truth pose, then answers (what the policy sees is recorded)."""

    name = "pick"

    def __init__(self, grasp: list[list[float]]) -> None:
        self.grasp = grasp
        self.seen: list[str] = []

    async def act(self, state: EpisodeState) -> str:
        self.seen.append(json.dumps(state.messages))
        if state.turn == 0:
            call = {"name": "robot.execute_grasp", "arguments": {"grasp_pose": self.grasp}}
            return f"<think>grasp</think>\n<tool_call>{json.dumps(call)}</tool_call>"
        return "<think>done</think>\n<answer>picked</answer>"


def test_the_scene_of_a_robot_picture_never_reaches_the_policy(scene: dict[str, Any]) -> None:
    policy = _PickPolicy(scene["grasp"].tolist())
    task = Task(id="t", data_source="robot", question="Pick it up.", images=[scene["image"]])

    async def scenario(provider: ToolProvider) -> str:
        trajectory = await run_episode(
            policy, provider, EpisodeInput(task, attachments=[{"scene": scene["spec"]}])
        )
        assert trajectory.stats["images_added"] == 1 and trajectory.finish_reason == "answer"
        return json.dumps(trajectory.to_dict(), default=str)

    async def run() -> str:
        async with _shed() as shed:
            return await scenario(shed)

    recorded = asyncio.run(run())
    for text in [recorded, *policy.seen]:
        assert '"objects"' not in text and "robot_joints" not in text and '\\"objects\\"' not in text
