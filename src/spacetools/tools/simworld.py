"""The simulated world behind an image: rebuild the scene of `image_index` and render what it shows.

A conversation image from SpatialSim carries its scene spec JSON in its attachment (``"scene"``), and
the realism profile is a setting of the tools' deployment (``config["profile"]``, default ``exact``).
Simulated perception tools rebuild
that scene in pybullet, render it at the image's size and read the truth from the render. Building
and rendering costs about half a second, so each tool instance keeps a small LRU cache of
observations keyed by the spec's hash and the image size.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ValidationError

from spacetools.sim.observation import Observation
from spacetools.sim.scene import SceneSpec
from spacetools.sim.world import Scene
from spacetools.tools.definition import Tool, ToolContext, ToolError
from spacetools.tools.realism import Profile, get_profile

DEFAULT_CACHE_SIZE = 8


class SceneCache:
    """A small LRU cache of observations keyed by (spec hash, image size)."""

    def __init__(self, max_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.max_size = max_size
        self._entries: OrderedDict[tuple[str, int, int], Observation] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def observe(self, spec_json: str, width: int, height: int) -> Observation:
        """The observation of a scene spec rendered at ``width`` x ``height`` (cached)."""
        key = (hashlib.sha256(spec_json.encode()).hexdigest(), width, height)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        observation = render_observation(parse_spec(spec_json), width, height)
        self._entries[key] = observation
        if len(self._entries) > self.max_size:
            self._entries.popitem(last=False)
        return observation


def parse_spec(spec_json: str) -> SceneSpec:
    """A SceneSpec from its JSON, with a clear error for anything else."""
    try:
        return SceneSpec.model_validate_json(spec_json)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        raise ToolError(f"the image's scene spec is not valid: {where}: {first['msg']}") from None


def render_observation(spec: SceneSpec, width: int, height: int) -> Observation:
    """Rebuild ``spec`` (no physics), render its camera at the given size and compute the truth."""
    camera = spec.get_camera()
    if (camera.width, camera.height) != (width, height):
        camera = camera.resized(width, height)
    with Scene.from_spec(spec) as scene:
        return Observation.from_scene(scene, camera)


def scene_of(ctx: ToolContext, image_index: int) -> str:
    """The scene spec JSON attached to an image; a `ToolError` when it has no simulated scene."""
    scene = ctx.attachment(image_index).get("scene")
    if not isinstance(scene, str):
        raise ToolError(
            f"image {image_index} has no simulated scene: simulated tools need a SpatialSim sample or scene"
        )
    return scene


class SimulatedTool(Tool):
    """Base of the perception tools backed by the simulated world (pointing, segmentation, depth)."""

    config_keys: ClassVar[frozenset[str]] = frozenset({"profile", "cache_size"})

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self._scenes = SceneCache(int(config.get("cache_size", DEFAULT_CACHE_SIZE)))
        self._profile = get_profile(str(config.get("profile", "exact")))

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """The profile must be one of `PROFILES` (a `ValueError` lists them)."""
        get_profile(str(config.get("profile", "exact")))

    def observe(self, ctx: ToolContext, image_index: int) -> Observation:
        """The simulated scene behind image ``image_index`` of the conversation."""
        spec_json = scene_of(ctx, image_index)
        height, width = ctx.image_size(image_index)
        return self._scenes.observe(spec_json, width, height)

    @property
    def profile(self) -> Profile:
        """The realism profile of this deployment."""
        return self._profile
