"""The V1 tools on a photo, answered by tiny randomly initialised models loaded from folders."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chat_server import RespondingChatServer
from spacetools.kit.definition import ToolContext, invoke_tool_method, tool_specs
from spacetools.tools.depth import DepthEstimatorTool
from spacetools.tools.grasp import GraspGeneratorTool, search_grasps
from spacetools.tools.models.depth import DepthAnythingTool, DepthProTool
from spacetools.tools.models.grasps import GraspServerTool
from spacetools.tools.models.pointing import RoboReferEndpointTool, VLMTransformersTool
from spacetools.tools.models.segmentation import Sam2ModelTool, SamModelTool
from spacetools.tools.pointcloud import SupportPlane
from spacetools.tools.pointing import RoboReferTool, VLMPointingTool
from spacetools.tools.projection import depth_to_point_cloud
from spacetools.tools.segmentation import Sam2Tool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.client import RemoteToolshed

from .conftest import photo, serving, serving_app

DEPTH_TEXT = re.compile(
    r"Estimated depth map for 64x48 image\. Focal length: [\d.]+px\. Depth range: [\d.]+m to [\d.]+m "
    r"\(mean: [\d.]+m\)\. Use \$depth_map \(numpy array, 48x64\) to reference the depth data and "
    r"\$focal_length_px \(float\) to reference the focal length\."
)
POINT_MASK_TEXT = re.compile(
    r"Segmented object at normalized coords \(0\.500, 0\.500\) with IoU score: [\d.]+\. "
    r"Use \$segmentation_mask \(boolean array, 48x64\) to reference it\."
)
POINTS_MASK_TEXT = re.compile(
    r"Segmented object using 2 normalized points with best IoU score: [\d.]+\. "
    r"Use \$segmentation_mask \(boolean array, 48x64\) to reference it\."
)


def context(*images: np.ndarray) -> ToolContext:
    return ToolContext.local(images, session_id="test")


@pytest.mark.parametrize(
    ("model_tool", "simulated"),
    [
        (DepthProTool, DepthEstimatorTool),
        (SamModelTool, Sam2Tool),
        (RoboReferEndpointTool, RoboReferTool),
        (VLMTransformersTool, VLMPointingTool),
    ],
)
def test_model_tools_have_the_simulated_tools_schemas(model_tool: type, simulated: type) -> None:
    assert model_tool.name == simulated.name
    assert tool_specs(model_tool) == tool_specs(simulated)


@pytest.mark.slow
def test_depth_pro_and_sam2_in_worker_processes_chain_on_a_photo(model_dir: Callable[[str], Path]) -> None:
    import asyncio

    deployments = [
        ToolDeployment(
            tool="spacetools.tools.models.depth:DepthProTool",
            config={"model_path": str(model_dir("depth_pro"))},
        ),
        ToolDeployment(
            tool="spacetools.tools.models.segmentation:Sam2ModelTool",
            config={"model_path": str(model_dir("sam2"))},
        ),
        ToolDeployment(tool="spacetools.tools.grasp:GraspGeneratorTool"),
    ]

    async def run() -> list[Any]:
        async with Toolshed(deployments) as shed:
            session = shed.open_session([photo()])
            depth = await session.call("depth_estimator.estimate_depth_with_pointcloud", {"image_index": 0})
            one = await session.call("sam2.segment_from_point", {"x": 0.5, "y": 0.5, "image_index": 0})
            many = await session.call(
                "sam2.segment_from_points", {"points": [[0.5, 0.5], [0.55, 0.45]], "image_index": 0}
            )
            grasp = await session.call(
                "grasp_generator.compute_grasp",
                {
                    "point_cloud": "$point_cloud",
                    "mask": "$segmentation_mask",
                    "focal_length_px": "$focal_length_px",
                    "image_index": 0,
                },
            )
            return [depth, one, many, grasp, dict(session.variables)]

    depth, one, many, grasp, variables = asyncio.run(run())
    assert not depth.is_error, depth.text
    assert depth.text.startswith("Generated 64x48 depth map and 3,072 3D points.")
    assert not one.is_error and POINT_MASK_TEXT.fullmatch(one.text), one.text
    assert not many.is_error and POINTS_MASK_TEXT.fullmatch(many.text), many.text
    assert set(variables) == {"depth_map", "point_cloud", "focal_length_px", "segmentation_mask"}
    assert re.search(r"Error: |Generated collision-free grasp", grasp.text), grasp.text
    assert "simulated scene" not in grasp.text


def test_depth_pro_focal_length_comes_from_its_fov_head_and_the_config_overrides_it(model_dir) -> None:
    tool = DepthProTool(model_path=str(model_dir("depth_pro")))
    tool.setup()
    result = tool.estimate_depth(0, ctx=context(photo()))
    assert DEPTH_TEXT.fullmatch(result.text), result.text
    assert (
        result.variables["depth_map"].shape == (48, 64) and result.variables["depth_map"].dtype == np.float32
    )
    assert result.variables["focal_length_px"] == pytest.approx(32 / math.tan(math.radians(30)), rel=1e-5)
    fixed = DepthProTool(model_path=str(model_dir("depth_pro")), focal_length_px=500.0)
    fixed.setup()
    assert fixed.estimate_depth(0, ctx=context(photo())).variables["focal_length_px"] == 500.0


def test_depth_anything_predicts_metric_depth_in_batches_with_the_configured_fov(model_dir) -> None:
    tool = DepthAnythingTool(model_path=str(model_dir("depth_anything")), batch_size=2, fov_deg=90.0)
    tool.setup()
    images = [photo(seed=seed) for seed in range(3)]
    results = tool.predict(images)
    assert [depth.shape for depth, _ in results] == [(48, 64)] * 3
    assert all(focal == pytest.approx(32.0) for _, focal in results)  # (W / 2) / tan(45°)
    assert all(np.isfinite(depth).all() and (depth >= 0).all() for depth, _ in results)
    # one image alone gives what it gave in the batch
    np.testing.assert_allclose(tool.predict(images[2:])[0][0], results[2][0], rtol=1e-4, atol=1e-5)
    mixed = tool.predict([photo(), photo(30, 40), photo()])
    assert [depth.shape for depth, _ in mixed] == [(48, 64), (30, 40), (48, 64)]
    cloud = tool.estimate_depth_with_pointcloud(0, ctx=context(images[0])).variables["point_cloud"]
    assert cloud.shape == (48 * 64, 3)


def test_sam_segments_from_points_and_an_empty_mask_is_an_error_the_model_reads(model_dir) -> None:
    tool = SamModelTool(model_path=str(model_dir("sam")))
    tool.setup()
    result = tool.segment_from_point(0.5, 0.5, 0, ctx=context(photo()))
    assert POINT_MASK_TEXT.fullmatch(result.text), result.text
    mask = result.variables["segmentation_mask"]
    assert mask.shape == (48, 64) and mask.dtype == bool and mask.any()

    import asyncio

    blind = ToolDeployment(
        tool=SamModelTool, backend="inprocess", config={"model_path": str(model_dir("sam_blind"))}
    )

    async def run() -> Any:
        async with Toolshed([blind]) as shed:
            return await shed.open_session([photo()]).call(
                "sam2.segment_from_point", {"x": 0.5, "y": 0.5, "image_index": 0}
            )

    empty = asyncio.run(run())
    assert empty.is_error
    assert empty.text == (
        "Error: the segmentation model found no object at the 1 given point(s); try a point inside the object"
    )


def test_roborefer_through_an_openai_compatible_endpoint_over_the_http_toolshed() -> None:
    import asyncio

    seen: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> str:
        seen.append(body)
        question = body["messages"][0]["content"][1]["text"]
        return "[(0.25, 0.5), (0.75, 0.5)]" if "mug" in question else "There is nothing like that."

    with RespondingChatServer(answer) as endpoint:
        deployment = ToolDeployment(
            tool="spacetools.tools.models.pointing:RoboReferEndpointTool",
            config={"base_url": endpoint.base_url, "model": "RoboRefer-8B-SFT", "point_format": "normalized"},
        )
        with serving(Toolshed([deployment])) as url:

            async def run() -> list[Any]:
                async with RemoteToolshed(url) as remote:
                    session = remote.open_session([photo()])
                    return [
                        await session.call("roborefer.detect_all", {"obj_name": "red mug", "image_index": 0}),
                        await session.call("roborefer.detect_one", {"obj_name": "red mug", "image_index": 0}),
                        await session.call("roborefer.detect_one", {"obj_name": "unicorn", "image_index": 0}),
                    ]

            every, one, missing = asyncio.run(run())
    assert every.text.startswith("Detected 2 instance(s) of 'red mug': ") and not every.is_error
    assert one.text.startswith("Detected 1 instance(s) of 'red mug': ") and not one.is_error
    assert missing.is_error and "has no normalized points: 'There is nothing like that.'" in missing.text
    image_part = seen[0]["messages"][0]["content"][0]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert seen[0]["model"] == "RoboRefer-8B-SFT" and seen[0]["temperature"] == 0.0


@pytest.mark.slow
def test_a_local_pointing_vlm_generates_and_an_answer_without_points_is_an_error(model_dir) -> None:
    tool = VLMTransformersTool(model_path=str(model_dir("qwen")), max_new_tokens=8, point_format="pixels")
    tool.setup()
    image = photo(56, 56)
    answer, seen_size = tool.generate(image, "Point to the mug")
    assert isinstance(answer, str)
    assert seen_size == (56, 56)  # Qwen2.5-VL's patch grid (4x4 of 14 px) for this image
    ctx = context(image)
    result = invoke_tool_method(tool, "vlm.detect_one", {"obj_name": "mug", "image_index": 0}, ctx)
    if result.is_error:  # a random model rarely writes a point; its answer is quoted back
        assert result.text.startswith("Error: the pointing model's answer has no pixels points: ")
    else:
        assert result.text.startswith("Detected ")


def test_a_missing_device_is_a_clear_error_at_setup(model_dir) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    tool = Sam2ModelTool(model_path=str(model_dir("sam2")), device="cuda:0")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        tool.setup()


def grasp_server_app(malformed: bool = False) -> Any:
    """A grasp server running the project's geometric search with a fixed seed (GraspGen's slot)."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/grasps")
    def grasps(body: dict[str, Any]) -> dict[str, Any]:
        if malformed:
            return {"grasps": "none today"}
        plane = SupportPlane(normal=np.asarray(body["up"]), offset=0.0)
        try:
            search = search_grasps(
                np.asarray(body["object_points"]),
                np.asarray(body["scene_points"]),
                np.random.default_rng(0),
                plane,
            )
        except RuntimeError:
            return {"grasps": [], "sampled": 0}
        best = search.best
        grasp = {"pose": best.pose.tolist(), "width": best.width, "confidence": best.confidence}
        return {"grasps": [grasp], "sampled": search.sampled, "collision_free": search.collision_free}

    return app


