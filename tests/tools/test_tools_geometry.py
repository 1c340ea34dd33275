"""Pure algorithms on synthetic arrays: projections, plane fitting, oriented boxes, grasp search."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from spacetools.kit.definition import ToolContext, ToolError, invoke_tool_method
from spacetools.sim.gripper import GRIPPER_MAX_WIDTH
from spacetools.tools.bbox import fit_circle, fit_oriented_box, min_area_rectangle
from spacetools.tools.grasp import Grasp, gripper_collides, search_grasps, within_reach
from spacetools.tools.pointcloud import fit_plane_ransac, main_cluster
from spacetools.tools.projection import (
    as_normalized_points,
    backproject_normalized,
    depth_to_point_cloud,
    finite_rows,
    mask_selection,
    project_to_normalized,
    valid_points,
)
from spacetools.tools.vision_ops import VisionOpsTool

FOCAL = 400.0
WIDTH, HEIGHT = 160, 120


def _rotation_about(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = axis / np.linalg.norm(axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def tabletop(
    yaw: float, size=(0.10, 0.06, 0.08), rng_seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A table plane seen obliquely and a box resting on it: (box surface points, table points, true corners).

    The frame: camera at the origin looking along +z, tilted 45° down onto a table 0.8 m away.
    """
    rng = np.random.default_rng(rng_seed)
    tilt = _rotation_about(np.array([1.0, 0.0, 0.0]), np.radians(45.0))
    up = tilt @ np.array([0.0, -1.0, 0.0])
    origin = np.array([0.0, 0.0, 0.8])
    a1 = _rotation_about(up, yaw) @ (tilt @ np.array([1.0, 0.0, 0.0]))
    a2 = np.cross(up, a1)
    half = np.asarray(size) / 2
    # Box surface sampled on all faces except the bottom, as a depth camera sees the visible ones.
    faces = []
    for axis, sign in ((0, 1), (0, -1), (1, 1), (1, -1), (2, 1)):
        local = rng.uniform(-1, 1, size=(1500, 3)) * half
        local[:, axis] = sign * half[axis]
        faces.append(local)
    local = np.concatenate(faces) + np.array([0.0, 0.0, half[2]])
    axes = np.stack([a1, a2, up], axis=1)
    box = origin + local @ axes.T
    grid = rng.uniform(-0.4, 0.4, size=(6000, 2))
    table = origin + grid[:, :1] * a1 + grid[:, 1:] * a2
    signs = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]])
    bottom = [origin + s[0] * half[0] * a1 + s[1] * half[1] * a2 for s in signs]
    corners = np.array(bottom + [c + size[2] * up for c in bottom])
    return box, table, corners


def test_projection_round_trip() -> None:
    points = np.array([[0.1, -0.05, 0.9], [-0.2, 0.1, 1.4]])
    normalized = project_to_normalized(points, FOCAL, WIDTH, HEIGHT)
    lifted = backproject_normalized(normalized, points[:, 2], FOCAL, WIDTH, HEIGHT)
    np.testing.assert_allclose(lifted, points, atol=1e-9)


