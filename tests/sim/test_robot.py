"""The simulated Panda: grasps held by contact physics, checked motions, clear motion errors."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.sim.bullet import pybullet
from spacetools.sim.layout import build_scene
from spacetools.sim.robot import PICK_MIN_LIFT, MotionError, RobotWorld

SEED = 1  # a scene whose first object (a ball) has a top-down ground-truth grasp in reach


@pytest.fixture
def world() -> RobotWorld:
    with RobotWorld(build_scene(SEED, n_objects=4, with_robot=True), record_frames=False) as live:
        yield live


def _truth_grasp(world: RobotWorld, index: int = 0) -> np.ndarray:
    truth = world.scene.ground_truth()[index]
    assert truth.grasp_pose is not None
    return world.camera.cam_to_world @ truth.grasp_pose


def test_grasp_lifts_the_object_by_friction_and_place_lets_it_rest(world: RobotWorld) -> None:
    body = world.scene.object_bodies[0]
    report = world.grasp(_truth_grasp(world))
    assert report.success and report.execution_time_s > 1.0
    outcome = world.log.picks[-1]
    assert outcome.body == body and outcome.held and outcome.lift_m >= PICK_MIN_LIFT and outcome.picked
    assert world.gripper_opening() > 0.01  # the fingers stopped on the object, not closed
    # No constraint glues the object: opening the fingers lets it fall back to the table.
    target = np.array([0.0, -0.12, 0.0])
    placed = world.place(target)
    assert placed.success
    assert not world.touches_robot(body)
    position = world.position(body)
    assert np.linalg.norm(position[:2] - target[:2]) < 0.05 and position[2] < 0.06
    assert world.log.steps > 0 and world.log.first_motion_at is not None


def test_grasp_in_empty_air_reports_an_empty_gripper(world: RobotWorld) -> None:
    pose = _truth_grasp(world)
    pose[:3, 3] = [0.2, -0.15, 0.15]  # nothing there
    report = world.grasp(pose)
    assert not report.success and "empty grasp" in report.message
    assert not world.log.picks[-1].picked


def test_unreachable_pose_is_a_motion_error_and_the_arm_stays(world: RobotWorld) -> None:
    pose = _truth_grasp(world)
    pose[:3, 3] = [1.5, -1.5, 0.1]
    before = world.tcp_pose()[0]
    with pytest.raises(MotionError, match="no inverse-kinematics solution"):
        world.grasp(pose)
    assert np.allclose(world.tcp_pose()[0], before, atol=1e-3)


def test_a_path_through_the_table_is_a_collision(world: RobotWorld) -> None:
    pose = _truth_grasp(world)
    pose[:3, 3] = [0.15, -0.15, -0.08]  # the fingers would end inside the table top
    with pytest.raises(MotionError, match="collide with the table"):
        world.grasp(pose)


def test_place_without_an_object_and_bad_input_are_motion_errors(world: RobotWorld) -> None:
    with pytest.raises(MotionError, match="holds nothing"):
        world.place([0.0, 0.0, 0.0])
    with pytest.raises(MotionError, match="finite 4x4"):
        world.grasp(np.eye(3))


def test_a_heavy_object_slips_out_and_cannot_be_placed(world: RobotWorld) -> None:
    body = world.scene.object_bodies[0]
    assert world.grasp(_truth_grasp(world)).success
    # The hold is friction against weight: made 50 kg, the object slides out of the closed fingers.
    pybullet.changeDynamics(body, -1, mass=50.0, physicsClientId=world.client)
    world._step(240)
    assert not world.pick_outcome(body).picked
    assert world.gripper_opening() < 0.003
    with pytest.raises(MotionError, match="dropped"):
        world.place([0.0, -0.1, 0.0])
