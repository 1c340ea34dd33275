"""Free table space next to an object, decided on shapely footprints in world (x, y).

Margins (metres): a region "close to" an object reaches `NEAR_DISTANCE` from its footprint; a placed
object needs `CLEARANCE` from others to count as fitting, and a fit only counts as "No" when it fails even
with zero clearance, so every compatibility answer is robust to a `CLEARANCE` error in either direction.
"""

from __future__ import annotations

import numpy as np
import shapely
from shapely.geometry import Polygon

from spacetools.bench.spatialsim.context import SceneContext

NEAR_DISTANCE = 0.15
CLEARANCE = 0.015
#: Free space is kept this far from every object so a point in it does not touch one.
VACANT_MARGIN = 0.02
#: Candidate yaw angles (degrees, about the world z axis) tried when fitting an object.
FIT_YAWS = (0.0, 45.0, 90.0, 135.0)
FIT_STEPS = 7


def side_region(ctx: SceneContext, anchor: int, side: str, reach: float = NEAR_DISTANCE) -> Polygon:
    """The band of table on one side of `anchor`: as wide as the anchor, `reach` deep from its edge."""
    direction = ctx.side_direction(side)
    lateral = np.array([-direction[1], direction[0]])
    footprint = ctx.footprint(anchor)
    coords = np.asarray(footprint.exterior.coords)
    centre = np.asarray(footprint.centroid.coords[0])
    along = (coords - centre) @ direction
    across = (coords - centre) @ lateral
    near, far = along.max(), along.max() + reach
    low, high = across.min(), across.max()
    corners = [
        centre + a * direction + b * lateral for a, b in ((near, low), (far, low), (far, high), (near, high))
    ]
    return Polygon(corners)


def vacant_region(ctx: SceneContext, anchor: int, side: str) -> Polygon:
    """Free table on a side of `anchor`: the side band inside the table, away from every object."""
    free = ctx.table.difference(ctx.obstacles().buffer(VACANT_MARGIN))
    return side_region(ctx, anchor, side).intersection(free)


def _placements(ctx: SceneContext, item: int, anchor: int, side: str) -> np.ndarray:
    """Footprints of `item` moved into the band beside `anchor`, over a grid of offsets and yaws."""
    footprint = np.asarray(ctx.footprint(item).exterior.coords)
    outline = footprint - footprint[:-1].mean(axis=0)
    band = np.asarray(side_region(ctx, anchor, side).exterior.coords)[:4]
    direction = ctx.side_direction(side)
    lateral = np.array([-direction[1], direction[0]])
    start = band[0] + 0.5 * (band[3] - band[0])  # mid-point of the edge touching the anchor
    width = float(np.linalg.norm(band[3] - band[0]))
    grid = np.stack(
        np.meshgrid(
            np.linspace(0.0, NEAR_DISTANCE, FIT_STEPS), np.linspace(-width / 2, width / 2, FIT_STEPS)
        ),
        -1,
    ).reshape(-1, 2)
    shapes = []
    for yaw in np.radians(FIT_YAWS):
        rotation = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        turned = outline @ rotation.T
        back = float(np.max(-turned @ direction))  # how far the item reaches back towards the anchor
        centres = start + (back + grid[:, :1]) * direction + grid[:, 1:] * lateral
        shapes.append(turned[None] + centres[:, None])
    return shapely.polygons(np.concatenate(shapes))


def fits(ctx: SceneContext, item: int, anchor: int, side: str, clearance: float) -> bool:
    """Whether `item` can stand on the table beside `anchor` on `side`, `clearance` away from the rest."""
    blocked = ctx.obstacles(exclude=(item,)).buffer(clearance)
    candidates = _placements(ctx, item, anchor, side)
    inside = shapely.contains(ctx.table, candidates)
    free = ~shapely.intersects(blocked, candidates)
    return bool(np.any(inside & free))


def compatibility(ctx: SceneContext, item: int, anchor: int, side: str) -> bool | None:
    """`True` if it fits with clearance, `False` if not even touching, `None` when too close to call."""
    if fits(ctx, item, anchor, side, CLEARANCE):
        return True
    if not fits(ctx, item, anchor, side, 0.0):
        return False
    return None
