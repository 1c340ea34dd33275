"""The simulated world: seeded pybullet tabletop scenes, cameras, rendering and per-object ground truth."""

from spacetools.sim.camera import Camera
from spacetools.sim.gripper import FINGER_LENGTH, GRIPPER_MAX_WIDTH, gripper_points
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.layout import build_scene
from spacetools.sim.scene import ObjectSpec, SceneSpec
from spacetools.sim.world import Scene, View, load_scene

__all__ = [
    "FINGER_LENGTH",
    "GRIPPER_MAX_WIDTH",
    "Camera",
    "ObjectSpec",
    "ObjectTruth",
    "Scene",
    "SceneSpec",
    "View",
    "build_scene",
    "gripper_points",
    "load_scene",
]
