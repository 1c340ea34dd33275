"""The verl adapter with verl's own classes against a live Toolshed server (`make test-verl`).

Runs in `.venv-verl` (verl 0.9.1 and its transformers pin); elsewhere it is skipped, unless
SPACETOOLS_REQUIRE_VERL is set (as `make test-verl` does), when a missing verl fails it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

if not os.environ.get("SPACETOOLS_REQUIRE_VERL"):
    pytest.importorskip("verl.tools.base_tool", reason="verl runs in .venv-verl: `make test-verl`")

import verl
from hydra import compose, initialize_config_dir
from PIL import Image
from verl.experimental.agent_loop.tool_agent_loop import AgentData
from verl.tools.tool_registry import initialize_tools_from_config
from verl.trainer.ppo.reward import get_custom_reward_fn

from spacetools.integrations.verl.export import export_verl
from spacetools.integrations.verl.tool import ToolshedTool
from spacetools.kit import imagecodec
from spacetools.sim.camera import Camera
from spacetools.sim.layout import build_scene
from spacetools.toolshed import Toolshed

SCENE_SEED = 5


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """`spacetools serve` (exact tools) in its own process on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "spacetools.cli.main",
        "serve",
        "--port",
        str(port),
        "--profile",
        "exact",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Toolshed server did not start: {process.stderr.read().decode()}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def scene() -> tuple[Image.Image, str, float]:
    """A simulated scene's image, its spec JSON and the true depth at the image centre."""
    with build_scene(SCENE_SEED) as world:
        view = world.render()
        camera: Camera = view.camera
        depth = float(view.depth[camera.height // 2, camera.width // 2])
        return Image.fromarray(view.rgb), world.spec.model_dump_json(), depth


def open_sessions(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=10).json()["sessions"]["open"])


def test_exported_tools_build_with_verls_registry(server_url: str, tmp_path: Path) -> None:
    exported = export_verl("v1", server_url, tmp_path)
    tools = initialize_tools_from_config(str(exported.tool_config))
    assert all(isinstance(tool, ToolshedTool) for tool in tools)
    assert [tool.name for tool in tools] == [spec.name for spec in Toolshed("v1").specs()]
    assert {tool.url for tool in tools} == {server_url}


def test_a_trajectory_keeps_its_session_across_verls_per_call_lifecycle(
    server_url: str, tmp_path: Path, scene: tuple[Image.Image, str, float]
) -> None:
    image, spec_json, true_depth = scene
    tools = {
        tool.name: tool
        for tool in initialize_tools_from_config(str(export_verl("v1", server_url, tmp_path).tool_config))
    }
    create_kwargs = {"attachments": [{"scene": spec_json}], "seed": 1}
    # verl's trajectory state; the list stands for verl's reference to it.
    trajectories = [
        AgentData(
            messages=[],
            image_data=[image],
            video_data=None,
            audio_data=None,
            mm_processor_kwargs=None,
            metrics={},
            request_id="trajectory-1",
            tools_kwargs={name: {"create_kwargs": create_kwargs} for name in tools},
        )
    ]

    async def call(agent_data: AgentData, name: str, arguments: dict[str, object]) -> str:
        # What verl 0.9's ToolAgentLoop._call_tool does for a BaseTool: create, execute, release.
        tool = tools[name]
        instance_id, _ = await tool.create(create_kwargs=agent_data.tools_kwargs[name]["create_kwargs"])
        try:
            response, reward, metrics = await tool.execute(instance_id, arguments, agent_data=agent_data)
        finally:
            await tool.release(instance_id)
        assert reward == 0.0 and not metrics["is_error"], response.text
        return response.text

    async def episode(agent_data: AgentData) -> list[str]:
        texts = [
            await call(agent_data, "depth_estimator.estimate_depth", {"image_index": 0}),
            # A variable of the first call, read by a later one: the session outlived the released instance.
            await call(agent_data, "vision_ops.index_at", {"data": "$depth_map", "u": 0.5, "v": 0.5}),
        ]
        assert open_sessions(server_url) == 1
        return texts

    loop = asyncio.new_event_loop()
    try:
        depth_text, value_text = loop.run_until_complete(episode(trajectories[0]))
        assert "depth" in depth_text.lower()
        assert float(value_text.split(" is ")[-1].split()[0].rstrip("m")) == pytest.approx(
            true_depth, abs=1e-3
        )
        # verl drops the trajectory: its session is released on the server.
        trajectories.clear()
        gc.collect()
        loop.run_until_complete(asyncio.sleep(0.5))
        assert open_sessions(server_url) == 0
    finally:
        loop.close()


def test_an_instance_that_lives_for_the_episode_releases_its_session(
    server_url: str, tmp_path: Path, scene: tuple[Image.Image, str, float]
) -> None:
    image, spec_json, _ = scene
    (tool,) = [
        tool
        for tool in initialize_tools_from_config(str(export_verl("v1", server_url, tmp_path).tool_config))
        if tool.name == "roborefer.detect_one"
    ]
    data_url = imagecodec.to_data_url(np.asarray(image))

    async def episode() -> tuple[str, str, int]:
        instance_id, _ = await tool.create(
            "episode-7", create_kwargs={"images": [data_url], "attachments": [{"scene": spec_json}]}
        )
        name = json.loads(spec_json)["objects"][0]["name"]
        found, _, _ = await tool.execute(instance_id, {"obj_name": name, "image_index": 0})
        missing, _, metrics = await tool.execute(instance_id, {"obj_name": name, "image_index": 3})
        assert metrics["is_error"]
        open_before = open_sessions(server_url)
        await tool.release(instance_id)
        await asyncio.sleep(0.5)
        return found.text, missing.text, open_before

    found, missing, open_before = asyncio.run(episode())
    assert found.startswith("Detected 1 instance")
    assert missing.startswith("Error:")
    assert open_before == 1 and open_sessions(server_url) == 0


def test_exported_settings_load_in_verls_config_system(tmp_path: Path) -> None:
    exported = export_verl("v1", "http://127.0.0.1:8765", tmp_path)
    overrides = exported.overrides.read_text().split()
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    assert multi_turn.enable is True and multi_turn.max_assistant_turns == 8
    assert multi_turn.max_tool_response_length == 2048 and multi_turn.format == "hermes"
    assert multi_turn.tool_config_path == str(exported.tool_config)
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"
    # verl loads the reward function from the file the settings name, and it scores.
    reward_fn = get_custom_reward_fn(config)
    score = reward_fn("spatialsim_blinkdepth", "<answer>(B)</answer>", "(B)", {"choices": ["a", "b"]})
    assert score["score"] == 1.0
