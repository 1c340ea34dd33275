"""Compatibility ("can the A fit left of the B?"): measure the free table at the spot the pointer proposes.

RoboRefer proposes the best spot for the A beside the B (it always answers a point, fitting or not). The
expert fits both objects' 3D boxes, lays the A's footprint (the hull of its box corners on the table
plane) on the spot at the yaws a placement tries, and reads the point cloud over and around those
footprints in one batch of ``project_2d_points_to_3d`` calls. Readings above the table that are not the
A itself mark objects where they stand (a rectangle around each group of touching readings); a footprint
corner that is out of the image or whose ray passes below the table plane is off the table. The A fits
when at some yaw its footprint keeps `CLEARANCE_M` from every object, does not overlap the B's box, and
all its corners are on the table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import shapely
from shapely import affinity
from shapely.geometry import MultiPoint, Polygon

from spacetools.agent.policies.scripted.measure import (
    DEPTH_WITH_CLOUD,
    Box3D,
    Point,
    Vector,
    detect,
    dot,
    first_point,
    locate,
    object_box,
    unit,
)
from spacetools.agent.policies.scripted.questions import COMPATIBILITY_RE, group, match, relation, side_words
from spacetools.agent.policies.scripted.replay import Answer, Call, ToolReplay
from spacetools.agent.types import Task
from spacetools.rewards.formats import format_point, format_points, format_yes_no

FIT_YAWS_DEG = (0.0, 45.0, 90.0, 135.0)
"""Turns of the A's footprint tried at the spot (a placement may turn the object)."""
CLEARANCE_M = 0.008
"""Room kept between the footprint and any object's outline. A placement that fits keeps 1.5 cm from
every object's footprint (the hull of its box); one that does not may just touch one."""
SAMPLE_MARGIN_M = 0.05
"""How far around the footprints the table is read (an obstacle's edge lies beyond its readings)."""
SAMPLE_SPACING_M = 0.01
"""The finest spacing of the readings; coarser for large footprints so that a batch stays bounded."""
MAX_SAMPLES = 360
"""Readings over and around the footprints (corners come on top)."""
POINTS_PER_CALL = 60
"""Points per ``project_2d_points_to_3d`` call, so that each result's text stays short."""
CORNER_REACH_M = 0.01
"""Corners are read this far beyond the footprint: the visible table is the hull of what the camera
sees of it, a little inside the edge a single reading finds (a fit that needs the last centimetre of
table is too close to call)."""
TABLE_SEARCH_M = 0.03
"""Readings within this height of the B's bottom face are used to find the table plane's height."""
ON_TABLE_M = 0.008
"""A reading within this height of the table plane is bare table."""
BOX_TOLERANCE_M = 0.01
"""A reading this close to the A's box is the A itself (it is the one being moved)."""


def placement_phrase(rel: str, anchor: str, item: str) -> str:
    """The pointing request for a spot beside ``anchor`` where ``item`` fits."""
    return f"free space {side_words(rel)} the {anchor} where the {item} can be placed"


def inside_box(box: Box3D, x: Sequence[float], tolerance: float = BOX_TOLERANCE_M) -> bool:
    """Whether a camera-frame point lies in a box (grown by `tolerance`)."""
    c = box.corners_3d
    for k in (1, 3, 4):
        axis = [c[k][i] - c[0][i] for i in range(3)]
        length = math.sqrt(dot(axis, axis)) or 1e-9
        along = dot([x[i] - c[0][i] for i in range(3)], axis) / length
        if not -tolerance <= along <= length + tolerance:
            return False
    return True


@dataclass(frozen=True)
class Camera:
    """The pinhole camera of the depth result (principal point at the image centre)."""

    focal: float
    width: int
    height: int

    def ray(self, point: Point) -> Vector:
        """The camera-frame direction through a normalized image point."""
        return ((point[0] - 0.5) * self.width / self.focal, (point[1] - 0.5) * self.height / self.focal, 1.0)

    def project(self, x: Vector) -> Point | None:
        """The normalized image point of a camera-frame point, None when it is not in view."""
        if x[2] <= 0:
            return None
        u, v = 0.5 + self.focal * x[0] / (x[2] * self.width), 0.5 + self.focal * x[1] / (x[2] * self.height)
        return (u, v) if 0.0 <= u <= 1.0 and 0.0 <= v <= 1.0 else None


