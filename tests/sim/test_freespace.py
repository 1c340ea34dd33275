"""Free space and fitting on a hand-built table: an item fits right of an anchor, not left, barely in front.

The camera looks along world +y, so the camera's right is world +x and "in front of" is world -y.
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from shapely.geometry import Point

from spacetools.sim.camera import Camera
from spacetools.sim.freespace import (
    CLEARANCE_M,
    VACANT_MARGIN_M,
    compatibility,
    fits,
    placement,
    side_band,
    vacant_region,
)
from spacetools.sim.observation import SIDES, Observation
from spacetools.sim.scene import ObjectSpec, SceneSpec
from spacetools.sim.world import Scene

ANCHOR, ITEM, WALL, FRONT_WALL = 0, 1, 2, 3
ITEM_HALF = 0.03
#: Gap between the anchor's front edge and the front wall: the item (6 cm) fits with no clearance at
#: the fit grid's first offset past touching (2.5 cm), but not with `CLEARANCE_M` on both sides.
FRONT_GAP = 0.0925


def _box(
    index: int, name: str, centre_xy: tuple[float, float], half: tuple[float, float, float]
) -> ObjectSpec:
    return ObjectSpec(
        index=index,
        name=name,
        category="box",
        color=name.split()[0],
        shape="box",
        rgba=(0.8, 0.2, 0.2, 1.0),
        position=(centre_xy[0], centre_xy[1], half[2]),
        orientation=(0.0, 0.0, 0.0, 1.0),
        half_extents=half,
    )


@pytest.fixture(scope="module")
def obs() -> Observation:
    """Anchor at the origin; a wall 3 cm left of it (too narrow a gap), a wall `FRONT_GAP` in front.

    Both walls reach past the deepest placement tried, so the item cannot stand beyond them either.
    """
    objects = [
        _box(ANCHOR, "red box", (0.0, 0.0), (0.05, 0.05, 0.04)),
        _box(ITEM, "blue box", (0.3, 0.3), (ITEM_HALF, ITEM_HALF, ITEM_HALF)),
        _box(WALL, "green box", (-0.19, 0.0), (0.11, 0.12, 0.03)),
        _box(FRONT_WALL, "white box", (0.0, -0.05 - FRONT_GAP - 0.06), (0.15, 0.06, 0.02)),
    ]
    camera = Camera.look_at((0.0, -0.75, 0.55), (0.0, 0.0, 0.0), 320, 240)
    spec = SceneSpec(seed=0, objects=objects, camera=camera.to_dict())
    with Scene.from_spec(spec) as scene:
        return Observation.from_scene(scene)


def test_sides_are_seen_from_the_camera(obs: Observation) -> None:
    np.testing.assert_allclose(obs.side_direction("right of"), [1.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(obs.side_direction("behind"), [0.0, 1.0], atol=1e-9)
    with pytest.raises(ValueError, match="unknown side 'above'"):
        obs.side_direction("above")


def test_the_table_is_the_bare_top_at_z0(obs: Observation) -> None:
    heights = obs.world_points[obs.table_pixels][:, 2]
    assert obs.table_pixels.sum() > 1000 and np.all(np.abs(heights) < 0.004)
    assert not np.any(obs.table_pixels & (obs.view.segmentation >= 0))
    assert obs.table.contains(Point(0.2, 0.0)) and not obs.table.contains(Point(0.0, 2.0))


def test_an_item_fits_on_one_side_and_not_another(obs: Observation) -> None:
    assert compatibility(obs, ITEM, ANCHOR, "right of") is True
    assert compatibility(obs, ITEM, ANCHOR, "left of") is False
    assert not fits(obs, ITEM, ANCHOR, "left of", clearance=0.0)
    assert placement(obs, ITEM, ANCHOR, "left of") is None


def test_a_fit_that_needs_less_than_the_clearance_is_too_close_to_call(obs: Observation) -> None:
    assert fits(obs, ITEM, ANCHOR, "in front of", clearance=0.0)
    assert not fits(obs, ITEM, ANCHOR, "in front of", clearance=CLEARANCE_M)
    assert compatibility(obs, ITEM, ANCHOR, "in front of") is None
    assert placement(obs, ITEM, ANCHOR, "in front of") is None


def test_placement_lies_in_the_band_clear_of_obstacles(obs: Observation) -> None:
    centre = placement(obs, ITEM, ANCHOR, "right of")
    assert centre is not None and centre[2] == obs.table_height
    assert side_band(obs, ANCHOR, "right of").contains(Point(centre[:2]))
    # Closest to the anchor first: the first grid offset whose footprint clears the anchor by the clearance.
    np.testing.assert_allclose(centre[:2], [0.05 + 0.025 + ITEM_HALF, 0.0], atol=1e-3)
    outline = np.asarray(obs.footprint(ITEM).exterior.coords) - obs.centre(ITEM)
    placed = shapely.Polygon(outline + centre[:2])
    assert obs.obstacles(exclude=(ITEM,)).distance(placed) >= CLEARANCE_M - 1e-9
    assert obs.table.contains(placed)
    u, v = obs.project(centre)
    height, width = obs.table_pixels.shape
    assert obs.table_pixels[int(v * height), int(u * width)]


def test_vacant_regions_keep_away_from_objects(obs: Observation) -> None:
    left = vacant_region(obs, ANCHOR, "left of")
    assert left.is_empty or left.area < 1e-4  # the 3 cm gap minus the margins on both walls
    right = vacant_region(obs, ANCHOR, "right of")
    assert right.area > 0.01
    assert obs.obstacles().distance(right) >= VACANT_MARGIN_M - 1e-9
    mask = obs.region_mask(right)
    assert mask.any() and not np.any(mask & ~obs.table_pixels)
    points = obs.world_points[mask][:, :2]
    assert np.all(points @ obs.side_direction("right of") > 0.05)


def test_every_side_has_a_band_as_wide_as_the_anchor(obs: Observation) -> None:
    for side in SIDES:
        band = side_band(obs, ANCHOR, side)
        assert band.area == pytest.approx(0.1 * 0.15, rel=1e-6)
        assert band.touches(obs.footprint(ANCHOR)) or band.intersection(obs.footprint(ANCHOR)).area < 1e-9
