"""Object boxes are the tight boxes of the visible geometry, checked against rendered points."""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from spacetools.sim.bodies import connect, create_body
from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera
from spacetools.sim.catalogue import CATALOGUE
from spacetools.sim.layout import build_scene
from spacetools.sim.visualbox import mesh_vertices, visual_box
from spacetools.sim.world import View

ASSETS = [
    *sorted({kind.assets[0]: kind.scale for kind in CATALOGUE if kind.assets}.items()),
    ("random_urdfs/007/007.urdf", 0.5),
    ("random_urdfs/013/013.urdf", 0.5),
]
SCENE_SEEDS = (0, 1, 13, 20)  # 13 holds a tray, a static body
FACING_MARGIN_M = 0.01
"""A box face counts as facing the camera when the camera is at least this far outside its plane."""


@pytest.fixture(scope="module")
def client() -> Iterator[int]:
    client = connect()
    yield client
    pybullet.disconnect(client)


def _rendered_points(client: int, body: int, camera: Camera) -> np.ndarray:
    """World points of the pixels that show `body`."""
    _, _, _, zbuffer, segmentation = pybullet.getCameraImage(
        camera.width, camera.height, viewMatrix=camera.view_matrix_gl(),
        projectionMatrix=camera.projection_matrix_gl(), renderer=pybullet.ER_TINY_RENDERER,
        physicsClientId=client,
    )  # fmt: skip
    shape = (camera.height, camera.width)
    depth = camera.zbuffer_to_depth(np.asarray(zbuffer, dtype=np.float32).reshape(shape))
    mask = (np.asarray(segmentation).reshape(shape) & 0xFFFFFF) == body
    return camera.camera_to_world(camera.backproject(depth)[mask].astype(np.float64))


def test_mesh_vertices_are_the_vertices_faces_use(tmp_path: Path) -> None:
    obj = tmp_path / "part.obj"
    obj.write_text(
        "# a triangle, a coloured vertex and one vertex no face uses\n"
        "o part\nv 0 0 0\nv 1 0 0 0.5 0.5 0.5\nv 9 9 9\nv 0 2 0\nvt 0 0\n"
        "f 1/1 2/1 4/1\nf -4 -3 -1\n"
    )
    np.testing.assert_array_equal(mesh_vertices(str(obj)), [[0, 0, 0], [1, 0, 0], [0, 2, 0]])


@pytest.mark.parametrize(
    ("name", "text", "error", "match"),
    [
        ("missing.obj", None, FileNotFoundError, "not found"),
        ("mesh.stl", "solid", ValueError, r"only \.obj"),
        ("points.obj", "v 0 0 0\n", ValueError, "no faces"),
        ("broken.obj", "v 0 0 0\nf 1 2 3\n", ValueError, "missing vertex"),
    ],
)
def test_mesh_vertices_rejects_bad_files(
    tmp_path: Path, name: str, text: str | None, error: type[Exception], match: str
) -> None:
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(error, match=match):
        mesh_vertices(str(tmp_path / name))


def test_visual_box_composes_the_visual_and_inertial_frames(client: int) -> None:
    quarter_turn = tuple(Rotation.from_euler("z", 90, degrees=True).as_quat())
    visual = pybullet.createVisualShape(
        pybullet.GEOM_BOX, halfExtents=(0.01, 0.02, 0.03), visualFramePosition=(0.05, 0.0, 0.0),
        visualFrameOrientation=quarter_turn, physicsClientId=client,
    )  # fmt: skip
    body = pybullet.createMultiBody(
        0.1, -1, visual, baseInertialFramePosition=(0.01, 0.02, 0.0), physicsClientId=client
    )
    half, centre = visual_box(client, body)
    # the turned box spans x 0.04-0.06 in the link frame; the base frame sits 1 cm along x, 2 cm along y
    np.testing.assert_allclose(half, (0.02, 0.01, 0.03), atol=1e-12)
    np.testing.assert_allclose(centre, (0.04, -0.02, 0.0), atol=1e-12)
    pybullet.removeBody(body, physicsClientId=client)


def test_articulated_bodies_are_refused(client: int) -> None:
    body = pybullet.loadURDF("r2d2.urdf", physicsClientId=client)
    with pytest.raises(ValueError, match="joints"):
        visual_box(client, body)
    pybullet.removeBody(body, physicsClientId=client)


