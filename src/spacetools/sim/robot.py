"""The Franka Panda beside the table: inverse kinematics, checked motions, a contact-physics gripper.

A `RobotWorld` owns one live scene with the robot (a robot is state: one world per episode). Grasps go
through a pre-grasp pose 10 cm back along the approach axis, descend in a straight line, close the
fingers under a force limit and lift; the object is held only by finger friction against its mass
(nothing glues it to the hand), so a poor grasp slips. Every planned path is checked for collisions
before the arm moves, kinematically, waypoint by waypoint; a failed IK, a collision or an unreachable
pose raises `MotionError` with a message a model can read, and the arm stays where it was.

What a real arm measures (its joints, its gripper opening, its RGB-D camera) is public; whether an
object was truly picked or placed (`pick_outcome`, `resting_objects`) is simulator truth, for scoring.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.spatial.transform import Rotation

from spacetools.sim.bodies import TIMESTEP, movable_joints
from spacetools.sim.bullet import pybullet
from spacetools.sim.camera import Camera
from spacetools.sim.scene import SceneSpec
from spacetools.sim.world import Scene, View

ARM_JOINTS = tuple(range(7))
FINGER_JOINTS = (9, 10)
TCP_LINK = 11
"""panda_grasptarget: between the finger tips."""
PALM_TO_TCP = 0.0466
"""From the palm centre between the finger bases (the grasp pose's origin) to the TCP link, metres."""
PRE_GRASP_DISTANCE = 0.10
LIFT_HEIGHT = 0.10
HOLD_TIME_S = 1.0
PICK_MIN_LIFT = 0.05
"""An object counts as picked when lifted at least this far and still held after `HOLD_TIME_S`."""
FINGER_FORCE = 40.0
FINGER_FRICTION = 2.0
EMPTY_OPENING = 0.003
"""A gripper closed below this opening holds nothing (what a real gripper's width sensor tells)."""
IK_TOLERANCE = 0.01
COLLISION_TOLERANCE = 0.004
"""Penetration deeper than this along a planned path is a collision (contact of the fingers is fine)."""
JOINT_SPEED = 1.2
"""Radians per second of the fastest joint along a free-space move."""
CARTESIAN_SPEED = 0.15
"""Metres per second of straight-line approach, lift and retreat moves."""
FRAME_EVERY_S = 0.5
FRAME_WIDTH = 160
RELEASE_CLEARANCE = 0.015
"""Height above the target surface at which a placed object is released, metres."""


class MotionError(Exception):
    """A motion that cannot be (or was not) carried out; the message is meant for the model."""


@dataclass
class PickOutcome:
    """Simulator truth after a grasp: which object (if any) rose how far and is still held."""

    body: int | None
    lift_m: float
    held: bool

    @property
    def picked(self) -> bool:
        return self.body is not None and self.held and self.lift_m >= PICK_MIN_LIFT


@dataclass
class MotionReport:
    """What the robot reports after a motion: success as its sensors tell, and simulated time."""

    success: bool
    message: str
    execution_time_s: float


@dataclass
class _Held:
    body: int | None
    tcp_height: float
    """TCP height above the table when the object was grasped (the object's bottom was on the table)."""
    orientation: NDArray[np.float64]


@dataclass
class RobotLog:
    """Bookkeeping for reports and benchmarks: steps, frames of the motion, first-motion wall time."""

    steps: int = 0
    step_wall_s: float = 0.0
    """Wall seconds spent inside physics steps (steps per second = steps / step_wall_s)."""
    frames: list[NDArray[np.uint8]] = field(default_factory=list)
    first_motion_at: float | None = None
    picks: list[PickOutcome] = field(default_factory=list)


class RobotWorld:
    """One episode's world: the table scene, the Panda and its calibrated RGB-D camera."""

    def __init__(self, scene: Scene, record_frames: bool = True) -> None:
        if scene.robot_body is None:
            raise ValueError("a RobotWorld needs a scene built with the robot")
        self.scene = scene
        self.robot = scene.robot_body
        self.client = scene.client
        self.record_frames = record_frames
        self.log = RobotLog()
        self._held: _Held | None = None
        self._since_frame = 0.0
        self._frame_camera = scene.camera.resized(
            FRAME_WIDTH, max(1, round(FRAME_WIDTH * scene.camera.height / scene.camera.width))
        )
        self._lower, self._upper = self._joint_limits()
        for link in FINGER_JOINTS:
            pybullet.changeDynamics(
                self.robot, link, lateralFriction=FINGER_FRICTION, spinningFriction=0.01,
                frictionAnchor=True, physicsClientId=self.client,
            )  # fmt: skip
        for body in scene.object_bodies:
            if pybullet.getDynamicsInfo(body, -1, physicsClientId=self.client)[0] > 0:
                pybullet.changeDynamics(body, -1, lateralFriction=1.0, physicsClientId=self.client)
        self._hold_arm(self._arm_positions())
        self._set_fingers(0.04)
        self._step(int(0.3 / TIMESTEP))
        self.initial_positions = {body: self.position(body) for body in scene.object_bodies}

    @classmethod
    def from_spec(cls, spec: SceneSpec, record_frames: bool = True) -> RobotWorld:
        """Rebuild a scene spec with the robot in it."""
        return cls(Scene.from_spec(spec.model_copy(update={"with_robot": True})), record_frames)

    # --- what a real robot exposes -------------------------------------------------------------

    @property
    def camera(self) -> Camera:
        """The robot's calibrated camera (intrinsics and pose in the world/robot frame)."""
        return self.scene.camera

    def render(self) -> View:
        """An RGB-D frame of the robot's camera."""
        return self.scene.render()

    def current_spec(self) -> SceneSpec:
        """The scene as it is now: every object where it rests (or is held), the arm as it stands.

        What a picture taken now shows, for the simulated perception tools to rebuild.
        """
        objects = []
        for body, obj in zip(self.scene.object_bodies, self.scene.spec.objects, strict=True):
            position, orientation = pybullet.getBasePositionAndOrientation(body, physicsClientId=self.client)
            objects.append(
                obj.model_copy(update={"position": tuple(position), "orientation": tuple(orientation)})
            )
        movable = movable_joints(self.client, self.robot)
        states = pybullet.getJointStates(self.robot, movable, physicsClientId=self.client)
        joints = tuple(float(state[0]) for state in states)
        return self.scene.spec.model_copy(
            update={"objects": objects, "with_robot": True, "robot_joints": joints}
        )

    def gripper_opening(self) -> float:
        """Distance between the fingers, metres (a real gripper's width sensor)."""
        return float(
            sum(pybullet.getJointState(self.robot, j, physicsClientId=self.client)[0] for j in FINGER_JOINTS)
        )

    def tcp_pose(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Position and xyzw orientation of the TCP in the world."""
        state = pybullet.getLinkState(self.robot, TCP_LINK, computeForwardKinematics=True,
                                      physicsClientId=self.client)  # fmt: skip
        return np.asarray(state[4]), np.asarray(state[5])

    def grasp(self, pose_world: ArrayLike) -> MotionReport:
        """Pre-grasp, straight approach, close, lift, hold one second; `MotionError` if it cannot move.

        `pose_world` is a 4x4 grasp pose in the world frame (z: approach, x: closing, origin: palm centre
        between the finger bases). Success means the fingers did not close on nothing.
        """
        if self._held is not None:
            raise MotionError("the gripper already holds an object; place it first")
        pose = np.asarray(pose_world, dtype=np.float64)
        if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
            raise MotionError(f"grasp_pose must be a finite 4x4 matrix, got shape {pose.shape}")
        approach = pose[:3, 2] / np.linalg.norm(pose[:3, 2])
        tcp = pose[:3, 3] + approach * PALM_TO_TCP
        orientation = _hand_orientation(pose[:3, :3])
        pre = tcp - approach * PRE_GRASP_DISTANCE
        target = self._object_near(tcp)
        started = self.log.steps
        self._mark_first_motion()
        self._set_fingers(0.04)
        self._move_free(pre, orientation, ignore=())
        self._move_line(tcp, orientation, ignore=(target,) if target is not None else ())
        self._set_fingers(0.0, settle_s=0.6)
        lifted = tcp + np.array([0.0, 0.0, LIFT_HEIGHT])
        self._move_line(lifted, orientation, ignore=(target,) if target is not None else (), check=False)
        self._step(int(HOLD_TIME_S / TIMESTEP))
        opening = self.gripper_opening()
        holding = opening > EMPTY_OPENING
        self.log.picks.append(self.pick_outcome(target))
        seconds = (self.log.steps - started) * TIMESTEP
        if not holding:
            self._set_fingers(0.04)
            return MotionReport(False, "the gripper closed on nothing (empty grasp)", seconds)
        self._held = _Held(target, float(tcp[2]), orientation)
        return MotionReport(True, f"object held, gripper opening {opening * 100:.1f} cm", seconds)

    def place(self, point_world: ArrayLike) -> MotionReport:
        """Carry the held object above `point_world` (a surface point), lower it there and let go."""
        if self._held is None:
            raise MotionError("the gripper holds nothing; execute a grasp first")
        point = np.asarray(point_world, dtype=np.float64).reshape(-1)
        if point.shape != (3,) or not np.all(np.isfinite(point)):
            raise MotionError(f"a placement point needs three finite coordinates, got {point.tolist()}")
        if self.gripper_opening() <= EMPTY_OPENING:
            self._held = None
            self._set_fingers(0.04)
            raise MotionError("the object was dropped before placing (the gripper is empty)")
        held = self._held
        carried = () if held.body is None else (held.body,)
        release = np.array([point[0], point[1], point[2] + held.tcp_height + RELEASE_CLEARANCE])
        above = release + np.array([0.0, 0.0, PRE_GRASP_DISTANCE])
        started = self.log.steps
        self._mark_first_motion()
        self._move_free(above, held.orientation, ignore=carried, carrying=held.body)
        self._move_line(release, held.orientation, ignore=carried, carrying=held.body)
        self._set_fingers(0.04, settle_s=0.4)
        self._held = None
        self._move_line(above, held.orientation, ignore=carried, check=False)
        self._step(int(0.5 / TIMESTEP))
        seconds = (self.log.steps - started) * TIMESTEP
        return MotionReport(True, "object released at the target", seconds)

    # --- simulator truth, for scoring ---------------------------------------------------------

    def position(self, body: int) -> NDArray[np.float64]:
        """World position of a body's base."""
        return np.asarray(pybullet.getBasePositionAndOrientation(body, physicsClientId=self.client)[0])

    def pick_outcome(self, body: int | None) -> PickOutcome:
        """How far `body` rose from where it started and whether both fingers touch it."""
        if body is None:
            return PickOutcome(None, 0.0, False)
        lift = float(self.position(body)[2] - self.initial_positions[body][2])
        touching = [
            bool(pybullet.getContactPoints(self.robot, body, linkIndexA=link, physicsClientId=self.client))
            for link in FINGER_JOINTS
        ]
        return PickOutcome(body, lift, all(touching))

    def touches_robot(self, body: int) -> bool:
        """Whether any part of the robot is in contact with `body`."""
        return bool(pybullet.getContactPoints(self.robot, body, physicsClientId=self.client))

    def close(self) -> None:
        """Release the world."""
        self.scene.close()

    def __enter__(self) -> RobotWorld:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- motion ------------------------------------------------------------------------------

    def _object_near(self, tcp: NDArray[np.float64]) -> int | None:
        """The object whose surface is closest to the grasp point (within 3 cm), ignored when descending.

        Geometry only decides which contacts the approach may make, like a planner's attached-object
        allowance; it never decides success.
        """
        probe = pybullet.createCollisionShape(pybullet.GEOM_SPHERE, radius=0.005, physicsClientId=self.client)
        marker = pybullet.createMultiBody(0.0, probe, basePosition=tcp.tolist(), physicsClientId=self.client)
        try:
            best, best_distance = None, 0.03
            for body in self.scene.object_bodies:
                for point in pybullet.getClosestPoints(marker, body, 0.03, physicsClientId=self.client):
                    if point[8] < best_distance:
                        best, best_distance = body, point[8]
            return best
        finally:
            pybullet.removeBody(marker, physicsClientId=self.client)

    def _joint_limits(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        info = [pybullet.getJointInfo(self.robot, j, physicsClientId=self.client) for j in ARM_JOINTS]
        return np.array([i[8] for i in info]), np.array([i[9] for i in info])

    def _arm_positions(self) -> NDArray[np.float64]:
        states = pybullet.getJointStates(self.robot, ARM_JOINTS, physicsClientId=self.client)
        return np.array([s[0] for s in states])

    def _solve_ik(self, position: NDArray[np.float64], orientation: NDArray[np.float64],
                  seed: NDArray[np.float64]) -> NDArray[np.float64]:  # fmt: skip
        """Joint angles putting the TCP at the pose, solved from `seed` and verified by forward kinematics."""
        saved = self._arm_positions()
        try:
            self._set_arm(seed)
            solution = seed
            for _ in range(3):  # a few refinements from the previous answer converge on the pose
                full = pybullet.calculateInverseKinematics(
                    self.robot, TCP_LINK, position.tolist(), orientation.tolist(),
                    lowerLimits=[*self._lower, 0.0, 0.0], upperLimits=[*self._upper, 0.04, 0.04],
                    jointRanges=[*(self._upper - self._lower), 0.04, 0.04],
                    restPoses=[*seed, 0.04, 0.04], maxNumIterations=200, residualThreshold=1e-5,
                    physicsClientId=self.client,
                )  # fmt: skip
                solution = np.clip(np.asarray(full[:7]), self._lower, self._upper)
                self._set_arm(solution)
            reached, reached_orientation = self.tcp_pose()
            with np.errstate(over="ignore"):  # a target of 1e300 m is out of reach, not an error
                error = float(np.linalg.norm(reached - position))
            angle = (
                Rotation.from_quat(reached_orientation).inv() * Rotation.from_quat(orientation)
            ).magnitude()
        finally:
            self._set_arm(saved)
        if error > IK_TOLERANCE or angle > 0.1:
            where = ", ".join(_metres(float(coordinate)) for coordinate in position)
            raise MotionError(
                f"no inverse-kinematics solution reaches ({where}) m: the pose is out of the arm's "
                "reach or against its joint limits"
            )
        return solution

    def _set_arm(self, positions: NDArray[np.float64]) -> None:
        for joint, angle in zip(ARM_JOINTS, positions, strict=True):
            pybullet.resetJointState(self.robot, joint, float(angle), physicsClientId=self.client)

    def _check_path(self, path: list[NDArray[np.float64]], ignore: tuple[int, ...],
                    carrying: int | None) -> None:  # fmt: skip
        """Raise `MotionError` if the arm, at any waypoint, would cut into the table or an object."""
        saved = self._arm_positions()
        obstacles = [self.scene.table_body, *(b for b in self.scene.object_bodies if b not in ignore)]
        names = {body: spec.name for body, spec in zip(self.scene.object_bodies, self.scene.spec.objects,
                                                        strict=True)}  # fmt: skip
        try:
            for waypoint in path:
                self._set_arm(waypoint)
                for body in obstacles:
                    movers = [self.robot, *([carrying] if carrying is not None else [])]
                    for mover in movers:
                        if mover == body:
                            continue
                        contacts = pybullet.getClosestPoints(mover, body, 0.0, physicsClientId=self.client)
                        if any(c[8] < -COLLISION_TOLERANCE for c in contacts):
                            what = "the table" if body == self.scene.table_body else f"the {names[body]}"
                            raise MotionError(f"the planned motion would collide with {what}")
        finally:
            self._set_arm(saved)

    def _move_free(self, position: NDArray[np.float64], orientation: NDArray[np.float64],
                   ignore: tuple[int, ...], carrying: int | None = None) -> None:  # fmt: skip
        """A joint-space move to a pose, checked for collisions before the arm moves."""
        start = self._arm_positions()
        goal = self._solve_ik(position, orientation, start)
        count = max(2, int(np.ceil(np.max(np.abs(goal - start)) / JOINT_SPEED / TIMESTEP)))
        path = [start + (goal - start) * (i / count) for i in range(1, count + 1)]
        self._check_path([*path[:: max(1, count // 20)], goal], ignore, carrying)
        self._follow(path)

    def _move_line(self, position: NDArray[np.float64], orientation: NDArray[np.float64],
                   ignore: tuple[int, ...], carrying: int | None = None, check: bool = True) -> None:  # fmt: skip
        """A straight-line TCP move (approach, lift, retreat), IK solved along the line."""
        start, _ = self.tcp_pose()
        distance = float(np.linalg.norm(position - start))
        count = max(2, int(np.ceil(distance / CARTESIAN_SPEED / TIMESTEP)))
        keyframes = max(2, int(np.ceil(distance / 0.01)))
        seed = self._arm_positions()
        joints = [seed]
        for i in range(1, keyframes + 1):
            seed = self._solve_ik(start + (position - start) * (i / keyframes), orientation, seed)
            joints.append(seed)
        if check:
            self._check_path(joints[1:], ignore, carrying)
        # The keyframes are 1 cm apart; the arm follows them at the Cartesian speed, one step per waypoint.
        stack = np.asarray(joints)
        keys = np.linspace(0.0, 1.0, keyframes + 1)
        times = np.arange(1, count + 1) / count
        path = [np.array([np.interp(t, keys, stack[:, j]) for j in range(len(ARM_JOINTS))]) for t in times]
        self._follow(path)

    def _follow(self, path: list[NDArray[np.float64]]) -> None:
        for waypoint in path:
            self._hold_arm(waypoint)
            self._step(1)
        self._step(int(0.15 / TIMESTEP))  # let the arm settle on the last waypoint

    def _hold_arm(self, positions: NDArray[np.float64]) -> None:
        pybullet.setJointMotorControlArray(
            self.robot, ARM_JOINTS, pybullet.POSITION_CONTROL, targetPositions=positions.tolist(),
            forces=[87.0] * 4 + [12.0] * 3, positionGains=[0.3] * 7, physicsClientId=self.client,
        )  # fmt: skip

    def _set_fingers(self, each: float, settle_s: float = 0.0) -> None:
        pybullet.setJointMotorControlArray(
            self.robot, FINGER_JOINTS, pybullet.POSITION_CONTROL, targetPositions=[each, each],
            forces=[FINGER_FORCE, FINGER_FORCE], physicsClientId=self.client,
        )  # fmt: skip
        self._step(int(settle_s / TIMESTEP))

    def _step(self, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            pybullet.stepSimulation(physicsClientId=self.client)
            self.log.step_wall_s += time.perf_counter() - started
            self.log.steps += 1
            self._since_frame += TIMESTEP
            if self.record_frames and self._since_frame >= FRAME_EVERY_S and self.log.first_motion_at:
                self._since_frame = 0.0
                self.log.frames.append(self.scene.render(self._frame_camera).rgb)

    def _mark_first_motion(self) -> None:
        if self.log.first_motion_at is None:
            self.log.first_motion_at = time.perf_counter()


def _hand_orientation(grasp_rotation: NDArray[np.float64]) -> NDArray[np.float64]:
    """The TCP orientation (xyzw) for a grasp rotation: hand z = approach, hand y = closing axis.

    A parallel gripper is symmetric, so of the two hand orientations (closing axis flipped) the one
    whose hand x axis points away from the robot's base is taken, near the wrist's home angle.
    """
    approach = grasp_rotation[:, 2] / np.linalg.norm(grasp_rotation[:, 2])
    closing = grasp_rotation[:, 0] - (grasp_rotation[:, 0] @ approach) * approach
    closing /= np.linalg.norm(closing)
    options = []
    for sign in (1.0, -1.0):
        y = sign * closing
        matrix = np.column_stack([np.cross(y, approach), y, approach])
        options.append(Rotation.from_matrix(matrix))
    best = max(options, key=lambda r: float(-r.as_matrix()[1, 0]))  # hand x towards -y (the camera side)
    return np.asarray(best.as_quat())


def _metres(value: float) -> str:
    """A coordinate to the millimetre, or in three significant digits when far beyond any arm's reach
    (so that a target of 1e300 m reads as such, not as 300 digits)."""
    return f"{value:.3f}" if abs(value) < 1e4 else f"{value:.3g}"
