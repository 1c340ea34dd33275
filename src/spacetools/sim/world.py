"""The simulated tabletop as a live pybullet world: `Scene` (rebuilt from a spec), its renders, saving.

Building a new seeded scene (sampling, dropping and settling objects) is `spacetools.sim.layout`; the
pybullet bodies (table, robot, objects) are made by `spacetools.sim.bodies`.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from PIL import Image

from spacetools.sim.bodies import add_robot, add_table, connect, create_body
from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera
from spacetools.sim.groundtruth import ObjectTruth, compute_ground_truth, oriented_box
from spacetools.sim.scene import SceneSpec

LIGHT_DIRECTION = (0.4, -0.6, 1.0)
VISIBILITY_MAX_WIDTH = 160
"""Visible fractions are measured on renders at most this wide (they are ratios, so coarse is enough)."""

_HIDDEN_POSITION = (0.0, 0.0, -50.0)


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

    Build one with `spacetools.sim.layout.build_scene` (seeded, settles physics) or `Scene.from_spec` (exact poses, no physics);
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
        client = connect()
        try:
            table = add_table(client)
            bodies = []
            for obj in spec.objects:
                body = create_body(client, obj.shape, obj.asset, obj.scale, obj.half_extents, obj.rgba)
                pybullet.resetBasePositionAndOrientation(
                    body, obj.position, obj.orientation, physicsClientId=client
                )
                bodies.append(body)
            robot = None
            if spec.with_robot:
                robot = (
                    add_robot(client) if spec.robot_joints is None else add_robot(client, spec.robot_joints)
                )
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

    def render(self, camera: Camera | None = None, *, shadow: bool = True) -> View:
        """Render RGB (with shadows unless `shadow` is False: a shadowless pass costs about half and gives
        the same depth and segmentation), metric depth and segmentation (ObjectSpec.index, -1 elsewhere)."""
        camera = camera or self._camera
        rgba, zbuffer, raw_segmentation = self._render_raw(camera, shadow=shadow)
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

    def ground_truth(self, view: View | None = None, *, visibility: bool = True) -> list[ObjectTruth]:
        """Ground truth of every object for `view` (a fresh render of the default camera when None).

        Without `visibility` the visible fractions are not measured (a few extra renders): each object's
        is then 1 when it shows at all, else 0.
        """
        view = view or self.render()
        boxes = [oriented_box(obj) for obj in self._spec.objects]
        corners = [box_corners for box_corners, _ in boxes]
        fractions = self._visible_fractions(view.camera, corners) if visibility else None
        return compute_ground_truth(self._spec, view, fractions, boxes)

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

    def _segmentation_to_index(self, raw: NDArray[np.signedinteger[Any]]) -> NDArray[np.int32]:
        body_ids = raw & 0xFFFFFF  # the low 24 bits hold the body id when link indices are encoded too
        body_ids[raw < 0] = -1
        lookup = np.full(max(self._object_bodies, default=-1) + 1, -1, dtype=np.int32)
        lookup[np.asarray(self._object_bodies, dtype=np.int64)] = np.arange(len(self._object_bodies))
        index = np.full(raw.shape, -1, dtype=np.int32)
        is_object_id = (body_ids >= 0) & (body_ids < lookup.size)  # other bodies stay -1
        index[is_object_id] = lookup[body_ids[is_object_id]]
        return index

    def _visible_fractions(self, camera: Camera, corners: list[NDArray[np.float64]]) -> dict[int, float]:
        """Visible pixels over the pixels each object would cover on its own, measured on small renders
        (`corners`: each object's oriented box).

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
            for group in _non_overlapping_groups(_image_boxes(corners, small)):
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


def _image_boxes(box_corners: list[NDArray[np.float64]], camera: Camera) -> list[NDArray[np.float64]]:
    """Pixel boxes [x1, y1, x2, y2] of the objects' projected 3D boxes (they contain the masks)."""
    boxes = []
    for world_corners in box_corners:
        corners = camera.world_to_camera(world_corners)
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


def load_scene(directory: str | Path) -> Scene:
    """Rebuild the scene saved in `directory` by `Scene.save`."""
    path = Path(directory) / "scene.json"
    if not path.is_file():
        raise FileNotFoundError(f"no scene.json in {directory}")
    return Scene.from_spec(SceneSpec.model_validate_json(path.read_text()))