def box_on_a_table() -> tuple[np.ndarray, np.ndarray, float]:
    """A point cloud of a 5 cm block 10 cm in front of a flat background, its mask and focal length."""
    focal = 200.0
    depth = np.full((48, 64), 0.8, dtype=np.float32)
    mask = np.zeros((48, 64), dtype=bool)
    mask[17:31, 25:39] = True
    depth[mask] = 0.7
    return depth_to_point_cloud(depth, focal), mask, focal


def test_the_grasp_server_backend_answers_as_the_geometric_search_it_serves() -> None:
    cloud, mask, focal = box_on_a_table()
    arguments = {"point_cloud": cloud, "mask": mask, "focal_length_px": focal, "image_index": 0}
    geometric = invoke_tool_method(
        GraspGeneratorTool(), "grasp_generator.compute_grasp", arguments, context(photo())
    )
    assert geometric.text.startswith("Generated collision-free grasp"), geometric.text
    with serving_app(grasp_server_app()) as url:
        served = GraspServerTool(url=f"{url}/grasps")
        served.setup()
        remote = invoke_tool_method(served, "grasp_generator.compute_grasp", arguments, context(photo()))
    assert remote.text == geometric.text
    np.testing.assert_allclose(remote.variables["grasp_pose"], geometric.variables["grasp_pose"])
    with serving_app(grasp_server_app(malformed=True)) as url:
        broken = GraspServerTool(url=f"{url}/grasps")
        broken.setup()
        result = invoke_tool_method(broken, "grasp_generator.compute_grasp", arguments, context(photo()))
    assert result.is_error and result.text.startswith("Error: the grasp server's reply is malformed")
    unreachable = GraspServerTool(url="http://127.0.0.1:9/grasps", timeout_s=2)
    unreachable.setup()
    result = invoke_tool_method(unreachable, "grasp_generator.compute_grasp", arguments, context(photo()))
    assert result.is_error and result.text.startswith("Error: the grasp server failed: ConnectError")


def test_half_precision_weights_take_the_same_path_and_give_float_results(model_dir) -> None:
    """bfloat16 on the CPU exercises the half-precision path a GPU takes with float16 (dtype=auto)."""
    import torch

    tool = Sam2ModelTool(model_path=str(model_dir("sam2")), dtype="bfloat16")
    tool.setup()
    assert next(tool.model.parameters()).dtype == torch.bfloat16
    mask, score = tool.predict(photo(), np.array([[0.5, 0.5]]))
    assert mask.shape == (48, 64) and mask.dtype == bool and isinstance(score, float)
