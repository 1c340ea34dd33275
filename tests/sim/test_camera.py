"""Camera geometry: look-at pose, projection, back-projection, matrices and serialisation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera


@pytest.fixture
def camera() -> Camera:
    return Camera.look_at(eye=(0.1, -0.8, 0.6), target=(0.0, 0.0, 0.0), width=320, height=240, fov_deg=60.0)


def test_look_at_puts_target_at_image_centre_with_opencv_axes(camera: Camera) -> None:
    target_cam = camera.world_to_camera([0.0, 0.0, 0.0])[0]
    assert target_cam[2] == pytest.approx(np.linalg.norm([0.1, -0.8, 0.6]))
    np.testing.assert_allclose(camera.project(target_cam)[0], [160.0, 120.0], atol=1e-9)
    # a point above the target (world +z) appears higher in the image: smaller y (y points down)
    above = camera.project(camera.world_to_camera([0.0, 0.0, 0.1]))[0]
    assert above[1] < 120.0
    rotation = camera.cam_to_world[:3, :3]
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(rotation) == pytest.approx(1.0)


def test_focal_length_matches_vertical_fov(camera: Camera) -> None:
    assert camera.fy == pytest.approx(120.0 / np.tan(np.radians(30.0)))
    np.testing.assert_allclose(camera.intrinsics()[:2, 2], [160.0, 120.0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3))
def test_world_camera_round_trip(point: list[float]) -> None:
    camera = Camera.look_at((0.3, -0.9, 0.7), (0.0, 0.05, 0.0), 64, 48)
    back = camera.camera_to_world(camera.world_to_camera(point))
    np.testing.assert_allclose(back[0], point, atol=1e-12)


def test_backproject_inverts_project(camera: Camera) -> None:
    depth = np.full((camera.height, camera.width), 0.9, dtype=np.float32)
    points = camera.backproject(depth)
    assert points.shape == (240, 320, 3) and points.dtype == np.float32
    pixels = camera.project(points.reshape(-1, 3).astype(np.float64))
    ys, xs = np.mgrid[0:240, 0:320]
    np.testing.assert_allclose(pixels, np.c_[xs.ravel() + 0.5, ys.ravel() + 0.5], atol=1e-3)


def test_gl_matrices_agree_with_intrinsics(camera: Camera) -> None:
    point_world = np.array([0.05, 0.1, 0.02, 1.0])
    view = np.asarray(camera.view_matrix_gl()).reshape(4, 4).T
    proj = np.asarray(camera.projection_matrix_gl()).reshape(4, 4).T
    clip = proj @ view @ point_world
    ndc = clip[:3] / clip[3]
    gl_pixel = [(ndc[0] + 1) / 2 * camera.width, (1 - ndc[1]) / 2 * camera.height]
    cv_pixel = camera.project(camera.world_to_camera(point_world[:3]))[0]
    # TinyRenderer samples pixel (x, y) at (x, y + 1): the matrix shifts by half a pixel to match centres
    np.testing.assert_allclose(gl_pixel, cv_pixel + np.array([-0.5, 0.5]), atol=1e-9)
    zbuffer = (ndc[2] + 1) / 2
    depth = camera.zbuffer_to_depth(np.array([zbuffer]))[0]
    assert depth == pytest.approx(camera.world_to_camera(point_world[:3])[0, 2], rel=1e-5)


def test_dict_round_trip_and_resize(camera: Camera) -> None:
    again = Camera.from_dict(camera.to_dict())
    assert again.to_dict() == camera.to_dict()
    half = camera.resized(160, 120)
    np.testing.assert_allclose(half.intrinsics(), np.diag([0.5, 0.5, 1.0]) @ camera.intrinsics())


def test_bad_input_is_reported(camera: Camera) -> None:
    with pytest.raises(ValueError, match="eye and target"):
        Camera.look_at((0, 0, 1), (0, 0, 1))
    with pytest.raises(ValueError, match="parallel"):
        Camera.look_at((0, 0, 1), (0, 0, 0))
    with pytest.raises(ValueError, match="behind"):
        camera.project([0.0, 0.0, -1.0])
    with pytest.raises(ValueError, match="missing keys"):
        Camera.from_dict({"width": 10})
    with pytest.raises(ValueError, match="shape"):
        camera.backproject(np.ones((3, 3)))


def test_rendered_pixels_follow_the_pixel_centre_convention() -> None:
    """A box seen from above covers exactly the pixels whose centres project inside it."""
    from spacetools.sim.bodies import connect, static_box

    client = connect()
    try:
        body = static_box(client, (0.1, 0.07, 0.05), (0.0, 0.0, 0.05), (1.0, 0.0, 0.0, 1.0))
        for width, height in ((64, 48), (100, 80)):
            camera = Camera.look_at((0.0, -1e-4, 1.0), (0.0, 0.0, 0.0), width, height, 60.0)
            _, _, _, _, segmentation = pybullet.getCameraImage(
                width, height, camera.view_matrix_gl(), camera.projection_matrix_gl(),
                renderer=pybullet.ER_TINY_RENDERER, physicsClientId=client,
            )  # fmt: skip
            ys, xs = np.nonzero(np.asarray(segmentation).reshape(height, width) == body)
            (x1, y1), (x2, y2) = np.sort(
                camera.project(camera.world_to_camera([[-0.1, -0.07, 0.1], [0.1, 0.07, 0.1]])), axis=0
            )
            centres_x, centres_y = np.arange(width) + 0.5, np.arange(height) + 0.5
            inside_x = np.nonzero((centres_x > x1) & (centres_x < x2))[0]
            inside_y = np.nonzero((centres_y > y1) & (centres_y < y2))[0]
            assert (xs.min(), xs.max(), ys.min(), ys.max()) == (
                inside_x[0],
                inside_x[-1],
                inside_y[0],
                inside_y[-1],
            )
    finally:
        pybullet.disconnect(client)
