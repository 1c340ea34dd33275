"""A rendered scene with its table geometry: what question generators and simulated tools both read.

An `Observation` is a scene spec, one rendered view of it and the per-object truth of that view, plus
the geometry derived from them: every pixel's world point, the bare table top (pixels and polygon),
the camera's left/right/front/behind directions on the table and object footprints. Free-space
questions on top of this live in `spacetools.sim.freespace`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import shapely
from shapely.geometry import Polygon

from spacetools.sim.camera import Camera
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.scene import ObjectSpec, SceneSpec
from spacetools.sim.world import Scene, View

TABLE_TOP_Z = 0.0
"""World height of the table top: `world` builds the table with its upper surface on the plane z = 0."""
TABLE_TOLERANCE_M = 0.004
"""A background pixel is bare table when its world height is within this of the table top (metres)."""
TABLE_HULL_SAMPLES = 4000
"""The table polygon is the hull of about this many table pixels (enough for a convex table top)."""

_T = TypeVar("_T")

SIDES = ("left of", "right of", "in front of", "behind")
"""Sides of an object as seen from the camera, on the table ("behind" is farther from the camera)."""


@dataclass
class Observation:
    """A rendered scene: its spec, the view, per-object truth (index order) and derived table geometry."""

    spec: SceneSpec
    view: View
    truths: list[ObjectTruth]
    _footprints: dict[int, Polygon] = field(default_factory=dict, repr=False, compare=False)
    _obstacles: dict[tuple[int, ...], Polygon] = field(default_factory=dict, repr=False, compare=False)
    _blocked: dict[tuple[tuple[int, ...], float], Polygon] = field(
        default_factory=dict, repr=False, compare=False
    )
    _memo: dict[Hashable, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_scene(cls, scene: Scene, camera: Camera | None = None) -> Observation:
        """Render ``scene`` (from its own camera unless one is given) and read the truth of that view."""
        view = scene.render(camera)
        return cls(spec=scene.spec, view=view, truths=scene.ground_truth(view))

    @property
    def objects(self) -> list[ObjectSpec]:
        """The scene's objects, in index order (the same order as `truths`)."""
        return self.spec.objects

    @property
    def size(self) -> tuple[int, int]:
        """Image ``(width, height)``."""
        height, width = self.view.depth.shape
        return width, height

    def nbytes(self) -> int:
        """Bytes of the arrays this observation holds once its derived pixel geometry is computed.

        `world_points` and `table_pixels` appear lazily, so a cache charging this up front stays within
        its bound whatever is asked of the observation later.
        """
        view = self.view.rgb.nbytes + self.view.depth.nbytes + self.view.segmentation.nbytes
        truths = sum(
            value.nbytes
            for truth in self.truths
            for value in vars(truth).values()
            if isinstance(value, np.ndarray)
        )
        derived = self.view.depth.size * (3 * np.dtype(np.float64).itemsize + np.dtype(np.bool_).itemsize)
        return view + truths + derived

    @cached_property
    def world_points(self) -> np.ndarray:
        """``(H, W, 3)`` world coordinates of every pixel's surface point."""
        camera = self.view.camera
        points = camera.backproject(self.view.depth).reshape(-1, 3)
        return camera.camera_to_world(points).reshape((*self.view.depth.shape, 3))

    @property
    def table_height(self) -> float:
        """World z of the table top."""
        return TABLE_TOP_Z

    @cached_property
    def table_pixels(self) -> np.ndarray:
        """``(H, W)`` bool: pixels showing the bare table top (no object, at table height)."""
        on_plane = np.abs(self.world_points[..., 2] - self.table_height) < TABLE_TOLERANCE_M
        return on_plane & (self.view.segmentation < 0) & (self.view.depth > 0)

    @cached_property
    def table(self) -> Polygon:
        """The visible table top in world (x, y): the convex hull of its pixels' points (prepared:
        placements test hundreds of footprints against it)."""
        xy = self.world_points[self.table_pixels][:, :2]
        hull = shapely.MultiPoint(xy[:: max(1, len(xy) // TABLE_HULL_SAMPLES)]).convex_hull
        shapely.prepare(hull)
        return hull

    @cached_property
    def right(self) -> np.ndarray:
        """Unit world (x, y) direction of the camera's right on the table."""
        return _unit(self.view.camera.cam_to_world[:2, 0], "left/right")

    @cached_property
    def away(self) -> np.ndarray:
        """Unit world (x, y) direction pointing away from the camera along the table."""
        return _unit(self.view.camera.cam_to_world[:2, 2], "front/behind")

    def side_direction(self, side: str) -> np.ndarray:
        """World (x, y) unit vector of a side (one of `SIDES`) as seen from the camera."""
        directions = {
            "left of": -self.right,
            "right of": self.right,
            "in front of": -self.away,
            "behind": self.away,
        }
        if side not in directions:
            raise ValueError(f"unknown side {side!r}; expected one of {list(SIDES)}")
        return directions[side]

    def centre(self, index: int) -> np.ndarray:
        """An object's 3D box centre in world (x, y)."""
        centre: np.ndarray = self.truths[index].obb_corners_world[:, :2].mean(axis=0)
        return centre

    def footprint(self, index: int) -> Polygon:
        """An object's footprint on the table: the hull of its 3D box corners in world (x, y)."""
        if index not in self._footprints:
            corners = self.truths[index].obb_corners_world[:, :2]
            self._footprints[index] = shapely.MultiPoint(corners).convex_hull
        return self._footprints[index]

    def obstacles(self, exclude: tuple[int, ...] = ()) -> Polygon:
        """The union of all object footprints except `exclude` (cached: fitting asks for it repeatedly)."""
        if exclude not in self._obstacles:
            footprints = [self.footprint(t.index) for t in self.truths if t.index not in exclude]
            self._obstacles[exclude] = shapely.union_all(footprints)
        return self._obstacles[exclude]

    def blocked(self, exclude: tuple[int, ...], clearance: float) -> Polygon:
        """`obstacles` grown by `clearance` (cached and prepared: placements test hundreds of footprints)."""
        key = (exclude, clearance)
        if key not in self._blocked:
            grown = self.obstacles(exclude).buffer(clearance)
            shapely.prepare(grown)
            self._blocked[key] = grown
        return self._blocked[key]

    def memo(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """`compute()` once per `key` for this observation: free-space geometry built on it (side bands,
        fits) is asked for again and again while a question searches its pairs and sides."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: _T = self._memo[key]
        return value

    def region_mask(self, region: Polygon) -> np.ndarray:
        """``(H, W)`` bool: bare table pixels whose world point lies inside `region`."""
        mask = np.zeros(self.table_pixels.shape, dtype=bool)
        if region.is_empty:
            return mask
        points = self.world_points[self.table_pixels]
        mask[self.table_pixels] = shapely.contains_xy(region, points[:, 0], points[:, 1])
        return mask

    def project(self, point_world: np.ndarray) -> np.ndarray:
        """The normalized image point ``(2,)`` of a world point."""
        camera = self.view.camera
        pixels = camera.project(camera.world_to_camera(np.asarray(point_world, dtype=float)[None]))
        normalized: np.ndarray = camera.normalize(pixels)[0]
        return normalized


def _unit(vector: np.ndarray, what: str) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    if norm < 1e-6:
        raise ValueError(f"the camera looks straight down or level; {what} on the table is undefined")
    return np.asarray(vector, dtype=float) / norm