@dataclass(frozen=True)
class TablePlane:
    """The table plane through the spot: 2D coordinates on it (metres, the spot at the origin)."""

    origin: Vector
    up: Vector
    e1: Vector
    e2: Vector

    @classmethod
    def at_spot(cls, spot: Point, anchor: Box3D, camera: Camera) -> TablePlane | None:
        """The plane of the B's bottom face, with its origin where the ray through the spot meets it."""
        up = anchor.up
        floor = [sum(c[k] for c in anchor.corners_3d[:4]) / 4 for k in range(3)]
        ray = camera.ray(spot)
        along = dot(ray, up)
        if abs(along) < 1e-9 or dot(floor, up) / along <= 0:
            return None
        origin = unit(ray)
        scale = dot(floor, up) / dot(origin, up)
        helper = (1.0, 0.0, 0.0) if abs(up[0]) < 0.9 else (0.0, 0.0, 1.0)
        e1 = unit([helper[i] - dot(helper, up) * up[i] for i in range(3)])
        e2 = (up[1] * e1[2] - up[2] * e1[1], up[2] * e1[0] - up[0] * e1[2], up[0] * e1[1] - up[1] * e1[0])
        return cls((origin[0] * scale, origin[1] * scale, origin[2] * scale), up, e1, e2)

    def flat(self, x: Sequence[float]) -> tuple[float, float]:
        """A camera-frame point's place on the plane (dropped along the table normal)."""
        d = [x[i] - self.origin[i] for i in range(3)]
        return (dot(d, self.e1), dot(d, self.e2))

    def rise(self, x: Sequence[float]) -> float:
        """A camera-frame point's height above the plane."""
        return dot([x[i] - self.origin[i] for i in range(3)], self.up)

    def lift(self, p: Sequence[float]) -> Vector:
        """The camera-frame point of a place on the plane."""
        x, y, z = (self.origin[i] + p[0] * self.e1[i] + p[1] * self.e2[i] for i in range(3))
        return (x, y, z)


def footprints(item: Box3D, plane: TablePlane) -> list[Polygon]:
    """The A's footprint (hull of its box corners on the plane) centred on the spot, at each yaw."""
    hull = MultiPoint([plane.flat(c) for c in item.corners_3d]).convex_hull
    centred = affinity.translate(hull, -hull.centroid.x, -hull.centroid.y)
    return [affinity.rotate(centred, yaw, origin=(0, 0)) for yaw in FIT_YAWS_DEG]


def sample_places(shapes: Sequence[Polygon]) -> tuple[list[tuple[float, float]], float]:
    """A grid of places over the footprints and `SAMPLE_MARGIN_M` around them (at most `MAX_SAMPLES`),
    and its spacing."""
    region = shapely.union_all([shape.buffer(SAMPLE_MARGIN_M) for shape in shapes])
    x0, y0, x1, y1 = region.bounds
    spacing = max(SAMPLE_SPACING_M, math.sqrt(region.area / MAX_SAMPLES))
    while True:
        xs = [x0 + spacing * (k + 0.5) for k in range(int((x1 - x0) / spacing) + 1)]
        ys = [y0 + spacing * (k + 0.5) for k in range(int((y1 - y0) / spacing) + 1)]
        grid = [(x, y) for y in ys for x in xs if region.contains(shapely.Point(x, y))]
        if len(grid) <= MAX_SAMPLES:
            return grid, spacing
        spacing *= 1.1


def reaching_corners(shape: Polygon) -> list[tuple[float, float]]:
    """The footprint's corners moved `CORNER_REACH_M` away from its centre."""
    cx, cy = shape.centroid.x, shape.centroid.y
    corners = []
    for x, y in list(shape.exterior.coords)[:-1]:
        length = math.hypot(x - cx, y - cy) or 1.0
        stretch = 1.0 + CORNER_REACH_M / length
        corners.append((cx + (x - cx) * stretch, cy + (y - cy) * stretch))
    return corners


@dataclass
class Occupancy:
    """What the readings say: obstacle places on the plane and the corners found off the table."""

    obstacles: list[tuple[float, float]]
    off_table: set[tuple[float, float]]


def read_occupancy(
    plane: TablePlane,
    places: Sequence[tuple[float, float]],
    readings: Sequence[Vector | None],
    item: Box3D,
) -> Occupancy:
    """Classify each reading as bare table, an obstacle (where it stands) or beyond the table's edge.

    The table's height is re-measured as the median of the readings near the plane, since the B's box
    bottom is fitted to the points the camera sees and may sit a little above the table.
    """
    near = [plane.rise(x) for x in readings if x is not None and abs(plane.rise(x)) < TABLE_SEARCH_M]
    level = statistics.median(near) if near else 0.0
    occupancy = Occupancy([], set())
    for place, seen in zip(places, readings, strict=True):
        if seen is None:
            occupancy.off_table.add(place)  # out of the image: not visible table
            continue
        rise = plane.rise(seen) - level
        if rise < -ON_TABLE_M:
            occupancy.off_table.add(place)  # the ray passes the table's edge
        elif rise > ON_TABLE_M and not inside_box(item, seen):
            occupancy.obstacles.append(plane.flat(seen))  # an object stands there (the A is moved)
    return occupancy


def outlines(points: Sequence[tuple[float, float]], spacing: float) -> list[Polygon]:
    """Each object's outline on the plane: the smallest rotated rectangle around a group of obstacle
    readings that touch (closer than two sample spacings), as its fitted box would stand.

    An object's footprint is its box, which reaches beyond the surface the camera sees (a ball's box
    corners, a toy's limbs); a rectangle around its readings comes closer to that than the readings.
    """
    if not points:
        return []
    dots = [shapely.Point(p) for p in points]
    groups = shapely.union_all([dot.buffer(spacing) for dot in dots])
    parts = list(getattr(groups, "geoms", [groups]))
    return [
        MultiPoint([dot for dot in dots if part.contains(dot)]).minimum_rotated_rectangle.buffer(1e-6)
        for part in parts
    ]


