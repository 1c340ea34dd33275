"""The simulated tools render at a bounded size, answer in the image's own frame and cache within bytes.

A 4096x3072 photo is rendered at `max_render_pixels` (here 320x240, the default is 1 Mpx); its masks
and depth come back at 4096x3072 and its points in normalized coordinates, the same answers as for a
320x240 photo of the scene. The observation cache is bounded in bytes and forgets closed sessions.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import numpy as np
import pytest
from tests.tools.conftest import RenderedScene

from spacetools.kit.definition import ToolContext, ToolResult, invoke_tool_method, tool_method
from spacetools.sim.observation import Observation
from spacetools.tools.depth import DepthEstimatorTool
from spacetools.tools.pointing import RoboReferTool
from spacetools.tools.segmentation import Sam2Tool
from spacetools.tools.simworld import (
    DEFAULT_MAX_RENDER_PIXELS,
    SceneCache,
    SimulatedTool,
    parse_spec,
    render_observation,
    render_size,
)
from spacetools.tools.vision_ops import VisionOpsTool
from spacetools.toolshed import ToolDeployment, Toolshed

SMALL = (240, 320)  # (height, width): the render bound of these tests, and the small photo
LARGE = (3072, 4096)  # 12.8 times larger on each side
BOUND = SMALL[0] * SMALL[1]


def context(scene: RenderedScene, size: tuple[int, int], session_id: str = "test") -> ToolContext:
    image = np.zeros((*size, 3), np.uint8)
    return ToolContext(session_id, {0: image}, [size], [{"scene": scene.spec_json}], np.random.default_rng(0))


def call(tool: object, name: str, ctx: ToolContext, **kwargs: object) -> ToolResult:
    result = invoke_tool_method(tool, name, kwargs, ctx)  # type: ignore[arg-type]
    assert not result.is_error, result.text
    return result


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [
        (640, 480, (640, 480)),  # within the bound: the image's own size
        (4096, 4096, (1024, 1024)),
        (4096, 3072, (1182, 886)),
        (16_000_000, 1, (DEFAULT_MAX_RENDER_PIXELS, 1)),  # a degenerate strip still fits the bound
        (1, 16_000_000, (1, DEFAULT_MAX_RENDER_PIXELS)),
    ],
)
def test_render_size_keeps_the_aspect_within_the_bound(
    width: int, height: int, expected: tuple[int, int]
) -> None:
    size = render_size(width, height, DEFAULT_MAX_RENDER_PIXELS)
    assert size == expected
    assert size[0] * size[1] <= DEFAULT_MAX_RENDER_PIXELS


def test_a_large_photo_renders_at_the_bound_and_answers_in_its_own_frame(scene: RenderedScene) -> None:
    roborefer, sam2 = RoboReferTool(max_render_pixels=BOUND), Sam2Tool(max_render_pixels=BOUND)
    depth_tool, ops = DepthEstimatorTool(max_render_pixels=BOUND), VisionOpsTool()
    small, large = context(scene, SMALL), context(scene, LARGE)
    assert sam2.observe(large, 0).size == (320, 240)

    target = scene.referable()[0].name
    points = [
        call(roborefer, "roborefer.detect_one", ctx, obj_name=target, image_index=0) for ctx in (small, large)
    ]
    assert points[0].value == points[1].value
    x, y = points[0].value["points"][0]

    masks = [
        call(sam2, "sam2.segment_from_point", ctx, x=x, y=y, image_index=0).variables["segmentation_mask"]
        for ctx in (small, large)
    ]
    assert masks[1].shape == LARGE
    # Each small pixel is the large pixel at its centre; the areas scale with 12.8 squared.
    rows = ((np.arange(SMALL[0]) + 0.5) * 12.8).astype(int)
    cols = ((np.arange(SMALL[1]) + 0.5) * 12.8).astype(int)
    np.testing.assert_array_equal(masks[1][rows[:, None], cols[None, :]], masks[0])
    assert masks[1].sum() == pytest.approx(masks[0].sum() * 12.8**2, rel=0.02)
    assert masks[1][int(y * LARGE[0]), int(x * LARGE[1])]

    estimates = [
        call(depth_tool, "depth_estimator.estimate_depth", ctx, image_index=0) for ctx in (small, large)
    ]
    assert estimates[1].images[0].shape[0] == SMALL[0]  # the picture for people is drawn at the bound too
    depths = [estimate.variables for estimate in estimates]
    assert depths[1]["depth_map"].shape == LARGE
    assert depths[1]["focal_length_px"] == pytest.approx(depths[0]["focal_length_px"] * 12.8)
    lifted = [
        call(
            ops,
            "vision_ops.project_2d_points_to_3d",
            ctx,
            points_2d=[[x, y]],
            depth=found["depth_map"],
            focal_length_px=found["focal_length_px"],
        ).value["points"][0]
        for ctx, found in zip((small, large), depths, strict=True)
    ]
    # The same 3D point, up to where in its pixel the ray passes (a 320-pixel-wide pixel is 12.8 large ones).
    np.testing.assert_allclose(lifted[1], lifted[0], atol=0.01)


def test_the_cache_holds_within_its_bytes_and_charges_derived_geometry(scenes: list[RenderedScene]) -> None:
    one = render_observation(parse_spec(scenes[0].spec_json), 160, 120).nbytes()
    cache = SceneCache(max_bytes=int(2.5 * one))
    for rendered in (*scenes, scenes[0]):
        observation = cache.observe(rendered.spec_json, 160, 120, "s")
        assert observation.size == (160, 120)
        observation.world_points, observation.table_pixels  # noqa: B018  # the derived geometry appears
        assert _held_bytes(observation) == observation.nbytes()
        assert cache.nbytes <= cache.max_bytes
        assert len(cache) <= 2
    assert len(cache) == 2
    tiny = SceneCache(max_bytes=one // 2)
    assert tiny.observe(scenes[0].spec_json, 160, 120, "s").size == (160, 120)
    assert len(tiny) == 0 and tiny.nbytes == 0  # too large to keep: answered, not cached


def test_a_released_session_drops_the_observations_only_it_used(scenes: list[RenderedScene]) -> None:
    sam2 = Sam2Tool(max_render_pixels=160 * 120)
    for session, rendered in (("a", scenes[0]), ("b", scenes[0]), ("b", scenes[1])):
        call(sam2, "sam2.segment_from_point", context(rendered, SMALL, session), x=0.5, y=0.5, image_index=0)
    assert len(sam2._scenes) == 2
    sam2.release_session("a")
    assert len(sam2._scenes) == 2  # scene 0 is still b's
    sam2.release_session("b")
    assert len(sam2._scenes) == 0 and sam2._scenes.nbytes == 0


class CacheReportingSam2(Sam2Tool):
    """sam2 that can say how many observations it holds (to watch the Toolshed release them)."""

    name: ClassVar[str] = "sam2"

    @tool_method
    def cached(self) -> ToolResult:
        """How many observations this instance holds."""
        return ToolResult(text=str(len(self._scenes)), value=len(self._scenes))


def test_closing_a_session_in_the_toolshed_empties_a_workers_cache(scenes: list[RenderedScene]) -> None:
    deployment = ToolDeployment(
        tool=CacheReportingSam2, backend="process", config={"max_render_pixels": 160 * 120}
    )

    async def scenario() -> None:
        async with Toolshed([deployment]) as shed:
            image = np.zeros((*SMALL, 3), np.uint8)
            first = shed.open_session([image], [{"scene": scenes[0].spec_json}])
            await first.call("sam2.segment_from_point", {"x": 0.5, "y": 0.5, "image_index": 0})
            assert (await first.call("sam2.cached")).value == 1
            first.close()
            other = shed.open_session([image])
            assert (await other.call("sam2.cached")).value == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"max_render_pixels": 10}, "max_render_pixels: Input should be greater than or equal to 4096"),
        ({"cache_mb": -1}, "cache_mb: Input should be greater than or equal to 0"),
        ({"cache_mb": float("inf")}, "cache_mb: Input should be a finite number"),
        ({"profile": "noisy"}, "unknown profile 'noisy'"),
    ],
)
def test_bad_settings_are_refused_in_one_line(setting: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        SimulatedTool.check_config(setting)
    assert "\n" not in str(error.value)


def _held_bytes(observation: Observation) -> int:
    """Bytes of every array an observation holds now."""
    arrays = [observation.view.rgb, observation.view.depth, observation.view.segmentation]
    arrays += [observation.world_points, observation.table_pixels]
    arrays += [v for truth in observation.truths for v in vars(truth).values() if isinstance(v, np.ndarray)]
    return sum(array.nbytes for array in arrays)
