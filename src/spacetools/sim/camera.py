"""Pinhole camera with OpenCV-frame extrinsics, and its conversion to pybullet's OpenGL matrices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

DEFAULT_NEAR = 0.01
DEFAULT_FAR = 10.0


def _as_points(points: ArrayLike) -> NDArray[np.float64]:
    """Return `points` as an (N, 3) float array, accepting a single (3,) point too."""
    array = np.asarray(points, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != 3:
        raise ValueError(f"expected points of shape (N, 3) or (3,), got {array.shape}")
    return array


@dataclass
class Camera:
    """A pinhole camera: intrinsics in pixels and a camera-to-world pose in the OpenCV frame.

    The camera frame is OpenCV's (x right, y down, z forward). Pixel (x, y) covers [x, x+1) x [y, y+1),
    so the image centre of a W x H camera is (W/2, H/2).
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    cam_to_world: NDArray[np.float64] = field(default_factory=lambda: np.eye(4))
    near: float = DEFAULT_NEAR
    far: float = DEFAULT_FAR

    def __post_init__(self) -> None:
        self.cam_to_world = np.asarray(self.cam_to_world, dtype=np.float64)
        if self.cam_to_world.shape != (4, 4):
            raise ValueError(f"cam_to_world must be 4x4, got {self.cam_to_world.shape}")
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"image size must be positive, got {self.width}x{self.height}")
        if self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"focal lengths must be positive, got fx={self.fx}, fy={self.fy}")
        if not 0 < self.near < self.far:
            raise ValueError(f"need 0 < near < far, got near={self.near}, far={self.far}")

    @classmethod
    def look_at(
        cls,
        eye: ArrayLike,
        target: ArrayLike,
        width: int = 640,
        height: int = 480,
        fov_deg: float = 60.0,
        up: ArrayLike = (0.0, 0.0, 1.0),
    ) -> Camera:
        """A camera at `eye` looking at `target` with a vertical field of view of `fov_deg` degrees."""
        eye_w = np.asarray(eye, dtype=np.float64)
        forward = np.asarray(target, dtype=np.float64) - eye_w
        if np.linalg.norm(forward) < 1e-9:
            raise ValueError("eye and target must differ")
        if not 1.0 < fov_deg < 179.0:
            raise ValueError(f"fov_deg must be in (1, 179), got {fov_deg}")
        forward /= np.linalg.norm(forward)
        right = np.cross(forward, np.asarray(up, dtype=np.float64))
        if np.linalg.norm(right) < 1e-9:
            raise ValueError("viewing direction is parallel to the up vector")
        right /= np.linalg.norm(right)
        down = np.cross(forward, right)
        pose = np.eye(4)
        pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = right, down, forward, eye_w
        focal = 0.5 * height / np.tan(np.radians(fov_deg) / 2.0)
        return cls(width, height, focal, focal, width / 2.0, height / 2.0, pose)

    def intrinsics(self) -> NDArray[np.float64]:
        """The 3x3 intrinsic matrix K."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def world_to_cam(self) -> NDArray[np.float64]:
        """The 4x4 world-to-camera transform."""
        return np.asarray(np.linalg.inv(self.cam_to_world), dtype=np.float64)

    def world_to_camera(self, points: ArrayLike) -> NDArray[np.float64]:
        """Transform world points (N, 3) into the camera frame."""
        pts = _as_points(points)
        rotation, translation = self.cam_to_world[:3, :3], self.cam_to_world[:3, 3]
        return (pts - translation) @ rotation

    def camera_to_world(self, points: ArrayLike) -> NDArray[np.float64]:
        """Transform camera-frame points (N, 3) into the world frame."""
        pts = _as_points(points)
        world: NDArray[np.float64] = pts @ self.cam_to_world[:3, :3].T + self.cam_to_world[:3, 3]
        return world

    def project(self, points_camera: ArrayLike) -> NDArray[np.float64]:
        """Project camera-frame points (N, 3) to continuous pixel coordinates (N, 2)."""
        pts = _as_points(points_camera)
        z = pts[:, 2]
        if np.any(z <= 0):
            raise ValueError("cannot project points at or behind the camera (z <= 0)")
        return np.stack([self.fx * pts[:, 0] / z + self.cx, self.fy * pts[:, 1] / z + self.cy], axis=1)

    def normalize(self, uv_px: ArrayLike) -> NDArray[np.float64]:
        """Pixel coordinates (N, 2) to normalized image coordinates (u / W, v / H)."""
        uv = np.asarray(uv_px, dtype=np.float64).reshape(-1, 2)
        return uv / np.array([self.width, self.height], dtype=np.float64)

    def pixel_rays(self) -> NDArray[np.float64]:
        """For every pixel centre, the camera-frame direction with z = 1, shape (H, W, 3)."""
        xs = (np.arange(self.width) + 0.5 - self.cx) / self.fx
        ys = (np.arange(self.height) + 0.5 - self.cy) / self.fy
        grid_x, grid_y = np.meshgrid(xs, ys)
        return np.stack([grid_x, grid_y, np.ones_like(grid_x)], axis=-1)

    def backproject(self, depth: ArrayLike) -> NDArray[np.float32]:
        """Metric depth (H, W) to camera-frame points (H, W, 3) at the pixel centres."""
        depth_map = np.asarray(depth, dtype=np.float64)
        if depth_map.shape != (self.height, self.width):
            raise ValueError(
                f"depth shape {depth_map.shape} does not match camera {(self.height, self.width)}"
            )
        return (self.pixel_rays() * depth_map[..., None]).astype(np.float32)

    def view_matrix_gl(self) -> list[float]:
        """pybullet's view matrix (column-major 16 floats): OpenGL looks down -z with y up."""
        cv_to_gl = np.diag([1.0, -1.0, -1.0, 1.0])
        column_major: list[float] = (cv_to_gl @ self.world_to_cam).T.reshape(-1).tolist()
        return column_major

    def projection_matrix_gl(self) -> list[float]:
        """pybullet's projection matrix (column-major 16 floats) equivalent to these intrinsics.

        pybullet's TinyRenderer samples pixel (x, y) at image coordinates (x, y + 1) rather than at the
        pixel centre (x + 0.5, y + 0.5); shifting the principal point by half a pixel makes every rendered
        pixel show what this camera projects onto its centre.
        """
        w, h, n, f = self.width, self.height, self.near, self.far
        cx, cy = self.cx - 0.5, self.cy + 0.5
        proj = np.array(
            [
                [2 * self.fx / w, 0.0, 1 - 2 * cx / w, 0.0],
                [0.0, 2 * self.fy / h, 2 * cy / h - 1, 0.0],
                [0.0, 0.0, -(f + n) / (f - n), -2 * f * n / (f - n)],
                [0.0, 0.0, -1.0, 0.0],
            ]
        )
        column_major: list[float] = proj.T.reshape(-1).tolist()
        return column_major

    def zbuffer_to_depth(self, zbuffer: ArrayLike) -> NDArray[np.float32]:
        """Convert pybullet's non-linear z-buffer in [0, 1] to metric depth (z in the camera frame)."""
        zbuf = np.asarray(zbuffer, dtype=np.float64)
        return (self.far * self.near / (self.far - (self.far - self.near) * zbuf)).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (plain floats and lists)."""
        return {
            "width": int(self.width),
            "height": int(self.height),
            "fx": float(self.fx),
            "fy": float(self.fy),
            "cx": float(self.cx),
            "cy": float(self.cy),
            "cam_to_world": [[float(v) for v in row] for row in self.cam_to_world],
            "near": float(self.near),
            "far": float(self.far),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Camera:
        """Inverse of `to_dict`."""
        missing = {"width", "height", "fx", "fy", "cx", "cy", "cam_to_world"} - set(data)
        if missing:
            raise ValueError(f"camera dict is missing keys: {sorted(missing)}")
        return cls(
            width=int(data["width"]),
            height=int(data["height"]),
            fx=float(data["fx"]),
            fy=float(data["fy"]),
            cx=float(data["cx"]),
            cy=float(data["cy"]),
            cam_to_world=np.asarray(data["cam_to_world"], dtype=np.float64),
            near=float(data.get("near", DEFAULT_NEAR)),
            far=float(data.get("far", DEFAULT_FAR)),
        )

    def resized(self, width: int, height: int) -> Camera:
        """The same viewpoint at another resolution (intrinsics scaled)."""
        sx, sy = width / self.width, height / self.height
        return Camera(
            width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy,
            self.cam_to_world.copy(), self.near, self.far,
        )  # fmt: skip
