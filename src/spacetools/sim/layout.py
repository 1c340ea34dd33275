"""Building a new seeded tabletop scene: sample a camera and objects, drop them, let physics settle.

The settled poses are recorded in a `SceneSpec`, and the scene is rebuilt from it, so a fresh build
and a loaded scene are the very same world.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.spatial.transform import Rotation

from spacetools.sim.bodies import add_table, collision_box, connect, create_body
from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera
from spacetools.sim.catalogue import ObjectChoice, object_names, sample_choice
from spacetools.sim.scene import ObjectSpec, SceneSpec, Vec3
from spacetools.sim.visualbox import visual_box
from spacetools.sim.world import Scene

PLACEMENT_REGION = ((-0.26, 0.26), (-0.2, 0.2))
"""Where object centres may be dropped, (x range, y range) in metres: in view of every sampled camera."""
MIN_GAP = 0.012
DROP_HEIGHT = 0.003
SETTLE_STEPS = 240
PENETRATION_TOLERANCE = 0.004
SETTLE_ROUNDS = 6
MAX_OBJECTS = 10


def sample_camera(rng: np.random.Generator, width: int = 640, height: int = 480) -> Camera:
    """A viewpoint in front of the table looking down at it: 0.7-1.1 m away, 35-60 degrees elevation."""
    distance = rng.uniform(0.7, 1.1)
    elevation = np.radians(rng.uniform(35.0, 60.0))
    azimuth = np.radians(-90.0 + rng.uniform(-15.0, 15.0))  # -90 degrees: the camera stands at -y
    target = np.array([rng.uniform(-0.04, 0.04), rng.uniform(-0.04, 0.04), 0.0])
    direction = np.array(
        [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)]
    )
    return Camera.look_at(target + distance * direction, target, width, height, fov_deg=60.0)


@dataclass
class _Placed:
    """An object being placed: its box as seen (for the spec) and its collision box (for placement)."""

    choice: ObjectChoice
    body: int
    half_extents: Vec3
    box_offset: Vec3
    collision_half_extents: Vec3
    collision_offset: Vec3


def _sample_choices(
    rng: np.random.Generator, count: int, taken: set[tuple[str, str | None, str | None]]
) -> list[ObjectChoice]:
    choices: list[ObjectChoice] = []
    while len(choices) < count:
        choice = sample_choice(rng)
        if choice.descriptor not in taken:
            taken.add(choice.descriptor)
            choices.append(choice)
    return choices


def _drop(
    client: int, rng: np.random.Generator, placed: _Placed, others: list[tuple[NDArray[np.float64], float]]
) -> tuple[NDArray[np.float64], float] | None:
    """Put `placed` at a free spot just above the table, or return None if no spot is found."""
    half, offset = np.asarray(placed.collision_half_extents), np.asarray(placed.collision_offset)
    height = half[2] - offset[2] + DROP_HEIGHT
    if pybullet.getDynamicsInfo(placed.body, -1, physicsClientId=client)[0] == 0.0:
        # A static body (mass 0, like the tray) never falls, so it is set down with its visible bottom
        # on the table rather than dropped from just above it.
        height = placed.half_extents[2] - placed.box_offset[2]
    radius = float(np.hypot(half[0], half[1]))  # upright at any yaw, the box stays inside this circle
    (x_low, x_high), (y_low, y_high) = PLACEMENT_REGION
    for _ in range(200):
        centre = np.array([rng.uniform(x_low, x_high), rng.uniform(y_low, y_high)])
        yaw = rng.uniform(-np.pi, np.pi)
        if all(np.linalg.norm(centre - c) >= radius + r + MIN_GAP for c, r in others):
            rotation = Rotation.from_euler("z", yaw)
            shift = rotation.apply(offset)
            position = (centre[0] - shift[0], centre[1] - shift[1], height)
            pybullet.resetBasePositionAndOrientation(
                placed.body, position, rotation.as_quat(), physicsClientId=client
            )
            return centre, radius
    return None


def _new_object(client: int, choice: ObjectChoice) -> _Placed:
    """Create the body of a catalogue draw and measure its boxes in its own frame."""
    body = create_body(
        client,
        choice.kind.shape,
        choice.asset,
        choice.kind.scale,
        choice.half_extents or (0.01, 0.01, 0.01),
        choice.rgba,
    )
    if choice.half_extents is not None:  # a primitive is exactly as large as it was made
        centred = (0.0, 0.0, 0.0)
        return _Placed(choice, body, choice.half_extents, centred, choice.half_extents, centred)
    key = (choice.asset or "", choice.kind.scale)
    if key not in _VISUAL_BOXES:  # an asset's meshes at one scale always give the same box
        _VISUAL_BOXES[key] = visual_box(client, body)
    return _Placed(choice, body, *_VISUAL_BOXES[key], *collision_box(client, body))


#: Visual boxes measured so far in this process, by (asset, scale).
_VISUAL_BOXES: dict[tuple[str, float], tuple[Vec3, Vec3]] = {}


def _footprint(client: int, item: _Placed) -> tuple[NDArray[np.float64], float]:
    """Centre (x, y) of an object's box on the table and the radius of a circle around it."""
    position, orientation = pybullet.getBasePositionAndOrientation(item.body, physicsClientId=client)
    centre = np.asarray(position) + Rotation.from_quat(orientation).apply(item.collision_offset)
    return centre[:2], float(np.linalg.norm(item.collision_half_extents))


