"""Free table space beside an object and whether (and where) another object fits there.

Everything is decided on shapely footprints in world (x, y) over an `Observation`. The margins, in
metres, used by both the question generator and the simulated pointing tools:

- `NEAR_DISTANCE_M`: a side band "close to" an object reaches this far from its footprint's edge; a
  placement beside it starts its footprint within this distance of that edge.
- `VACANT_MARGIN_M`: vacant space keeps this distance from every object, so a point in it touches none.
- `CLEARANCE_M`: a placed object needs this much room from every other one to count as fitting. A fit
  only counts as impossible when it fails even with zero clearance, so every decided compatibility
  answer survives a `CLEARANCE_M` error in either direction (in between is too close to call).
"""

from __future__ import annotations

import numpy as np
import shapely
from shapely.geometry import Polygon
from shapely.geometry.base import BaseGeometry

from spacetools.sim.observation import Observation

NEAR_DISTANCE_M = 0.15
VACANT_MARGIN_M = 0.02
CLEARANCE_M = 0.015
FIT_YAWS_DEG = (0.0, 45.0, 90.0, 135.0)
"""Yaw angles (about the world z axis) tried when placing an object."""
FIT_STEPS = 7
"""Placements tried per yaw along each axis of the band (depth and width)."""
_FIT_DEPTHS = np.linspace(0.0, NEAR_DISTANCE_M, FIT_STEPS)
"""The gaps from the anchor tried, metres."""
_PAIR_SPAN_M = 10.0
"""Larger than any table, metres: the half-plane beyond a pair of objects is a polygon this large."""


def side_band(obs: Observation, anchor: int, side: str, reach: float = NEAR_DISTANCE_M) -> Polygon:
    """The band on one side of `anchor`: as wide as the anchor, `reach` deep from its edge."""
    return obs.memo(("side_band", anchor, side, reach), lambda: _side_band(obs, anchor, side, reach))


def _side_band(obs: Observation, anchor: int, side: str, reach: float) -> Polygon:
    direction = obs.side_direction(side)
    lateral = np.array([-direction[1], direction[0]])
    footprint = obs.footprint(anchor)
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


def pair_band(
    obs: Observation, first: int, second: int, side: str, reach: float = NEAR_DISTANCE_M
) -> BaseGeometry:
    """The band on one side of a pair of objects beyond both ("left of the two mugs"): their two side
    bands, cut to what lies past the outer edge of both on that side."""
    direction = obs.side_direction(side)
    lateral = np.array([-direction[1], direction[0]])
    edge = max(
        float(np.max(np.asarray(obs.footprint(i).exterior.coords) @ direction)) for i in (first, second)
    )
    # The half-plane past that edge, as a polygon larger than any table.
    corners = [(edge, -_PAIR_SPAN_M), (edge, _PAIR_SPAN_M), (edge + _PAIR_SPAN_M, _PAIR_SPAN_M),
               (edge + _PAIR_SPAN_M, -_PAIR_SPAN_M)]  # fmt: skip
    beyond = Polygon([along * direction + across * lateral for along, across in corners])
    bands = side_band(obs, first, side, reach).union(side_band(obs, second, side, reach))
    return bands.intersection(beyond)


def free_table(obs: Observation) -> Polygon:
    """The visible table top away from every object (by `VACANT_MARGIN_M`)."""
    return obs.table.difference(obs.obstacles().buffer(VACANT_MARGIN_M))


def vacant_region(obs: Observation, anchor: int, side: str) -> Polygon:
    """Free table on a side of `anchor`: its side band inside the table, away from every object."""
    return side_band(obs, anchor, side).intersection(free_table(obs))


def vacant_ring(obs: Observation, anchor: int) -> Polygon:
    """Free table close to `anchor` on any side: within `NEAR_DISTANCE_M` of its footprint."""
    return obs.footprint(anchor).buffer(NEAR_DISTANCE_M).intersection(free_table(obs))


