"""The simulated world behind an image: rebuild the scene of `image_index` and render what it shows.

A conversation image from SpatialSim carries its scene spec JSON in its attachment (``"scene"``).
Simulated perception tools rebuild that scene in pybullet, render it and read the truth from the
render. Three deployment settings (``config``) shape them:

- ``profile``: the realism profile (default ``exact``);
- ``max_render_pixels``: the render is at the image's size up to this many pixels, and at the same
  aspect ratio scaled down past it (as SAM 2 and Depth Pro run at about 1 Mpx whatever the photo's
  size), so one 16 Mpx image costs what a 1 Mpx one does. Answers are in normalized coordinates, and
  the per-pixel arrays a tool returns (masks, depth) are mapped back to the image's size;
- ``cache_mb``: building and rendering costs about 150 ms, so each tool instance keeps the
  observations it uses, least recently used out first, within this many megabytes. An entry is
  dropped as soon as every session that used it has closed (`SimulatedTool.release_session`). The
  renders are shared with the machine's other simulated tools through a `RenderStore` (its files
  within this many megabytes too, dropped the same way), so a scene is rendered once for all tools.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spacetools.kit.definition import Tool, ToolContext, ToolError
from spacetools.sim.camera import Camera
from spacetools.sim.groundtruth import compute_ground_truth
from spacetools.sim.observation import Observation
from spacetools.sim.realism import Profile, get_profile
from spacetools.sim.scene import SceneSpec
from spacetools.sim.world import Scene, View
from spacetools.tools.renderstore import RenderStore

DEFAULT_MAX_RENDER_PIXELS = 1024 * 1024
MIN_RENDER_PIXELS = 64 * 64
DEFAULT_CACHE_MB = 256.0


class SimulationSettings(BaseModel):
    """The deployment settings of a simulated tool (other keys are the Toolshed's to judge)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    profile: str = "exact"
    max_render_pixels: int = Field(DEFAULT_MAX_RENDER_PIXELS, ge=MIN_RENDER_PIXELS)
    cache_mb: float = Field(DEFAULT_CACHE_MB, ge=0, allow_inf_nan=False)

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> SimulationSettings:
        """The settings in a deployment config; a one-line `ValueError` naming a bad one."""
        try:
            settings = cls.model_validate(dict(config))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"{where}: {first['msg']} (got {first['input']!r})") from None
        get_profile(settings.profile)  # a ValueError listing the profiles
        return settings


def render_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """``(width, height)`` of the render for an image: its own size, or scaled down to ``max_pixels``."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    render_height = max(1, min(int(height * scale), max_pixels))
    return max(1, min(int(width * scale), max_pixels // render_height)), render_height


def resample_nearest(array: np.ndarray, height: int, width: int) -> np.ndarray:
    """A per-pixel array at another size (a render's at the image's): each pixel takes the one at its centre.

    Nearest rather than interpolated, so no depth between an object and the table and no half-true mask.
    """
    if array.shape[:2] == (height, width):
        return array
    rows = ((np.arange(height) + 0.5) * array.shape[0] / height).astype(np.intp)
    cols = ((np.arange(width) + 0.5) * array.shape[1] / width).astype(np.intp)
    resampled: np.ndarray = array[rows[:, None], cols[None, :]]
    return resampled


def _store_key(key: tuple[str, int, int]) -> str:
    digest, width, height = key
    return f"{digest[:32]}-{width}x{height}"


@dataclass
class _Entry:
    observation: Observation
    nbytes: int
    sessions: set[str] = field(default_factory=set)


class SceneCache:
    """Observations keyed by (spec hash, render size): least recently used out first, bounded in bytes.

    An entry is charged its full size up front (`Observation.nbytes`, which counts the geometry it
    derives later), so the cache never holds more than ``max_bytes``; an observation larger than that
    is returned without being kept. Each entry remembers the sessions that used it and goes when the
    last of them is released. Without ``with_truths`` the observations carry no per-object truth (an
    empty `Observation.truths`), for tools that read only the render.
    """

    def __init__(self, max_bytes: int, store: RenderStore | None = None, *, with_truths: bool = True) -> None:
        self.max_bytes = max_bytes
        self.store = store
        self.with_truths = with_truths
        self._entries: OrderedDict[tuple[str, int, int], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes charged for the observations held."""
        return sum(entry.nbytes for entry in self._entries.values())

    def observe(self, spec_json: str, width: int, height: int, session_id: str) -> Observation:
        """The observation of a scene spec rendered at ``width`` x ``height`` (cached for `session_id`)."""
        key = (hashlib.sha256(spec_json.encode()).hexdigest(), width, height)
        entry = self._entries.get(key)
        if entry is None:
            observation = self._render(spec_json, key, session_id)
            entry = _Entry(observation, observation.nbytes())
            if entry.nbytes > self.max_bytes:
                return observation
            while self.nbytes + entry.nbytes > self.max_bytes:
                self._entries.popitem(last=False)
            self._entries[key] = entry
        else:
            self._entries.move_to_end(key)
            if self.store is not None and session_id not in entry.sessions:
                self.store.mark(_store_key(key), session_id)
        entry.sessions.add(session_id)
        return entry.observation

    def _render(self, spec_json: str, key: tuple[str, int, int], session_id: str) -> Observation:
        """The observation from the shared store when another tool rendered it, else rendered (and shared)."""
        spec = parse_spec(spec_json)
        camera = render_camera(spec, key[1], key[2])
        if self.store is None:
            view = render_view(spec, camera)
        else:
            store_key = _store_key(key)
            # Tools asking for the scene at the same moment wait here for one render, then read it.
            with self.store.rendering(store_key, key[1] * key[2]):
                stored = self.store.load(store_key, camera, session_id)
                if stored is None:
                    stored = render_view(spec, camera)
                    self.store.save(store_key, stored, session_id)
            view = stored
        truths = compute_ground_truth(spec, view) if self.with_truths else []
        return Observation(spec=spec, view=view, truths=truths)

    def release(self, session_id: str) -> None:
        """Forget a closed session; drop the observations no open session used (and its shared renders)."""
        if self.store is not None:
            self.store.release(session_id)
        for key, entry in list(self._entries.items()):
            entry.sessions.discard(session_id)
            if not entry.sessions:
                del self._entries[key]