@pytest.mark.parametrize(("asset", "scale"), ASSETS)
def test_asset_box_hugs_its_rendered_points(client: int, asset: str, scale: float) -> None:
    body = create_body(client, "asset", asset, scale, (0.01, 0.01, 0.01), None)
    half, centre = (np.asarray(v) for v in visual_box(client, body))
    lows, highs = [], []
    for view in range(8):  # turned every way, seen from all round: every side of the box shows up
        orientation = Rotation.random(random_state=view)
        pybullet.resetBasePositionAndOrientation(
            body, (0.0, 0.0, 0.3), orientation.as_quat(), physicsClientId=client
        )
        azimuth = np.pi / 2 * view
        eye = (0.35 * np.cos(azimuth), 0.35 * np.sin(azimuth), 0.3 + 0.15 * (view % 2))
        camera = Camera.look_at(eye, (0.0, 0.0, 0.3), 320, 240, fov_deg=40.0)
        local = orientation.inv().apply(_rendered_points(client, body, camera) - [0.0, 0.0, 0.3])
        lows.append(local.min(axis=0))
        highs.append(local.max(axis=0))
    pybullet.removeBody(body, physicsClientId=client)
    low, high = np.min(lows, axis=0), np.max(highs, axis=0)
    assert np.all(low > centre - half - 0.0005) and np.all(high < centre + half + 0.0005), "points outside"
    assert np.all(low - (centre - half) < 0.0015) and np.all(centre + half - high < 0.0015), "box too large"


@pytest.fixture(scope="module", params=SCENE_SEEDS)
def full_size_scene(request: pytest.FixtureRequest) -> Iterator[tuple[View, list]]:
    with build_scene(request.param) as scene:  # full 640x480: a pixel is about 2 mm on the table
        view = scene.render()
        yield view, list(zip(scene.spec.objects, scene.ground_truth(view), strict=True))


def test_scene_boxes_reach_every_face_the_camera_sees(full_size_scene: tuple[View, list]) -> None:
    """The faces of an object's box that face the camera touch the object's rendered points.

    A box face is tight when the object reaches it; where the camera lies outside the face's plane, the
    object's extreme point there faces the camera and shows (unless another object hides it, hence the
    visibility filter), so the rendered points must come within ~2 pixels of every such face.
    """
    view, objects = full_size_scene
    eye = view.camera.cam_to_world[:3, 3]
    checked = 0
    for obj, truth in objects:
        if truth.visible_fraction < 0.95 or truth.mask.sum() < 200:
            continue
        corners = truth.obb_corners_world
        axes = corners[[1, 3, 4]] - corners[0]
        lengths = np.linalg.norm(axes, axis=1)
        unit = axes / lengths[:, None]
        local = (
            view.camera.camera_to_world(view.point_cloud(truth.mask).astype(np.float64)) - corners[0]
        ) @ unit.T
        camera_local = (eye - corners[0]) @ unit.T
        gaps = [local[:, k].min() for k in range(3) if camera_local[k] < -FACING_MARGIN_M]
        gaps += [
            lengths[k] - local[:, k].max() for k in range(3) if camera_local[k] > lengths[k] + FACING_MARGIN_M
        ]
        assert gaps, truth.name  # the top face, at least, faces a camera above the table
        assert max(gaps) < 0.0025, (truth.name, obj.shape, np.round(np.asarray(gaps) * 1000, 2))
        checked += 1
    assert checked >= 4


def test_upright_objects_rest_their_boxes_on_the_table(full_size_scene: tuple[View, list]) -> None:
    """An upright object's box bottom is the table top (z = 0): it neither floats nor sinks."""
    _, objects = full_size_scene
    upright = 0
    for obj, truth in objects:
        up = Rotation.from_quat(obj.orientation).as_matrix()[2]  # world z in the object's frame
        if np.max(np.abs(up)) < np.cos(np.radians(1.0)):
            continue  # a tilted object's box dips a corner below the table
        # the mug's collision mesh reaches 1 mm below its visible bottom
        assert -0.0005 < truth.obb_corners_world[:, 2].min() < 0.0015, (truth.name, obj.shape)
        upright += 1
    assert upright >= 3
