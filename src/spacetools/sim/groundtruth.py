"""Per-object ground truth: oriented 3D boxes (BOP-ASK order), 2D projections, masks and grasps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage
from scipy.spatial.transform import Rotation

from spacetools.sim.camera import Camera
from spacetools.sim.gripper import FINGER_LENGTH, GRIPPER_MAX_WIDTH, gripper_points
from spacetools.sim.scene import ObjectSpec, SceneSpec

if TYPE_CHECKING:
    from spacetools.sim.world import View

GRASP_MARGIN = 0.01
"""Clearance added to an object's width when opening the gripper around it, metres."""

TABLE_CLEARANCE = 0.004
"""Finger tips stay at least this far above the table top (z = 0), metres."""

# Unit-square corners walked counter-clockwise when seen from above (+z), as BOP-ASK orders a face.
_FACE_SIGNS = np.array([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])


@dataclass
class ObjectTruth:
    """Ground truth of one object as seen by one camera (see docs/architecture.md for the fields)."""

    index: int
    name: str
    category: str
    color: str | None
    obb_corners_world: NDArray[np.float64]
    obb_corners_camera: NDArray[np.float64]
    obb_corners_2d: NDArray[np.float64]
    bbox_2d: NDArray[np.float64]
    mask: NDArray[np.bool_]
    centroid_2d: NDArray[np.float64]
    position_camera: NDArray[np.float64]
    extent: NDArray[np.float64]
    grasp_pose: NDArray[np.float64] | None
    grasp_width: float | None
    grasp_points_2d: NDArray[np.float64] | None
    visible_fraction: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields, without the mask (it lives in the segmentation image)."""
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if key == "mask":
                continue
            out[key] = value.tolist() if isinstance(value, np.ndarray) else value
        out["mask_pixels"] = int(self.mask.sum())
        return out


def oriented_box(obj: ObjectSpec) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The object's oriented box in the world: 8 corners in BOP-ASK order and the extent (3,).

    The object's own axis closest to world vertical becomes the box's up axis, so the first four corners
    are the bottom face (counter-clockwise seen from above) and corner i + 4 lies above corner i, whatever
    way the object came to rest. The extent is (first horizontal, second horizontal, vertical).
    """
    rotation = Rotation.from_quat(obj.orientation).as_matrix()
    half = np.asarray(obj.half_extents)
    centre = np.asarray(obj.position) + rotation @ np.asarray(obj.box_offset)
    up_axis = int(np.argmax(np.abs(rotation[2, :])))
    side_a, side_b = (axis for axis in range(3) if axis != up_axis)
    up = rotation[:, up_axis] * np.sign(rotation[2, up_axis])
    dir_a, dir_b = rotation[:, side_a], rotation[:, side_b]
    if np.dot(np.cross(dir_a, dir_b), up) < 0:
        dir_b = -dir_b  # keep (a, b, up) right-handed so the face walk is counter-clockwise from above
    offsets_a = _FACE_SIGNS[:, 0:1] * half[side_a] * dir_a
    offsets_b = _FACE_SIGNS[:, 1:2] * half[side_b] * dir_b
    face = centre + offsets_a + offsets_b
    corners = np.concatenate([face - half[up_axis] * up, face + half[up_axis] * up])
    return corners, 2.0 * np.array([half[side_a], half[side_b], half[up_axis]])