@pytest.mark.parametrize(
    ("points_3d", "why"),
    [
        (np.array([[0.1, 0.0, 0.8], [0.0, 0.0, np.nan]]), r"point 1 \(0, 0, nan\) is not finite"),
        (np.array([[0.0, 0.0, np.inf]]), r"point 0 \(0, 0, inf\) is not finite"),
        (np.array([[0.0, 0.0, -np.inf]]), "is not finite"),
        (np.array([[np.nan, 0.0, 1.0]]), "is not finite"),
        ("[(0.1, 0.0, 1e999)]", r"\(0.1, 0, inf\) is not finite"),  # text overflows to infinity
        (np.array([[0.1, 0.0, 0.0]]), r"point 0 \(0.1, 0, 0\) is not in front of the camera"),
        (np.array([[0.1, 0.0, 0.8], [0.1, 0.0, -0.5]]), "point 1 .* is not in front of the camera"),
        (np.array([[0.1, 0.0, 1e-320]]), r"point 0 \(0.1, 0, [0-9.e-]+\) is too close to the camera plane"),
    ],
)
def test_projecting_to_2d_refuses_points_that_have_no_image_point(points_3d: object, why: str) -> None:
    ctx = ToolContext.local([np.zeros((HEIGHT, WIDTH, 3), np.uint8)])
    arguments = {"points_3d": points_3d, "focal_length_px": FOCAL, "width": WIDTH, "height": HEIGHT}
    result = invoke_tool_method(VisionOpsTool(), "vision_ops.project_3d_points_to_2d", arguments, ctx)
    assert result.is_error and result.text.startswith("Error: point ")
    assert re.search(why, result.text), result.text
    assert "finite z > 0" in result.text and "projected_2d_points" not in result.variables


def test_per_pixel_cloud_is_row_major_and_masks_select_by_index() -> None:
    depth = np.full((HEIGHT, WIDTH), 1.0, dtype=np.float32)
    depth[10, 20] = 2.0
    cloud = depth_to_point_cloud(depth, FOCAL)
    assert cloud.shape == (HEIGHT * WIDTH, 3)
    assert cloud[10 * WIDTH + 20, 2] == pytest.approx(2.0)
    mask = np.zeros((HEIGHT, WIDTH), dtype=bool)
    mask[10, 20] = True
    assert np.flatnonzero(mask_selection(cloud, mask, FOCAL)).tolist() == [10 * WIDTH + 20]
    # A filtered cloud is selected by projecting it instead.
    subset = cloud[[0, 10 * WIDTH + 20, 5]]
    assert mask_selection(subset, mask, FOCAL).tolist() == [False, True, False]


def test_valid_points_are_finite_and_in_front_of_the_camera() -> None:
    cloud = np.array(
        [[0.1, 0.2, 1.0], [np.nan, 0.0, 1.0], [0.0, np.inf, 1.0], [0.0, 0.0, -np.inf], [0.0, 0.0, -1.0]]
    )
    assert finite_rows(cloud).tolist() == [True, False, False, False, True]
    assert valid_points(cloud).tolist() == [True, False, False, False, False]
    assert valid_points(cloud).tolist() == (np.all(np.isfinite(cloud), axis=1) & (cloud[:, 2] > 0)).tolist()