_MIDDLE_ROWS = slice(FIT_STEPS * (FIT_STEPS // 2), FIT_STEPS * (FIT_STEPS // 2 + 1))
"""The grid's placements across the middle of the band, at every gap: where there is room at all, one of
these has it about 19 times in 20."""


def _candidates(
    obs: Observation, item: int, anchor: int, side: str, rows: slice = slice(None)
) -> tuple[np.ndarray, np.ndarray]:
    """Footprints of `item` moved into the band beside `anchor` over a grid of offsets (`rows` of it)
    and yaws.

    Returns the shapely polygons and each one's ``(gap, lateral offset)`` from the anchor: how far its
    near edge is from the anchor's edge and how far its centre is from the band's middle line.
    """
    start, direction, across, offsets = obs.memo(
        ("band grid", anchor, side), lambda: _band_grid(obs, anchor, side)
    )
    across, offsets = across[rows], offsets[rows]
    turned = obs.memo(("turned outlines", item), lambda: _turned_outlines(obs, item))
    # How far each turned item reaches back towards the anchor: its centre sits that far plus the gap out.
    backs = obs.memo(("backs", item, side), lambda: np.array([np.max(-t @ direction) for t in turned]))
    centres = start + (backs[:, None, None] + offsets[None, :, :1]) * direction + across
    shapes = turned[:, None] + centres[:, :, None]
    return shapely.polygons(shapes.reshape(-1, *turned.shape[1:])), np.tile(offsets, (len(FIT_YAWS_DEG), 1))


def _band_grid(
    obs: Observation, anchor: int, side: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where candidates beside `anchor` go: the middle of the band's edge touching the anchor, the side's
    direction, each grid point's lateral displacement and the grid's ``(gap, lateral offset)`` rows."""
    band = np.asarray(side_band(obs, anchor, side).exterior.coords)[:4]
    direction = obs.side_direction(side)
    lateral = np.array([-direction[1], direction[0]])
    start = band[0] + 0.5 * (band[3] - band[0])  # mid-point of the edge touching the anchor
    width = float(np.linalg.norm(band[3] - band[0]))
    # Rows (depth, across) with depth varying fastest, as np.meshgrid(depths, acrosses) orders them.
    grid = np.stack(
        [
            np.tile(_FIT_DEPTHS, FIT_STEPS),
            np.repeat(np.linspace(-width / 2, width / 2, FIT_STEPS), FIT_STEPS),
        ],
        -1,
    )
    return start, direction, grid[:, 1:] * lateral, grid


def _turned_outlines(obs: Observation, item: int) -> np.ndarray:
    """``(yaws, vertices, 2)``: the closed outline of `item`'s footprint about its centre, turned by each
    of `FIT_YAWS_DEG`."""
    footprint = np.asarray(obs.footprint(item).exterior.coords)
    outline = footprint - footprint[:-1].mean(axis=0)
    turned = []
    for yaw in np.radians(FIT_YAWS_DEG):
        rotation = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        turned.append(outline @ rotation.T)
    return np.stack(turned)


def _clear(obs: Observation, item: int, candidates: np.ndarray, clearance: float) -> np.ndarray:
    """Which candidates stay `clearance` away from every object but `item` (the one being placed)."""
    clear: np.ndarray = ~shapely.intersects(obs.blocked((item,), clearance), candidates)
    return clear


def _fitting(
    obs: Observation, item: int, anchor: int, side: str, clearance: float
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate placements of `item` on the table and `clearance` away from every other object."""
    candidates, offsets = _candidates(obs, item, anchor, side)
    ok = shapely.contains(obs.table, candidates) & _clear(obs, item, candidates, clearance)
    return candidates[ok], offsets[ok]


def fits(obs: Observation, item: int, anchor: int, side: str, clearance: float = CLEARANCE_M) -> bool:
    """Whether `item` can stand on the table beside `anchor` on `side`, `clearance` away from the rest."""
    return len(_fitting(obs, item, anchor, side, clearance)[0]) > 0


def compatibility(obs: Observation, item: int, anchor: int, side: str) -> bool | None:
    """`True` if it fits with clearance, `False` if not even touching, `None` when too close to call."""
    return obs.memo(("compatibility", item, anchor, side), lambda: _compatibility(obs, item, anchor, side))


def _compatibility(obs: Observation, item: int, anchor: int, side: str) -> bool | None:
    # Most items fit: a few placements usually show it (the same tests on the same footprints as below),
    # which spares building and testing all of them while a question searches for a "No".
    likely, _ = _candidates(obs, item, anchor, side, _MIDDLE_ROWS)
    if np.any(shapely.contains(obs.table, likely) & _clear(obs, item, likely, CLEARANCE_M)):
        return True
    candidates, _ = _candidates(obs, item, anchor, side)
    on_table = candidates[shapely.contains(obs.table, candidates)]  # only these are tested for room
    if np.any(_clear(obs, item, on_table, CLEARANCE_M)):
        return True
    if not np.any(_clear(obs, item, on_table, 0.0)):
        return False
    return None


def placement(obs: Observation, item: int, anchor: int, side: str) -> np.ndarray | None:
    """World ``(x, y, z)`` of the footprint centre of `item` placed beside `anchor` on `side`, or None.

    A placement exists exactly when `fits` with `CLEARANCE_M`; of the fitting ones this is the closest
    to the anchor, then the closest to the middle of its side (what "left of the B" reads as).
    """
    shapes, offsets = _fitting(obs, item, anchor, side, CLEARANCE_M)
    if not len(shapes):
        return None
    best = int(np.lexsort((np.abs(offsets[:, 1]), offsets[:, 0]))[0])
    x, y = shapely.centroid(shapes[best]).coords[0]
    return np.array([x, y, obs.table_height])


def best_placement(obs: Observation, item: int, anchor: int, side: str) -> np.ndarray:
    """World ``(x, y, z)`` of the best spot for `item` beside `anchor` on `side`, whether it fits or not.

    `placement` when the item fits; otherwise the candidate that overlaps the other objects and
    overhangs the table least (then the closest one), as a pointing model that is asked for a spot
    always answers one.
    """
    found = placement(obs, item, anchor, side)
    if found is not None:
        return found
    candidates, offsets = _candidates(obs, item, anchor, side)
    blocked = obs.obstacles(exclude=(item,))
    conflict = shapely.area(shapely.intersection(candidates, blocked)) + shapely.area(
        shapely.difference(candidates, obs.table)
    )
    best = int(np.lexsort((np.abs(offsets[:, 1]), offsets[:, 0], np.round(conflict, 6)))[0])
    x, y = shapely.centroid(candidates[best]).coords[0]
    return np.array([x, y, obs.table_height])