def _inside_box(points: NDArray[np.float64], corners: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Which points lie inside the oriented box given by its 8 BOP-ASK corners."""
    origin = corners[0]
    edges = np.stack([corners[1] - origin, corners[3] - origin, corners[4] - origin])
    local = (points - origin) @ edges.T / np.sum(edges**2, axis=1)
    inside: NDArray[np.bool_] = np.all((local >= 0.0) & (local <= 1.0), axis=1)
    return inside


def top_down_grasp(
    corners: NDArray[np.float64], obstacles: list[NDArray[np.float64]], camera: Camera
) -> tuple[NDArray[np.float64], float] | None:
    """A top-down parallel-jaw grasp (camera-frame pose, width) of the box `corners`, or None.

    The gripper approaches straight down (-world z) above the box centre and closes across the narrower
    horizontal side; the wider side is tried when the narrower one is blocked by a neighbour (`obstacles`,
    other objects' corners). The fingers reach down to hold the upper part of the object, never lower
    than just above the table.
    """
    centre = corners.mean(axis=0)
    top, bottom = corners[:, 2].max(), corners[:, 2].min()
    tip_z = max(top - min(0.7 * FINGER_LENGTH, 0.5 * (top - bottom)), TABLE_CLEARANCE)
    palm = np.array([centre[0], centre[1], tip_z + FINGER_LENGTH])
    approach = np.array([0.0, 0.0, -1.0])
    sides = [corners[1] - corners[0], corners[3] - corners[0]]
    candidates = []
    for side in sides:
        closing = np.array([side[0], side[1], 0.0])
        if np.linalg.norm(closing) < 1e-9:
            continue
        closing /= np.linalg.norm(closing)
        support = corners @ closing
        candidates.append((float(support.max() - support.min()), closing))
    candidates.sort(key=lambda item: item[0])
    boxes = np.asarray(obstacles, dtype=np.float64).reshape(-1, 8, 3)
    box_low, box_high = boxes.min(axis=1), boxes.max(axis=1)
    for object_width, closing in candidates:
        if object_width > GRIPPER_MAX_WIDTH - 0.002:
            continue
        width = min(object_width + GRASP_MARGIN, GRIPPER_MAX_WIDTH)
        if (camera.world_to_cam[:3, :3] @ closing)[0] < 0:
            closing = -closing  # left finger (at -x) appears on the left of the image
        pose_world = np.eye(4)
        pose_world[:3, 0], pose_world[:3, 1] = closing, np.cross(approach, closing)
        pose_world[:3, 2], pose_world[:3, 3] = approach, palm
        fingers = gripper_points(pose_world, width)[1:]
        samples = np.concatenate([np.linspace(fingers[i], fingers[i + 2], 6) for i in (0, 1)])
        # Only boxes whose bounds reach the samples can hold one (the margin covers rounding).
        near = np.all(box_low <= samples.max(axis=0) + 1e-6, axis=1) & np.all(
            box_high >= samples.min(axis=0) - 1e-6, axis=1
        )
        if any(_inside_box(samples, box).any() for box in boxes[near]):
            continue
        return camera.world_to_cam @ pose_world, width
    return None


def _normalized_projection(camera: Camera, points_camera: NDArray[np.float64]) -> NDArray[np.float64]:
    # Points behind the camera cannot be projected; clamping keeps their image direction finite.
    safe = points_camera.copy()
    safe[:, 2] = np.maximum(safe[:, 2], 1e-6)
    return camera.normalize(camera.project(safe))


def _mask_pixels(
    mask: NDArray[np.bool_], region: tuple[slice, slice] | None
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Row and column indices of a mask's pixels (`np.nonzero` order), searched within `region`."""
    if region is None:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    ys, xs = np.nonzero(mask[region])
    return ys + region[0].start, xs + region[1].start


def compute_ground_truth(
    spec: SceneSpec,
    view: View,
    visible_fractions: dict[int, float] | None = None,
    boxes: list[tuple[NDArray[np.float64], NDArray[np.float64]]] | None = None,
) -> list[ObjectTruth]:
    """Ground truth of every object of `spec` for the camera and segmentation of `view`; `boxes` are the
    objects' `oriented_box`es when the caller has them already."""
    camera = view.camera
    height, width = view.segmentation.shape
    boxes = boxes if boxes is not None else [oriented_box(obj) for obj in spec.objects]
    # Each object's pixels are searched for within its mask's bounding slices only (label k + 1 is object k).
    regions = ndimage.find_objects(view.segmentation + 1)
    truths = []
    for obj, (corners_world, extent) in zip(spec.objects, boxes, strict=True):
        corners_camera = camera.world_to_camera(corners_world)
        corners_2d = _normalized_projection(camera, corners_camera)
        centre_camera = corners_camera.mean(axis=0)
        mask = view.segmentation == obj.index
        ys, xs = _mask_pixels(mask, regions[obj.index] if obj.index < len(regions) else None)
        if xs.size:
            bbox = np.array(
                [xs.min() / width, ys.min() / height, (xs.max() + 1) / width, (ys.max() + 1) / height]
            )
            centroid = np.array([(xs.mean() + 0.5) / width, (ys.mean() + 0.5) / height])
        else:  # fully hidden or out of view: fall back to the projected box, clipped to the image
            clipped = np.clip(corners_2d, 0.0, 1.0)
            bbox = np.concatenate([clipped.min(axis=0), clipped.max(axis=0)])
            centroid = _normalized_projection(camera, centre_camera[None])[0]
        obstacles = [
            corners for other, (corners, _) in zip(spec.objects, boxes, strict=True) if other is not obj
        ]
        grasp = top_down_grasp(corners_world, obstacles, camera)
        grasp_points_2d = None
        if grasp is not None:
            grasp_points_2d = _normalized_projection(camera, gripper_points(grasp[0], grasp[1]))
        truths.append(
            ObjectTruth(
                index=obj.index,
                name=obj.name,
                category=obj.category,
                color=obj.color,
                obb_corners_world=corners_world,
                obb_corners_camera=corners_camera,
                obb_corners_2d=corners_2d,
                bbox_2d=bbox,
                mask=mask,
                centroid_2d=centroid,
                position_camera=centre_camera,
                extent=extent,
                grasp_pose=None if grasp is None else grasp[0],
                grasp_width=None if grasp is None else grasp[1],
                grasp_points_2d=grasp_points_2d,
                visible_fraction=float((visible_fractions or {}).get(obj.index, 1.0 if xs.size else 0.0)),
            )
        )
    return truths