def parse_spec(spec_json: str) -> SceneSpec:
    """A SceneSpec from its JSON, with a clear error for anything else."""
    try:
        return SceneSpec.model_validate_json(spec_json)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        raise ToolError(f"the image's scene spec is not valid: {where}: {first['msg']}") from None


def render_camera(spec: SceneSpec, width: int, height: int) -> Camera:
    """The spec's camera at the render size."""
    camera = spec.get_camera()
    return camera if (camera.width, camera.height) == (width, height) else camera.resized(width, height)


def render_view(spec: SceneSpec, camera: Camera) -> View:
    """Rebuild ``spec`` (no physics) and render it from ``camera``.

    The tools read depth, segmentation and object geometry, never the render's colours (the image is the
    conversation's): a shadowless render costs about half a shadowed one.
    """
    with Scene.from_spec(spec) as scene:
        return scene.render(camera, shadow=False)


def render_observation(spec: SceneSpec, width: int, height: int) -> Observation:
    """Rebuild ``spec``, render its camera at the given size and compute the truth a tool may read (how
    much of an object is hidden is not measured: no tool reads it)."""
    view = render_view(spec, render_camera(spec, width, height))
    return Observation(spec=spec, view=view, truths=compute_ground_truth(spec, view))


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

    config_keys: ClassVar[frozenset[str]] = frozenset(SimulationSettings.model_fields)
    reads_truth: ClassVar[bool] = True
    """Whether the tool reads the objects' truth (boxes, masks): a depth model or a segmenter reads only
    the render (depth, segmentation, table), and skips computing it for each scene."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.simulation = SimulationSettings.of(config)
        cache_bytes = int(self.simulation.cache_mb * 2**20)
        self._scenes = SceneCache(cache_bytes, RenderStore(cache_bytes), with_truths=self.reads_truth)
        self._profile = get_profile(self.simulation.profile)

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """The profile must be one of `PROFILES`, the render bound and cache size numbers in range."""
        SimulationSettings.of(config)

    def observe(self, ctx: ToolContext, image_index: int) -> Observation:
        """The simulated scene behind image ``image_index``, rendered at most `max_render_pixels` large."""
        spec_json = scene_of(ctx, image_index)
        height, width = ctx.image_size(image_index)
        render_width, render_height = render_size(width, height, self.simulation.max_render_pixels)
        return self._scenes.observe(spec_json, render_width, render_height, ctx.session_id)

    def release_session(self, session_id: str) -> None:
        """Drop the cached observations only this closed session used."""
        self._scenes.release(session_id)

    @property
    def profile(self) -> Profile:
        """The realism profile of this deployment."""
        return self._profile
