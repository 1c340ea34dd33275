"""The simulated world: determinism, rebuilding, saving, and ground truth that agrees with the renders."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from shapely import contains_xy
from shapely.geometry import MultiPoint

from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.layout import build_scene
from spacetools.sim.scene import ObjectSpec, SceneSpec
from spacetools.sim.world import Scene, View, load_scene

SEEDS = (0, 1, 2, 3, 11)
W, H = 320, 240


@pytest.fixture(scope="module", params=SEEDS)
def rendered(request: pytest.FixtureRequest) -> Iterator[tuple[Scene, View, list[ObjectTruth]]]:
    with build_scene(request.param, width=W, height=H, with_robot=request.param == 3) as scene:
        view = scene.render()
        yield scene, view, scene.ground_truth(view)


def test_scene_contents(rendered: tuple[Scene, View, list[ObjectTruth]]) -> None:
    scene, view, truths = rendered
    names = [obj.name for obj in scene.spec.objects]
    assert 3 <= len(names) <= 10 and len(set(names)) == len(names)
    assert view.rgb.shape == (H, W, 3) and view.rgb.dtype == np.uint8
    assert view.depth.dtype == np.float32 and view.segmentation.dtype == np.int32
    assert set(np.unique(view.segmentation)) <= {-1, *range(len(names))}
    assert [truth.name for truth in truths] == names
    bodies = scene.object_bodies
    for body in bodies:  # resting on the table top, neither sunk into it nor floating
        near = pybullet.getClosestPoints(body, scene.table_body, 0.005, physicsClientId=scene.client)
        assert near and all(point[8] > -0.004 for point in near)
    for i, body in enumerate(bodies):  # and not interpenetrating
        for other in bodies[i + 1 :]:
            contacts = pybullet.getClosestPoints(body, other, 0.0, physicsClientId=scene.client)
            assert all(point[8] > -0.004 for point in contacts)


def test_projected_corners_enclose_the_mask(rendered: tuple[Scene, View, list[ObjectTruth]]) -> None:
    _, _, truths = rendered
    ys, xs = np.mgrid[0:H, 0:W]
    for truth in truths:
        if not truth.mask.any():
            continue
        hull = MultiPoint((truth.obb_corners_2d * [W, H]).tolist()).convex_hull.buffer(0.75)
        inside = contains_xy(hull, xs[truth.mask] + 0.5, ys[truth.mask] + 0.5)
        assert inside.mean() > 0.99, truth.name
        x1, y1, x2, y2 = truth.bbox_2d
        assert 0 <= x1 < truth.centroid_2d[0] < x2 <= 1 and 0 <= y1 < truth.centroid_2d[1] < y2 <= 1


def test_depth_agrees_with_camera_frame_boxes(rendered: tuple[Scene, View, list[ObjectTruth]]) -> None:
    _, view, truths = rendered
    for truth in truths:
        if not truth.mask.any():
            continue
        # every masked pixel's back-projected point lies on the object's box (within 2 mm)
        points = view.point_cloud(truth.mask).astype(np.float64)
        axes = truth.obb_corners_camera[[1, 3, 4]] - truth.obb_corners_camera[0]
        lengths = np.linalg.norm(axes, axis=1)
        local = (points - truth.obb_corners_camera[0]) @ (axes / lengths[:, None]).T
        assert np.all((local > -0.002) & (local < lengths + 0.002)), truth.name
        # the depth under the mask centroid is within half the box's diagonal of the box centre's depth
        px = min(int(truth.centroid_2d[0] * W), W - 1), min(int(truth.centroid_2d[1] * H), H - 1)
        if truth.mask[px[1], px[0]]:
            gap = truth.position_camera[2] - view.depth[px[1], px[0]]
            assert abs(gap) < np.linalg.norm(truth.extent) / 2 + 0.002, truth.name


def test_grasps_are_feasible_for_most_objects(rendered: tuple[Scene, View, list[ObjectTruth]]) -> None:
    _, view, truths = rendered
    graspable = [truth for truth in truths if truth.grasp_pose is not None]
    assert len(graspable) >= 0.6 * len(truths)
    for truth in graspable:
        assert truth.grasp_points_2d.shape == (5, 2)
        assert 0 < truth.grasp_width <= 0.08
        rotation = truth.grasp_pose[:3, :3]
        np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-9)
        down_in_camera = np.linalg.inv(view.camera.cam_to_world[:3, :3]) @ [0.0, 0.0, -1.0]
        np.testing.assert_allclose(rotation[:, 2], down_in_camera, atol=1e-9)  # approach = -world z
        assert 0.0 <= truth.visible_fraction <= 1.0


def test_point_cloud_is_the_backprojected_depth(rendered: tuple[Scene, View, list[ObjectTruth]]) -> None:
    _, view, _ = rendered
    cloud = view.point_cloud()
    assert cloud.dtype == np.float32 and cloud.shape[1] == 3
    np.testing.assert_allclose(
        np.sort(cloud[:, 2]), np.sort(view.depth[view.depth < view.camera.far * 0.999])
    )
    with pytest.raises(ValueError, match="mask shape"):
        view.point_cloud(np.ones((2, 2), dtype=bool))


def test_same_seed_same_world_and_rebuild_from_spec() -> None:
    with build_scene(5, width=W, height=H) as first, build_scene(5, width=W, height=H) as second:
        assert first.spec.model_dump_json() == second.spec.model_dump_json()
        view = first.render()
        rebuilt_spec = SceneSpec.model_validate_json(first.spec.model_dump_json())
        with Scene.from_spec(rebuilt_spec) as rebuilt:
            again = rebuilt.render()
        np.testing.assert_array_equal(view.rgb, again.rgb)
        np.testing.assert_array_equal(view.depth, again.depth)
        np.testing.assert_array_equal(view.segmentation, again.segmentation)
    with build_scene(6, width=W, height=H) as other:
        assert other.spec.model_dump_json() != first.spec.model_dump_json()


def test_save_is_byte_identical_across_processes_and_loads(tmp_path: Path) -> None:
    with build_scene(8, n_objects=4, width=W, height=H) as scene:
        scene.save(tmp_path / "a")
    code = (
        "import sys; from spacetools.sim import build_scene; "
        f"build_scene(8, n_objects=4, width={W}, height={H}).save(sys.argv[1])"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "b")], check=True, capture_output=True, timeout=120
    )
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["depth.npy", "objects.json", "rgb.png", "scene.json", "segmentation.npy"]
    for file in files:
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    with load_scene(tmp_path / "a") as loaded:
        assert len(loaded.spec.objects) == 4
        np.testing.assert_array_equal(
            loaded.render().segmentation, np.load(tmp_path / "a" / "segmentation.npy")
        )
    with pytest.raises(FileNotFoundError, match=r"scene\.json"):
        load_scene(tmp_path)


def test_duplicates_share_a_name_on_request() -> None:
    with build_scene(4, n_objects=5, width=W, height=H, allow_duplicates=True) as scene:
        names = [obj.name for obj in scene.spec.objects]
        assert len(set(names)) == 4
        duplicated = max(set(names), key=names.count)
        assert len(scene.spec.object_named(duplicated)) == 2


def test_other_cameras_and_bad_arguments() -> None:
    with build_scene(9, n_objects=3, width=W, height=H) as scene:
        top = Camera.look_at((0.0, -0.01, 1.2), (0.0, 0.0, 0.0), 160, 120)
        view = scene.render(top)
        assert view.rgb.shape == (120, 160, 3)
        assert {truth.index for truth in scene.ground_truth(view)} == {0, 1, 2}
        assert (view.segmentation >= 0).any()
    with pytest.raises(RuntimeError, match="closed"):
        scene.render()
    with pytest.raises(ValueError, match="n_objects"):
        build_scene(0, n_objects=11)
    with pytest.raises(ValueError, match="at least 2"):
        build_scene(0, n_objects=1, allow_duplicates=True)


def _box_spec(
    index: int, position: tuple[float, float, float], half: tuple[float, float, float]
) -> ObjectSpec:
    return ObjectSpec(index=index, name=f"box {index}", category="box", color="red", shape="box",
                      rgba=(0.9, 0.1, 0.1, 1.0), position=position, orientation=(0.0, 0.0, 0.0, 1.0),
                      half_extents=half)  # fmt: skip


def test_visible_fraction_measures_occlusion() -> None:
    camera = Camera.look_at((0.0, -0.8, 0.1), (0.0, 0.0, 0.03), W, H)
    objects = [
        _box_spec(0, (0.0, 0.1, 0.03), (0.03, 0.03, 0.03)),  # partly hidden behind the wall
        _box_spec(1, (0.02, -0.05, 0.04), (0.03, 0.01, 0.04)),  # the wall, in front
        _box_spec(2, (0.02, 0.2, 0.01), (0.01, 0.01, 0.01)),  # small, fully behind the wall
        _box_spec(3, (0.25, 0.0, 0.02), (0.02, 0.02, 0.02)),  # in the open
    ]
    with Scene.from_spec(SceneSpec(seed=0, objects=objects, camera=camera.to_dict())) as scene:
        truths = scene.ground_truth()
    fractions = [truth.visible_fraction for truth in truths]
    assert 0.1 < fractions[0] < 0.8
    assert fractions[1] == pytest.approx(1.0)
    assert fractions[2] == 0.0 and not truths[2].mask.any()
    assert fractions[3] == pytest.approx(1.0)
