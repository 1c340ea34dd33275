"""Point-cloud cleaning and support-plane ("up") estimation shared by the box and grasp tools.

Masks from a segmenter bleed onto the table, the background and neighbours, and estimated depth is
noisy, so both the box fitter and the grasp sampler first keep the object's main cluster and find
the table plane around it; the plane normal gives a gravity-aligned frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from spacetools.tools.projection import finite_rows

# A fixed seed: plane fitting is an algorithm, not a simulated failure, so it must not vary per call.
_RANSAC_SEED = 20251204
_MAX_CLUSTER_POINTS = 20000


@dataclass(frozen=True)
class SupportPlane:
    """A plane ``normal · p + offset = 0`` with ``normal`` pointing up (towards the camera side)."""

    normal: np.ndarray
    offset: float

    def height(self, points: np.ndarray) -> np.ndarray:
        """Signed distance of ``points`` above the plane."""
        heights: np.ndarray = points @ self.normal + self.offset
        return heights


def subsample(points: np.ndarray, max_points: int) -> np.ndarray:
    """At most ``max_points`` rows, evenly strided (deterministic)."""
    if len(points) <= max_points:
        return points
    strided: np.ndarray = points[np.linspace(0, len(points) - 1, max_points).astype(int)]
    return strided


def main_cluster(points: np.ndarray, min_radius: float = 0.008) -> np.ndarray:
    """Keep the largest spatially connected cluster, dropping depth-gap outliers and stray points.

    Points are linked when closer than a radius adapted to the cloud's sampling density, so a mask
    that bleeds onto a far background or a separate neighbour leaves those points in other clusters.
    """
    if len(points) < 10:
        return points
    sample = subsample(points, _MAX_CLUSTER_POINTS)
    tree = cKDTree(sample)
    nearest, _ = tree.query(sample, k=2)
    radius = max(min_radius, 4.0 * float(np.median(nearest[:, 1])))
    pairs = tree.query_pairs(radius, output_type="ndarray")
    if len(pairs) == 0:
        return points
    graph = _adjacency(len(sample), pairs)
    _, labels = connected_components(graph, directed=False)
    biggest = np.bincount(labels).argmax()
    kept: np.ndarray = sample[labels == biggest]
    if len(sample) == len(points):
        return kept
    # Subsampled: keep every original point near the winning cluster.
    distance, _ = cKDTree(kept).query(points, k=1, distance_upper_bound=radius)
    near: np.ndarray = points[np.isfinite(distance)]
    return near


def _adjacency(size: int, pairs: np.ndarray) -> coo_matrix:
    """A sparse adjacency matrix from index pairs (treated as undirected)."""
    ones = np.ones(len(pairs), dtype=np.int8)
    return coo_matrix((ones, (pairs[:, 0], pairs[:, 1])), shape=(size, size))


def fit_plane_ransac(
    points: np.ndarray, threshold: float = 0.006, iterations: int = 200, max_points: int = 4000
) -> tuple[SupportPlane, np.ndarray] | None:
    """The dominant plane of ``points`` by RANSAC plus a least-squares refit, and its inlier mask.

    The normal is oriented towards the camera (the origin), which for a table seen from above is up.
    Returns ``None`` when there are too few points to fit.
    """
    finite = points[finite_rows(points)]
    if len(finite) < 50:
        return None
    rng = np.random.default_rng(_RANSAC_SEED)
    sample = finite[rng.choice(len(finite), size=min(max_points, len(finite)), replace=False)]
    triples = sample[rng.integers(0, len(sample), size=(iterations, 3))]
    normals = np.cross(triples[:, 1] - triples[:, 0], triples[:, 2] - triples[:, 0])
    lengths = np.linalg.norm(normals, axis=1)
    usable = lengths > 1e-9
    if not np.any(usable):
        return None
    normals = normals[usable] / lengths[usable, None]
    offsets = -np.einsum("ij,ij->i", normals, triples[usable, 0])
    inlier_counts = (np.abs(sample @ normals.T + offsets) < threshold).sum(axis=0)
    best = int(np.argmax(inlier_counts))
    inliers = np.abs(sample @ normals[best] + offsets[best]) < threshold
    normal, offset = _least_squares_plane(sample[inliers])
    if offset < 0:
        # Orient so the camera (origin) is on the positive side: there the normal points up.
        normal, offset = -normal, -offset
    plane = SupportPlane(normal=normal, offset=offset)
    return plane, np.abs(plane.height(finite)) < threshold


def _least_squares_plane(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The total-least-squares plane through ``points``."""
    centroid = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - centroid, full_matrices=False)
    normal = vt[-1] / np.linalg.norm(vt[-1])
    return normal, float(-normal @ centroid)


def estimate_support_plane(
    object_points: np.ndarray, other_points: np.ndarray, min_inliers: int = 200
) -> SupportPlane | None:
    """The plane the object rests on, fitted to the scene points around it.

    Only the neighbourhood of the object is used so a distant background or wall cannot win. The
    plane is accepted when enough points support it and the object lies mostly above it.
    """
    if len(object_points) == 0 or len(other_points) == 0:
        return None
    centre = np.median(object_points, axis=0)
    size = float(
        np.linalg.norm(np.percentile(object_points, 95, axis=0) - np.percentile(object_points, 5, axis=0))
    )
    radius = max(0.25, 3.0 * size)
    offsets = other_points - centre
    # The sum of squares written out: numpy's reduction along the rows of an (N, 3) array is slower.
    distances = np.sqrt(offsets[:, 0] ** 2 + offsets[:, 1] ** 2 + offsets[:, 2] ** 2)
    nearby = other_points[distances < radius]
    fitted = fit_plane_ransac(nearby)
    if fitted is None:
        return None
    plane, inliers = fitted
    if inliers.sum() < min_inliers:
        return None
    if np.median(plane.height(object_points)) <= 0:
        return None
    return plane


def camera_up_fallback() -> np.ndarray:
    """The "up" guess without a plane: the camera's -y axis (image up)."""
    return np.array([0.0, -1.0, 0.0])
