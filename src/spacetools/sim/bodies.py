"""The pybullet bodies of a tabletop world: the table with its floor, the Franka Panda, and objects."""

from __future__ import annotations

import numpy as np

from spacetools.sim.bullet import pybullet, pybullet_data
from spacetools.sim.scene import Rgba, Vec3

TABLE_HALF_EXTENTS = (0.5, 0.5, 0.025)
"""The table top (its upper surface is the world plane z = 0)."""
TABLE_HEIGHT = 0.75
TIMESTEP = 1.0 / 240.0
ROBOT_ASSET = "franka_panda/panda.urdf"
ROBOT_BASE = (0.0, 0.45, 0.0)
ROBOT_NEUTRAL_JOINTS = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04, 0.04)

_TABLE_COLOR = (0.62, 0.47, 0.33, 1.0)
_FLOOR_COLOR = (0.55, 0.55, 0.58, 1.0)


def connect() -> int:
    """A new DIRECT pybullet client with pybullet_data on its search path, gravity and our time step."""
    client: int = pybullet.connect(pybullet.DIRECT)
    pybullet.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=client)
    pybullet.setGravity(0.0, 0.0, -9.81, physicsClientId=client)
    pybullet.setTimeStep(TIMESTEP, physicsClientId=client)
    return client


def static_box(client: int, half_extents: Vec3, position: Vec3, rgba: Rgba) -> int:
    """A fixed box (mass 0) at `position`."""
    collision = pybullet.createCollisionShape(
        pybullet.GEOM_BOX, halfExtents=half_extents, physicsClientId=client
    )
    visual = pybullet.createVisualShape(
        pybullet.GEOM_BOX, halfExtents=half_extents, rgbaColor=rgba, physicsClientId=client
    )
    body: int = pybullet.createMultiBody(0.0, collision, visual, position, physicsClientId=client)
    return body


def add_table(client: int) -> int:
    """A table whose top surface is z = 0, four legs and a floor; returns the table top's body id."""
    hx, hy, hz = TABLE_HALF_EXTENTS
    top = static_box(client, (hx, hy, hz), (0.0, 0.0, -hz), _TABLE_COLOR)
    leg_half = (0.03, 0.03, (TABLE_HEIGHT - 2 * hz) / 2)
    for sx in (-1, 1):
        for sy in (-1, 1):
            static_box(
                client, leg_half, (sx * (hx - 0.06), sy * (hy - 0.06), -2 * hz - leg_half[2]), _TABLE_COLOR
            )
    static_box(client, (3.0, 3.0, 0.01), (0.0, 0.0, -TABLE_HEIGHT - 0.01), _FLOOR_COLOR)
    return top


def add_robot(client: int, joints: tuple[float, ...] = ROBOT_NEUTRAL_JOINTS) -> int:
    """The Franka Panda at the table's far edge, facing the table, its movable joints at `joints`."""
    facing = pybullet.getQuaternionFromEuler((0.0, 0.0, -np.pi / 2))
    robot: int = pybullet.loadURDF(ROBOT_ASSET, ROBOT_BASE, facing, useFixedBase=True, physicsClientId=client)
    for joint, angle in zip(movable_joints(client, robot), joints, strict=True):
        pybullet.resetJointState(robot, joint, angle, physicsClientId=client)
    return robot


def movable_joints(client: int, robot: int) -> list[int]:
    """The robot's movable joints in order (the arm's seven, then the two fingers)."""
    return [
        joint
        for joint in range(pybullet.getNumJoints(robot, physicsClientId=client))
        if pybullet.getJointInfo(robot, joint, physicsClientId=client)[2] != pybullet.JOINT_FIXED
    ]


def create_body(
    client: int, shape: str, asset: str | None, scale: float, half_extents: Vec3, rgba: Rgba | None
) -> int:
    """Create one object at the origin: a procedural primitive or a pybullet_data URDF."""
    if shape == "asset":
        if asset is None:
            raise ValueError("an asset object needs an asset path")
        try:
            body: int = pybullet.loadURDF(asset, globalScaling=scale, physicsClientId=client)
        except pybullet.error as error:
            raise ValueError(f"cannot load asset {asset!r} from pybullet_data: {error}") from error
        if rgba is not None:
            pybullet.changeVisualShape(body, -1, rgbaColor=rgba, physicsClientId=client)
        return body
    color = rgba or (0.7, 0.7, 0.7, 1.0)
    if shape == "box":
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_BOX, halfExtents=half_extents, physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_BOX, halfExtents=half_extents, rgbaColor=color, physicsClientId=client
        )
    elif shape == "cylinder":
        radius, height = half_extents[0], 2 * half_extents[2]
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_CYLINDER, radius=radius, height=height, physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_CYLINDER, radius=radius, length=height, rgbaColor=color, physicsClientId=client
        )
    elif shape == "sphere":
        collision = pybullet.createCollisionShape(
            pybullet.GEOM_SPHERE, radius=half_extents[0], physicsClientId=client
        )
        visual = pybullet.createVisualShape(
            pybullet.GEOM_SPHERE, radius=half_extents[0], rgbaColor=color, physicsClientId=client
        )
    else:
        raise ValueError(f"unknown shape {shape!r}")
    body = pybullet.createMultiBody(0.1, collision, visual, physicsClientId=client)
    pybullet.changeDynamics(body, -1, lateralFriction=0.8, rollingFriction=0.002, physicsClientId=client)
    return body


def collision_box(client: int, body: int) -> tuple[Vec3, Vec3]:
    """Half extents and centre of a body's collision bounds (shapes plus margin) in its base frame.

    This is the body's physical reach, used to drop and space objects; the ground-truth box is the tighter
    visual one (`visual_box`).
    """
    pybullet.resetBasePositionAndOrientation(
        body, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), physicsClientId=client
    )
    low, high = (np.asarray(v) for v in pybullet.getAABB(body, physicsClientId=client))
    half, centre = (high - low) / 2.0, (high + low) / 2.0
    return (float(half[0]), float(half[1]), float(half[2])), (
        float(centre[0]),
        float(centre[1]),
        float(centre[2]),
    )
