"""What every question family sees of a scene: the rendered view, per-object truth and the table geometry."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import shapely
from shapely.geometry import Polygon

from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.scene import SceneSpec
from spacetools.sim.world import View

#: An object is asked about only if this much of it is visible and its mask has this many pixels.
MIN_VISIBLE_FRACTION = 0.6
MIN_MASK_PIXELS = 150
#: A pixel belongs to the table top when its world height is within this of the table height (metres).
TABLE_HEIGHT_TOLERANCE = 0.004

SIDES = ("left of", "right of", "in front of", "behind")


@dataclass
class SceneContext:
    """A rendered scene with the derived geometry that the question families share."""

    spec: SceneSpec
    view: View
    truths: list[ObjectTruth]
    _footprints: dict[int, Polygon] = field(default_factory=dict)
    _obstacles: dict[tuple[int, ...], Polygon] = field(default_factory=dict)

    @cached_property
    def visible(self) -> list[ObjectTruth]:
        """Objects seen well enough to ask about, in index order."""
        return [
            t
            for t in self.truths
            if t.visible_fraction >= MIN_VISIBLE_FRACTION and int(t.mask.sum()) >= MIN_MASK_PIXELS
        ]

    def referable(self) -> list[ObjectTruth]:
        """Visible objects whose name is unique in the scene, so the name alone refers to them."""
        counts: dict[str, int] = {}
        for truth in self.truths:
            counts[truth.name] = counts.get(truth.name, 0) + 1
        return [t for t in self.visible if counts[t.name] == 1]

    @cached_property
    def world_points(self) -> np.ndarray:
        """(H, W, 3) world coordinates of every pixel's surface point."""
        camera = self.view.camera
        points = camera.backproject(self.view.depth).reshape(-1, 3)
        return camera.camera_to_world(points).reshape((*self.view.depth.shape, 3))

    @cached_property
    def table_height(self) -> float:
        """World z of the table top: settled objects rest on it, so their bottoms give it."""
        return float(np.median([t.obb_corners_world[:, 2].min() for t in self.truths]))

    @cached_property
    def table_pixels(self) -> np.ndarray:
        """(H, W) bool: pixels showing the bare table top (no object, at table height)."""
        on_plane = np.abs(self.world_points[..., 2] - self.table_height) < TABLE_HEIGHT_TOLERANCE
        return on_plane & (self.view.segmentation < 0) & (self.view.depth > 0)

    @cached_property
    def table(self) -> Polygon:
        """The visible table top in world (x, y): the convex hull of its pixels' points."""
        xy = self.world_points[self.table_pixels][:, :2]
        return shapely.MultiPoint(xy[:: max(1, len(xy) // 4000)]).convex_hull

    @cached_property
    def right(self) -> np.ndarray:
        """Unit world (x, y) direction of the camera's right on the table."""
        return _unit(self.view.camera.cam_to_world[:2, 0])

    @cached_property
    def away(self) -> np.ndarray:
        """Unit world (x, y) direction pointing away from the camera along the table."""
        return _unit(self.view.camera.cam_to_world[:2, 2])

    def side_direction(self, side: str) -> np.ndarray:
        """World (x, y) unit vector of a side as seen from the camera ("behind" is farther away)."""
        return {
            "left of": -self.right,
            "right of": self.right,
            "in front of": -self.away,
            "behind": self.away,
        }[side]

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

    def region_mask(self, region: Polygon) -> np.ndarray:
        """(H, W) bool: bare table pixels whose world point lies inside `region`."""
        mask = np.zeros(self.table_pixels.shape, dtype=bool)
        if region.is_empty:
            return mask
        points = self.world_points[self.table_pixels]
        mask[self.table_pixels] = shapely.contains_xy(region, points[:, 0], points[:, 1])
        return mask


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    if norm < 1e-6:
        raise ValueError("the camera looks straight down; left/right on the table is undefined")
    return np.asarray(vector, dtype=float) / norm