def test_normalized_points_parse_text_and_reject_bad_input() -> None:
    np.testing.assert_allclose(as_normalized_points("[(0.1, 0.2), (0.3, 0.4)]"), [[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ToolError, match="pairs"):
        as_normalized_points("[(0.1, 0.2, 0.3)]")
    with pytest.raises(ToolError, match=r"\[0, 1\]"):
        as_normalized_points([[1.5, 0.2]])


def test_ransac_finds_the_table_with_the_normal_towards_the_camera() -> None:
    _, table, corners = tabletop(0.3)
    plane, inliers = fit_plane_ransac(
        np.concatenate([table, np.random.default_rng(1).uniform(-1, 1, (300, 3))])
    )
    up = np.cross(corners[1] - corners[0], corners[3] - corners[0])
    up /= np.linalg.norm(up)
    assert plane.normal @ up > 0.999
    assert inliers.sum() >= len(table) * 0.99


def test_main_cluster_drops_a_far_background_patch() -> None:
    box, _, _ = tabletop(0.0)
    background = np.random.default_rng(2).uniform(-0.05, 0.05, size=(200, 3)) + np.array([0.0, 0.0, 2.5])
    kept = main_cluster(np.concatenate([box, background]))
    assert len(kept) == len(box)


@given(angle=st.floats(0.0, np.pi), length=st.floats(0.02, 0.3), width=st.floats(0.02, 0.3))
@settings(max_examples=30, deadline=None)
def test_min_area_rectangle_recovers_a_rotated_rectangle(angle: float, length: float, width: float) -> None:
    rng = np.random.default_rng(0)
    local = rng.uniform(-0.5, 0.5, size=(200, 2)) * [length, width]
    local = np.concatenate(
        [
            local,
            [
                [-length / 2, -width / 2],
                [length / 2, width / 2],
                [-length / 2, width / 2],
                [length / 2, -width / 2],
            ],
        ]
    )
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    _, axes = min_area_rectangle(local @ rotation.T)
    extents = np.ptp(local @ rotation.T @ axes, axis=0)
    assert np.prod(extents) == pytest.approx(length * width, rel=1e-6)


@pytest.mark.parametrize("yaw", [0.0, 0.4, 1.2, 2.5])
def test_box_fit_is_gravity_aligned_and_in_bop_order(yaw: float) -> None:
    box, table, truth = tabletop(yaw)
    outliers = np.random.default_rng(3).normal(0, 0.01, size=(30, 3)) + np.array([0.0, 0.0, 3.0])
    fitted = fit_oriented_box(np.concatenate([box, outliers]), table)
    assert fitted.gravity_aligned
    assert sorted(fitted.extent) == pytest.approx(sorted([0.10, 0.06, 0.08]), abs=0.004)
    # Corner i + 4 is above corner i, and the bottom face is counter-clockwise seen from above.
    up = fitted.axes[:, 2]
    heights = (fitted.corners[4:] - fitted.corners[:4]) @ up
    assert np.all(heights > 0.07)
    bottom = fitted.corners[:4]
    normal = np.cross(bottom[1] - bottom[0], bottom[2] - bottom[1])
    assert normal @ up > 0
    # Same box as the truth: every true corner has a fitted corner within a few millimetres.
    gaps = np.linalg.norm(truth[:, None] - fitted.corners[None], axis=2).min(axis=1)
    assert gaps.max() < 0.006


def half_visible_cylinder(radius: float, height: float, rng_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An upright cylinder on the table seen from one side: (object points, table points).

    Only the camera-facing half of its side wall is sampled (its top hidden), so its visible footprint
    is a half disc: the case that needs amodal completion, like a ball.
    """
    rng = np.random.default_rng(rng_seed)
    tilt = _rotation_about(np.array([1.0, 0.0, 0.0]), np.radians(30.0))
    up = tilt @ np.array([0.0, -1.0, 0.0])
    a1 = tilt @ np.array([1.0, 0.0, 0.0])
    a2 = np.cross(up, a1)
    origin = np.array([0.0, 0.0, 0.7])
    angle = rng.uniform(0, 2 * np.pi, 6000)
    rise = rng.uniform(0, height, 6000)
    normals = np.cos(angle)[:, None] * a1 + np.sin(angle)[:, None] * a2
    wall = origin + radius * normals + rise[:, None] * up
    # Only the side wall facing the camera (at the frame origin) is seen; the top stays unseen.
    seen = np.einsum("ij,ij->i", normals, -wall) > 0
    grid = rng.uniform(-0.3, 0.3, size=(5000, 2))
    table = origin + grid[:, :1] * a1 + grid[:, 1:] * a2
    table = table[np.linalg.norm(grid, axis=1) > radius]
    return wall[seen], table


def test_circle_fit_recovers_an_arc() -> None:
    angle = np.linspace(0.2, 2.0, 50)
    arc = np.array([0.3, -0.1]) + 0.04 * np.column_stack([np.cos(angle), np.sin(angle)])
    circle, residual = fit_circle(arc)
    np.testing.assert_allclose(circle.centre, [0.3, -0.1], atol=1e-9)
    assert circle.radius == pytest.approx(0.04)
    assert residual < 1e-9


def test_box_fit_completes_the_hidden_half_of_a_round_object() -> None:
    radius, height = 0.03, 0.05
    wall, table = half_visible_cylinder(radius, height)
    box = fit_oriented_box(wall, table)
    assert box.gravity_aligned
    # Without completion the depth along the view is about one radius, not the diameter.
    np.testing.assert_allclose(box.extent[:2], 2 * radius, rtol=0.15)
    assert box.extent[2] == pytest.approx(height, rel=0.1)


def test_box_fit_does_not_inflate_a_box_seen_from_one_side() -> None:
    points, table, _ = tabletop(yaw=0.6)
    box = fit_oriented_box(points, table)
    footprint = np.sort(box.extent[:2])
    np.testing.assert_allclose(footprint, [0.06, 0.10], rtol=0.05)


def test_box_fit_without_a_table_falls_back_to_pca() -> None:
    box, _, _ = tabletop(0.7)
    fitted = fit_oriented_box(box)
    assert not fitted.gravity_aligned
    assert np.prod(fitted.extent) > 0.9 * 0.10 * 0.06 * 0.08


def test_box_fit_needs_points() -> None:
    with pytest.raises(ToolError, match="too few"):
        fit_oriented_box(np.zeros((2, 3)))


def test_grasp_on_a_free_box_closes_across_its_narrow_side() -> None:
    box, table, truth = tabletop(0.5, size=(0.10, 0.05, 0.06))
    plane, _ = fit_plane_ransac(table)
    search = search_grasps(box, table, np.random.default_rng(0), plane)
    grasp = search.best
    assert 0 < search.collision_free <= search.sampled <= 100
    assert 0.05 <= grasp.width <= GRIPPER_MAX_WIDTH
    narrow_axis = truth[3] - truth[0]
    closing = grasp.pose[:3, 0]
    assert abs(closing @ narrow_axis / np.linalg.norm(narrow_axis)) > 0.8
    assert grasp.pose[:3, 2] @ -plane.normal > 0.5  # from above
    assert not gripper_collides(grasp.pose, grasp.width, np.concatenate([box, table]))


def test_the_collision_checks_skip_only_points_out_of_the_grippers_reach() -> None:
    rng = np.random.default_rng(3)
    points = rng.uniform(-0.3, 0.3, size=(20_000, 3))
    poses = [np.eye(4) for _ in range(40)]
    for pose in poses:
        pose[:3, :3] = Rotation.random(random_state=rng).as_matrix()
        pose[:3, 3] = rng.uniform(-0.1, 0.1, 3)
    grasps = [
        Grasp(pose, width, 0.0)
        for pose, width in zip(poses, rng.uniform(0.0, GRIPPER_MAX_WIDTH, 40), strict=True)
    ]
    near = within_reach(points, grasps, GRIPPER_MAX_WIDTH)
    assert len(near) < len(points) / 2
    verdicts = [
        (gripper_collides(g.pose, g.width, points), gripper_collides(g.pose, g.width, near)) for g in grasps
    ]
    assert all(full == reduced for full, reduced in verdicts) and any(full for full, _ in verdicts)


def test_grasp_on_an_object_wider_than_the_gripper_fails_like_the_original() -> None:
    box, table, _ = tabletop(0.0, size=(0.2, 0.2, 0.05))
    plane, _ = fit_plane_ransac(table)
    # Too wide from above; tilted edge grasps then hit the table.
    with pytest.raises(RuntimeError, match=r"zero grasps|No collision-free grasps found"):
        search_grasps(box, table, np.random.default_rng(0), plane)


def test_grasp_boxed_in_by_obstacles_reports_no_collision_free_grasp() -> None:
    box, table, corners = tabletop(0.0, size=(0.05, 0.05, 0.06))
    plane, _ = fit_plane_ransac(table)
    # A lid of points just above the object blocks every approach from above.
    centre = corners.mean(axis=0)
    lid = (
        centre
        + 0.045 * plane.normal
        + np.random.default_rng(4).uniform(-0.12, 0.12, size=(4000, 3)) * [1, 0.02, 1]
    )
    with pytest.raises(RuntimeError, match="No collision-free grasps found"):
        search_grasps(box, np.concatenate([table, lid]), np.random.default_rng(0), plane)
