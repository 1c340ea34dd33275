"""The simulated tabletop: seeded scene building in pybullet (DIRECT), rendering and saving."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
from numpy.typing import ArrayLike, NDArray
from PIL import Image
from scipy.spatial.transform import Rotation

from spacetools.sim.bullet import pybullet, pybullet_data
from spacetools.sim.camera import Camera
from spacetools.sim.catalogue import ObjectChoice, object_names, sample_choice
from spacetools.sim.groundtruth import ObjectTruth, compute_ground_truth, oriented_box
from spacetools.sim.scene import ObjectSpec, Rgba, SceneSpec, Vec3
from spacetools.sim.visualbox import visual_box

TABLE_HALF_EXTENTS = (0.5, 0.5, 0.025)
"""The table top (its upper surface is the world plane z = 0)."""
TABLE_HEIGHT = 0.75
PLACEMENT_REGION = ((-0.26, 0.26), (-0.2, 0.2))
"""Where object centres may be dropped, (x range, y range) in metres: in view of every sampled camera."""
MIN_GAP = 0.012
DROP_HEIGHT = 0.003
SETTLE_STEPS = 240
TIMESTEP = 1.0 / 240.0
PENETRATION_TOLERANCE = 0.004
SETTLE_ROUNDS = 6
MAX_OBJECTS = 10
LIGHT_DIRECTION = (0.4, -0.6, 1.0)
ROBOT_ASSET = "franka_panda/panda.urdf"
ROBOT_BASE = (0.0, 0.45, 0.0)
ROBOT_NEUTRAL_JOINTS = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04, 0.04)
VISIBILITY_MAX_WIDTH = 160
"""Visible fractions are measured on renders at most this wide (they are ratios, so coarse is enough)."""

_HIDDEN_POSITION = (0.0, 0.0, -50.0)
_TABLE_COLOR = (0.62, 0.47, 0.33, 1.0)
_FLOOR_COLOR = (0.55, 0.55, 0.58, 1.0)


@dataclass
class View:
    """One rendered camera view."""

    rgb: NDArray[np.uint8]
    depth: NDArray[np.float32]
    segmentation: NDArray[np.int32]
    camera: Camera

    def point_cloud(self, mask: ArrayLike | None = None) -> NDArray[np.float32]:
        """Camera-frame points (N, 3) of the pixels in `mask` (all pixels with a surface when None)."""
        valid = self.depth < self.camera.far * 0.999  # pixels that saw nothing sit at the far plane
        if mask is not None:
            mask_array = np.asarray(mask, dtype=bool)
            if mask_array.shape != self.depth.shape:
                raise ValueError(f"mask shape {mask_array.shape} does not match the view {self.depth.shape}")
            valid &= mask_array
        return self.camera.backproject(self.depth)[valid]


class Scene:
    """A live pybullet world (one DIRECT client): a table, the objects of a SceneSpec and maybe a robot.

    Build one with `build_scene` (seeded, settles physics) or `Scene.from_spec` (exact poses, no physics);
    close it with `close()` or use it as a context manager.
    """

    def __init__(
        self, spec: SceneSpec, client: int, table_body: int, object_bodies: list[int], robot_body: int | None
    ) -> None:
        self._spec = spec
        self._client = client
        self._table_body = table_body
        self._object_bodies = object_bodies
        self._robot_body = robot_body
        self._camera = spec.get_camera()
        # Disconnects even when a caller forgets close(): each DIRECT client holds its own world in memory.
        self._finalizer = weakref.finalize(self, pybullet.disconnect, client)

    @classmethod
    def from_spec(cls, spec: SceneSpec) -> Scene:
        """Rebuild a scene exactly: every object at its recorded pose, without stepping physics."""
        client = _connect()
        try:
            table = _add_table(client)
            bodies = []
            for obj in spec.objects:
                body = _create_body(client, obj.shape, obj.asset, obj.scale, obj.half_extents, obj.rgba)
                pybullet.resetBasePositionAndOrientation(
                    body, obj.position, obj.orientation, physicsClientId=client
                )
                bodies.append(body)
            robot = _add_robot(client) if spec.with_robot else None
        except BaseException:
            pybullet.disconnect(client)
            raise
        return cls(spec, client, table, bodies, robot)

    @property
    def spec(self) -> SceneSpec:
        """The scene's description (objects with their settled poses, the default camera)."""
        return self._spec

    @property
    def camera(self) -> Camera:
        """The scene's default camera."""
        return self._camera

    @property
    def client(self) -> int:
        """The pybullet physics client id, for callers that drive the world (pass it as physicsClientId)."""
        self._check_open()
        return self._client

    @property
    def object_bodies(self) -> list[int]:
        """pybullet body ids of the objects, in ObjectSpec.index order."""
        return list(self._object_bodies)

    @property
    def table_body(self) -> int:
        """pybullet body id of the table top."""
        return self._table_body

    @property
    def robot_body(self) -> int | None:
        """pybullet body id of the Franka Panda, or None when the scene has no robot."""
        return self._robot_body

    def render(self, camera: Camera | None = None) -> View:
        """Render RGB (with shadows), metric depth and segmentation (ObjectSpec.index, -1 elsewhere)."""
        camera = camera or self._camera
        rgba, zbuffer, raw_segmentation = self._render_raw(camera, shadow=True)
        shape = (camera.height, camera.width)
        rgb = np.ascontiguousarray(rgba.reshape(*shape, 4)[..., :3])
        depth = camera.zbuffer_to_depth(zbuffer.reshape(shape))
        return View(rgb, depth, self._segmentation_to_index(raw_segmentation.reshape(shape)), camera)

    def _render_segmentation(self, camera: Camera) -> NDArray[np.int32]:
        # Shadows only change colours, so the cheaper shadowless pass gives the same segmentation.
        raw_segmentation = self._render_raw(camera, shadow=False)[2]
        return self._segmentation_to_index(raw_segmentation.reshape(camera.height, camera.width))

    def _render_raw(
        self, camera: Camera, shadow: bool
    ) -> tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.int32]]:
        self._check_open()
        _, _, rgba, zbuffer, raw_segmentation = pybullet.getCameraImage(
            camera.width,
            camera.height,
            viewMatrix=camera.view_matrix_gl(),
            projectionMatrix=camera.projection_matrix_gl(),
            lightDirection=LIGHT_DIRECTION,
            shadow=int(shadow),
            renderer=pybullet.ER_TINY_RENDERER,
            physicsClientId=self._client,
        )
        return (
            np.asarray(rgba, dtype=np.uint8),
            np.asarray(zbuffer, dtype=np.float32),
            np.asarray(raw_segmentation, dtype=np.int32),
        )

    def ground_truth(self, view: View | None = None) -> list[ObjectTruth]:
        """Ground truth of every object for `view` (a fresh render of the default camera when None)."""
        view = view or self.render()
        return compute_ground_truth(self._spec, view, self._visible_fractions(view.camera))

    def save(self, directory: str | Path) -> Path:
        """Write scene.json, rgb.png, depth.npy, segmentation.npy and objects.json for the default camera."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        view = self.render()
        (out / "scene.json").write_text(self._spec.model_dump_json(indent=2) + "\n")
        Image.fromarray(view.rgb).save(out / "rgb.png")
        np.save(out / "depth.npy", view.depth)
        np.save(out / "segmentation.npy", view.segmentation)
        objects = [truth.to_dict() for truth in self.ground_truth(view)]
        (out / "objects.json").write_text(json.dumps(objects, indent=2) + "\n")
        return out

    def close(self) -> None:
        """Disconnect the pybullet client (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Scene:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise RuntimeError("this scene is closed")

    def _segmentation_to_index(self, raw: NDArray[np.int_]) -> NDArray[np.int32]:
        body_ids = raw & 0xFFFFFF  # the low 24 bits hold the body id when link indices are encoded too
        body_ids[raw < 0] = -1
        lookup = np.full(max(self._object_bodies, default=-1) + 1, -1, dtype=np.int32)
        lookup[np.asarray(self._object_bodies, dtype=np.int64)] = np.arange(len(self._object_bodies))
        index = np.full(raw.shape, -1, dtype=np.int32)
        is_object_id = (body_ids >= 0) & (body_ids < lookup.size)  # other bodies stay -1
        index[is_object_id] = lookup[body_ids[is_object_id]]
        return index

    def _visible_fractions(self, camera: Camera) -> dict[int, float]:
        """Visible pixels over the pixels each object would cover on its own, measured on small renders.

        Objects whose projected boxes do not overlap are rendered "alone" together in one pass, with every
        other object and the robot moved out of sight, so a scene needs a few passes rather than one each.
        """
        factor = max(1, int(np.ceil(camera.width / VISIBILITY_MAX_WIDTH)))
        small = camera.resized(max(1, camera.width // factor), max(1, camera.height // factor))
        together = self._render_segmentation(small)
        hideable = [*self._object_bodies, *([self._robot_body] if self._robot_body is not None else [])]
        poses = [pybullet.getBasePositionAndOrientation(b, physicsClientId=self._client) for b in hideable]
        fractions = {}
        try:
            for group in _non_overlapping_groups(_image_boxes(self._spec, small)):
                for position, body in enumerate(hideable):
                    pose = poses[position] if position in group else (_HIDDEN_POSITION, (0.0, 0.0, 0.0, 1.0))
                    pybullet.resetBasePositionAndOrientation(body, *pose, physicsClientId=self._client)
                alone = self._render_segmentation(small)
                for index in group:
                    alone_pixels = int(np.count_nonzero(alone == index))
                    seen = int(np.count_nonzero(together == index))
                    fractions[index] = min(1.0, seen / alone_pixels) if alone_pixels else 0.0
        finally:
            for body, pose in zip(hideable, poses, strict=True):
                pybullet.resetBasePositionAndOrientation(body, *pose, physicsClientId=self._client)
        return fractions


def _image_boxes(spec: SceneSpec, camera: Camera) -> list[NDArray[np.float64]]:
    """Pixel boxes [x1, y1, x2, y2] of the objects' projected 3D boxes (they contain the masks)."""
    boxes = []
    for obj in spec.objects:
        corners = camera.world_to_camera(oriented_box(obj)[0])
        corners[:, 2] = np.maximum(corners[:, 2], 1e-6)  # behind the camera: keep the direction finite
        pixels = camera.project(corners)
        boxes.append(np.concatenate([pixels.min(axis=0), pixels.max(axis=0)]))
    return boxes


def _non_overlapping_groups(boxes: list[NDArray[np.float64]], margin: float = 1.0) -> list[list[int]]:
    """Greedily split box indices into groups whose boxes (grown by `margin`) do not overlap."""

    def overlap(a: NDArray[np.float64], b: NDArray[np.float64]) -> bool:
        return bool(np.all(a[:2] - margin < b[2:]) and np.all(b[:2] - margin < a[2:]))

    groups: list[list[int]] = []
    for index, box in enumerate(boxes):
        for group in groups:
            if not any(overlap(box, boxes[other]) for other in group):
                group.append(index)
                break
        else:
            groups.append([index])
    return groups


def _connect() -> int:
    client = pybullet.connect(pybullet.DIRECT)
    pybullet.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=client)
    pybullet.setGravity(0.0, 0.0, -9.81, physicsClientId=client)
    pybullet.setTimeStep(TIMESTEP, physicsClientId=client)
    return client


def _static_box(client: int, half_extents: Vec3, position: Vec3, rgba: Rgba) -> int:
    collision = pybullet.createCollisionShape(
        pybullet.GEOM_BOX, halfExtents=half_extents, physicsClientId=client
    )
    visual = pybullet.createVisualShape(
        pybullet.GEOM_BOX, halfExtents=half_extents, rgbaColor=rgba, physicsClientId=client
    )
    return pybullet.createMultiBody(0.0, collision, visual, position, physicsClientId=client)


def _add_table(client: int) -> int:
    """A table whose top surface is z = 0, four legs and a floor; returns the table top's body id."""
    hx, hy, hz = TABLE_HALF_EXTENTS
    top = _static_box(client, (hx, hy, hz), (0.0, 0.0, -hz), _TABLE_COLOR)
    leg_half = (0.03, 0.03, (TABLE_HEIGHT - 2 * hz) / 2)
    for sx in (-1, 1):
        for sy in (-1, 1):
            _static_box(
                client, leg_half, (sx * (hx - 0.06), sy * (hy - 0.06), -2 * hz - leg_half[2]), _TABLE_COLOR
            )
    _static_box(client, (3.0, 3.0, 0.01), (0.0, 0.0, -TABLE_HEIGHT - 0.01), _FLOOR_COLOR)
    return top


def _add_robot(client: int) -> int:
    """The Franka Panda at the table's far edge, facing the table, in a neutral pose."""
    facing = pybullet.getQuaternionFromEuler((0.0, 0.0, -np.pi / 2))
    robot = pybullet.loadURDF(ROBOT_ASSET, ROBOT_BASE, facing, useFixedBase=True, physicsClientId=client)
    movable = [
        joint
        for joint in range(pybullet.getNumJoints(robot, physicsClientId=client))
        if pybullet.getJointInfo(robot, joint, physicsClientId=client)[2] != pybullet.JOINT_FIXED
    ]
    for joint, angle in zip(movable, ROBOT_NEUTRAL_JOINTS, strict=True):
        pybullet.resetJointState(robot, joint, angle, physicsClientId=client)
    return robot


def _create_body(
    client: int, shape: str, asset: str | None, scale: float, half_extents: Vec3, rgba: Rgba | None
) -> int:
    """Create one object at the origin: a procedural primitive or a pybullet_data URDF."""
    if shape == "asset":
        if asset is None:
            raise ValueError("an asset object needs an asset path")
        try:
            body = pybullet.loadURDF(asset, globalScaling=scale, physicsClientId=client)
        except pybullet.error as error:
            raise ValueError(f"cannot load asset {asset!r} from pybullet_data: {error}") from error
        if rgba is not None:
            pybullet.changeVisualShape(body, -1, rgbaColor=rgba, physicsClientId=client)
        return body
    color = rgba or (0.7, 0.7, 0.7, 1.0)
    if shape == "box":
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_BOX, halfExtents=half_extents, physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_BOX, halfExtents=half_extents, rgbaColor=color, physicsClientId=client
        )
    elif shape == "cylinder":
        radius, height = half_extents[0], 2 * half_extents[2]
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_CYLINDER, radius=radius, height=height, physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_CYLINDER, radius=radius, length=height, rgbaColor=color, physicsClientId=client
        )
    elif shape == "sphere":
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_SPHERE, radius=half_extents[0], physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_SPHERE, radius=half_extents[0], rgbaColor=color, physicsClientId=client
        )
    else:
        raise ValueError(f"unknown shape {shape!r}")
    body = pybullet.createMultiBody(0.1, collision, visual, physicsClientId=client)
    pybullet.changeDynamics(body, -1, lateralFriction=0.8, rollingFriction=0.002, physicsClientId=client)
    return body


def _collision_box(client: int, body: int) -> tuple[Vec3, Vec3]:
    """Half extents and centre of a body's collision bounds (shapes plus margin) in its base frame.

    This is the body's physical reach, used to drop and space objects; the ground-truth box is the tighter
    visual one (`visual_box`).
    """
    pybullet.resetBasePositionAndOrientation(
        body, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), physicsClientId=client
    )
    low, high = (np.asarray(v) for v in pybullet.getAABB(body, physicsClientId=client))
    half, centre = (high - low) / 2.0, (high + low) / 2.0
    return (float(half[0]), float(half[1]), float(half[2])), (
        float(centre[0]),
        float(centre[1]),
        float(centre[2]),
    )


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
    choices = []
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
    body = _create_body(
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
    return _Placed(choice, body, *visual_box(client, body), *_collision_box(client, body))


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
    client = _connect()
    try:
        _add_table(client)
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


def load_scene(directory: str | Path) -> Scene:
    """Rebuild the scene saved in `directory` by `Scene.save`."""
    path = Path(directory) / "scene.json"
    if not path.is_file():
        raise FileNotFoundError(f"no scene.json in {directory}")
    return Scene.from_spec(SceneSpec.model_validate_json(path.read_text()))