def _is_settled_badly(client: int, placed: _Placed, earlier: list[_Placed]) -> bool:
    """True when an object fell off the table or sinks into an object placed before it."""
    position, _ = pybullet.getBasePositionAndOrientation(placed.body, physicsClientId=client)
    (x_low, x_high), (y_low, y_high) = PLACEMENT_REGION
    if position[2] < -0.01 or not (
        x_low - 0.1 <= position[0] <= x_high + 0.1 and y_low - 0.1 <= position[1] <= y_high + 0.1
    ):
        return True
    for other in earlier:
        points = pybullet.getClosestPoints(placed.body, other.body, 0.0, physicsClientId=client)
        if any(point[8] < -PENETRATION_TOLERANCE for point in points):
            return True
    return False


def build_scene(
    seed: int,
    n_objects: int | None = None,
    with_robot: bool = False,
    width: int = 640,
    height: int = 480,
    allow_duplicates: bool = False,
) -> Scene:
    """Build a seeded tabletop scene: `n_objects` (3 to 10 at random when None) settled objects.

    Names are unique within the scene. With `allow_duplicates`, one object is placed twice with the same
    descriptor (kind, colour, size), so two objects deliberately share a name.
    """
    rng = np.random.default_rng(seed)
    count = int(rng.integers(3, MAX_OBJECTS + 1)) if n_objects is None else n_objects
    if not 1 <= count <= MAX_OBJECTS:
        raise ValueError(f"n_objects must be between 1 and {MAX_OBJECTS}, got {count}")
    if allow_duplicates and count < 2:
        raise ValueError("allow_duplicates needs at least 2 objects")
    camera = sample_camera(rng, width, height)
    pending = _sample_choices(rng, count - 1 if allow_duplicates else count, set())
    if allow_duplicates:
        pending.append(pending[int(rng.integers(len(pending)))])
    client = connect()
    try:
        add_table(client)
        placed: list[_Placed] = []
        for _ in range(SETTLE_ROUNDS):
            footprints = [_footprint(client, item) for item in placed]
            unplaced = 0
            for choice in pending:
                item = _new_object(client, choice)
                spot = _drop(client, rng, item, footprints)
                if spot is None:
                    pybullet.removeBody(item.body, physicsClientId=client)
                    unplaced += 1
                    continue
                footprints.append(spot)
                placed.append(item)
            for _ in range(SETTLE_STEPS):
                pybullet.stepSimulation(physicsClientId=client)
            kept: list[_Placed] = []
            rejected: list[_Placed] = []
            for item in placed:
                (rejected if _is_settled_badly(client, item, kept) else kept).append(item)
            for item in rejected:
                pybullet.removeBody(item.body, physicsClientId=client)
            placed = kept
            # A rejected object is dropped again elsewhere; one that found no room is swapped for
            # another draw.
            pending = [item.choice for item in rejected]
            taken = {item.choice.descriptor for item in placed} | {choice.descriptor for choice in pending}
            pending += _sample_choices(rng, unplaced, taken)
            if not pending:
                break
        else:
            raise RuntimeError(f"could not settle {count} objects on the table for seed {seed}")
        spec = _record_spec(client, seed, placed, camera, with_robot)
    finally:
        pybullet.disconnect(client)
    # Rebuilding from the recorded poses makes a fresh build and a loaded scene the very same world.
    return Scene.from_spec(spec)


def _record_spec(
    client: int, seed: int, placed: list[_Placed], camera: Camera, with_robot: bool
) -> SceneSpec:
    names = object_names([item.choice.descriptor for item in placed])
    objects = []
    for index, (item, name) in enumerate(zip(placed, names, strict=True)):
        position, orientation = pybullet.getBasePositionAndOrientation(item.body, physicsClientId=client)
        choice = item.choice
        objects.append(
            ObjectSpec(
                index=index,
                name=name,
                category=choice.kind.category,
                color=choice.color,
                size_label=choice.size_label,  # type: ignore[arg-type]
                shape=choice.kind.shape,
                asset=choice.asset,
                scale=choice.kind.scale,
                rgba=choice.rgba,
                position=(float(position[0]), float(position[1]), float(position[2])),
                orientation=tuple(float(q) for q in orientation),  # type: ignore[arg-type]
                half_extents=item.half_extents,
                box_offset=item.box_offset,
            )
        )
    return SceneSpec(seed=seed, objects=objects, camera=camera.to_dict(), with_robot=with_robot)