def clear(
    shape: Polygon,
    corners: Sequence[tuple[float, float]],
    off_table: set[tuple[float, float]],
    taken: Polygon,
) -> bool:
    """Whether a footprint is on the table and `CLEARANCE_M` away from everything that stands there."""
    if any(corner in off_table for corner in corners):
        return False
    return not shape.buffer(CLEARANCE_M).intersects(taken)


def _read_batch(replay: ToolReplay, thought: str, pixels: Sequence[Point]) -> list[Vector | None]:
    """The 3D points at ``pixels`` in one turn of ``project_2d_points_to_3d`` calls (None where one failed)."""
    chunks = [pixels[k : k + POINTS_PER_CALL] for k in range(0, len(pixels), POINTS_PER_CALL)]
    calls: list[Call] = [
        (
            "vision_ops.project_2d_points_to_3d",
            {
                "points_2d": format_points(chunk, 4),
                "depth": "$point_cloud",
                "focal_length_px": "$focal_length_px",
            },
        )
        for chunk in chunks
    ]
    readings: list[Vector | None] = []
    for chunk, outcome in zip(chunks, replay.call(thought, *calls), strict=True):
        points = outcome.get("points")
        if isinstance(points, list) and len(points) == len(chunk):
            readings.extend(_vector(p) for p in points)
        else:
            readings.extend([None] * len(chunk))  # no reading: the table there counts as unseen
    return readings


def _vector(p: object) -> Vector | None:
    if isinstance(p, list) and len(p) == 3 and all(isinstance(v, (int, float)) for v in p):
        x, y, z = (float(v) for v in p)
        return (x, y, z) if all(math.isfinite(v) for v in (x, y, z)) else None
    return None


def plan_compatibility(task: Task, replay: ToolReplay) -> Answer:
    """Yes/no "can the A fit <side> the B?": measure the free space at the spot the pointer proposes."""
    found = match(COMPATIBILITY_RE, task.question, "compatibility")
    item, anchor, rel = group(found, "a", "a2"), group(found, "b"), relation(found)
    phrase = placement_phrase(rel, anchor, item)
    (p_item, p_anchor), (proposed, depth) = locate(
        replay, [item, anchor], [detect(phrase), DEPTH_WITH_CLOUD], reserve=4
    )
    spot = first_point(proposed)
    if p_item is None or p_anchor is None or spot is None or depth.is_error:
        return Answer("No", f"I could not find the {item}, the {anchor} and a spot beside it.", True)
    item_box = object_box(replay, item, p_item, reserve=3)
    anchor_box = object_box(replay, anchor, p_anchor, reserve=1) if item_box is not None else None
    focal, width, height = depth.get("focal_length_px"), depth.get("width"), depth.get("height")
    camera = Camera(float(focal), int(width), int(height)) if focal and width and height else None
    plane = (
        TablePlane.at_spot(spot, anchor_box, camera)
        if item_box and anchor_box and camera and replay.turns_left >= 1
        else None
    )
    if plane is None or item_box is None or anchor_box is None or camera is None:
        return Answer("No", f"I could not measure the space {side_words(rel)} the {anchor}.", True)
    shapes = footprints(item_box, plane)
    corners = [reaching_corners(shape) for shape in shapes]
    grid, spacing = sample_places(shapes)
    places = grid + [corner for group_ in corners for corner in group_]
    pixels = [camera.project(plane.lift(place)) for place in places]
    seen = [(place, pixel) for place, pixel in zip(places, pixels, strict=True) if pixel is not None]
    size = shapes[0].bounds
    thought = (
        f"The {item}'s footprint spans {size[2] - size[0]:.3f} x {size[3] - size[1]:.3f} m (from its box); I "
        f"read the 3D points over it, turned {len(FIT_YAWS_DEG)} ways, around the spot {format_point(spot)}."
    )
    readings = iter(_read_batch(replay, thought, [pixel for _, pixel in seen]) if seen else [])
    by_place = {place: next(readings) for place, _ in seen}
    occupancy = read_occupancy(plane, places, [by_place.get(place) for place in places], item_box)
    objects = outlines(occupancy.obstacles, spacing)
    anchor_shape = MultiPoint([plane.flat(c) for c in anchor_box.corners_3d]).convex_hull
    taken = shapely.union_all(objects)
    fitting = [
        yaw
        for yaw, shape, shape_corners in zip(FIT_YAWS_DEG, shapes, corners, strict=True)
        if not shape.intersects(anchor_shape) and clear(shape, shape_corners, occupancy.off_table, taken)
    ]
    fits = bool(fitting)
    detail = (
        f"turned {fitting[0]:.0f} degrees it stays on the table, clear of everything"
        if fits
        else f"at every turn it meets one of {len(objects)} objects standing there, the {anchor} "
        "or the table's edge"
    )
    return Answer(
        format_yes_no(fits),
        f"Around the spot {detail}: the {item} {'fits' if fits else 'does not fit'} {rel} the {anchor}.",
    )
