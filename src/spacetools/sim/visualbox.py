"""The tight box of what one sees of a body: its visual geometry, in the frame its base pose refers to.

pybullet's `getAABB` bounds the collision shapes grown by the collision margin, several millimetres
larger than the rendered mesh on every side; ground truth must match the pixels, so it is measured here
from the visual shapes (mesh vertices, or primitive dimensions) instead.

Frames: `getVisualShapeData` places each visual shape in the URDF link frame, while
`getBasePositionAndOrientation` (and so `ObjectSpec.position`/`orientation`) is the pose of the base's
inertial frame, which a URDF may offset from the link frame (the duck and the teddy bear do).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.spatial.transform import Rotation

from spacetools.sim.bullet import pybullet
from spacetools.sim.scene import Vec3

_CORNER_SIGNS = np.array([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])


@lru_cache(maxsize=64)
def mesh_vertices(path: str) -> NDArray[np.float64]:
    """The vertices (N, 3) of a Wavefront .obj file that its faces use, unscaled; parsed once per file.

    Vertices no face refers to are never drawn, so they must not widen the box.
    """
    file = Path(path)
    if file.suffix.lower() != ".obj":
        raise ValueError(f"only .obj meshes are supported, got {path!r}")
    if not file.is_file():
        raise FileNotFoundError(f"mesh file not found: {path}")
    vertices: list[tuple[float, float, float]] = []
    used: set[int] = set()
    for line in file.read_text(errors="replace").splitlines():
        if line.startswith("v "):
            x, y, z = line.split()[1:4]  # a vertex may carry a colour after its position
            vertices.append((float(x), float(y), float(z)))
        elif line.startswith("f "):
            for corner in line.split()[1:]:
                number = int(corner.split("/")[0])
                # OBJ indices count from 1; negative ones count back from the latest vertex.
                used.add(number - 1 if number > 0 else len(vertices) + number)
    if not used:
        raise ValueError(f"mesh {path!r} has no faces")
    if min(used) < 0 or max(used) >= len(vertices):
        raise ValueError(f"mesh {path!r} has a face that refers to a missing vertex")
    return np.asarray(vertices, dtype=np.float64)[sorted(used)]


def _shape_points(geometry: int, dimensions: tuple[float, ...], mesh_file: bytes) -> NDArray[np.float64]:
    """Points in the visual shape's own frame whose hull encloses the shape (mesh vertices, box corners)."""
    if geometry == pybullet.GEOM_MESH:
        vertices: NDArray[np.float64] = mesh_vertices(mesh_file.decode()) * np.asarray(dimensions[:3])
        return vertices
    if geometry == pybullet.GEOM_BOX:
        half = np.asarray(dimensions[:3]) / 2.0
    elif geometry == pybullet.GEOM_SPHERE:
        half = np.full(3, dimensions[0])
    elif geometry in (pybullet.GEOM_CYLINDER, pybullet.GEOM_CAPSULE):
        length, radius = dimensions[0], dimensions[1]  # both are along local z
        cap = radius if geometry == pybullet.GEOM_CAPSULE else 0.0
        half = np.array([radius, radius, length / 2.0 + cap])
    else:
        raise ValueError(f"unsupported visual geometry type {geometry}")
    return _CORNER_SIGNS * half  # the corners, since the shape may sit rotated in the link frame


def visual_box(client: int, body: int) -> tuple[Vec3, Vec3]:
    """Half extents and centre of the tight box of a single-link body's visual shapes, in its base frame."""
    if pybullet.getNumJoints(body, physicsClientId=client):
        raise ValueError("visual_box measures single-link bodies only; this one has joints")
    shapes = pybullet.getVisualShapeData(body, physicsClientId=client)
    if not shapes:
        raise ValueError(f"body {body} has no visual shape to measure")
    inertial_position, inertial_orientation = pybullet.getDynamicsInfo(body, -1, physicsClientId=client)[3:5]
    link_to_base = Rotation.from_quat(inertial_orientation).inv()
    points = []
    for shape in shapes:
        geometry, dimensions, mesh_file, position, orientation = shape[2:7]
        in_link = Rotation.from_quat(orientation).apply(_shape_points(geometry, dimensions, mesh_file))
        points.append(link_to_base.apply(in_link + np.asarray(position) - np.asarray(inertial_position)))
    stacked = np.concatenate(points)
    low, high = stacked.min(axis=0), stacked.max(axis=0)
    half, centre = (high - low) / 2.0, (high + low) / 2.0
    return (float(half[0]), float(half[1]), float(half[2])), (
        float(centre[0]),
        float(centre[1]),
        float(centre[2]),
    )
