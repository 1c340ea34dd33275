"""Ground-truth success checks of a robot episode, read from the simulated world after it ran.

Picked: the target was lifted at least 5 cm and both fingers still held it after a second (what
`RobotWorld` measured at the end of each grasp). Placed: the target ended at rest, out of the
gripper, where the goal says: its centre over the container's footprint, or in the band on the
asked side of the anchor (`sim.freespace.side_band`, widened by `SIDE_TOLERANCE_M`), or of a pair
of like objects beyond both (`sim.freespace.pair_band`, widened the same way, off both footprints).
Pick & place scores one point for the pick and one for the place, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from shapely.geometry import Point

from spacetools.bench.robot.tasks import RobotTask, initial_observation, plural
from spacetools.sim.bullet import pybullet
from spacetools.sim.freespace import pair_band, side_band
from spacetools.sim.robot import RobotWorld

SIDE_TOLERANCE_M = 0.03
RESTING_SPEED = 0.05
"""Metres per second below which an object counts as at rest."""


@dataclass(frozen=True)
class Outcome:
    """The checks of one episode: points earned out of points possible."""

    picked: bool
    placed: bool | None
    """None for tasks without a place goal."""
    reason: str

    @property
    def points(self) -> int:
        return int(self.picked) + int(bool(self.placed))

    @property
    def possible(self) -> int:
        return 1 if self.placed is None else 2


def check(task: RobotTask, world: RobotWorld | None) -> Outcome:
    """Score an episode from its world (None: the policy never moved the robot)."""
    has_goal = task.goal is not None
    if world is None:
        return Outcome(False, False if has_goal else None, "the robot was never used")
    target = world.scene.object_bodies[task.target]
    picked = any(p.body == target and p.picked for p in world.log.picks)
    wrong = [p for p in world.log.picks if p.picked and p.body != target]
    if not picked:
        reason = "picked the wrong object" if wrong else "the target was not picked"
        return Outcome(False, False if has_goal else None, reason)
    if task.goal is None:
        return Outcome(True, None, "picked")
    placed, reason = _placed(task, world, target)
    return Outcome(True, placed, reason)


def _placed(task: RobotTask, world: RobotWorld, body: int) -> tuple[bool, str]:
    assert task.goal is not None
    if world.touches_robot(body):
        return False, "the object is still in the gripper"
    velocity = np.asarray(pybullet.getBaseVelocity(body, physicsClientId=world.client)[0])
    if float(np.linalg.norm(velocity)) > RESTING_SPEED:
        return False, "the object is not at rest"
    position = world.position(body)
    if position[2] < -0.05:
        return False, "the object fell off the table"
    obs = initial_observation(task)
    centre = Point(float(position[0]), float(position[1]))
    goal = task.goal
    if goal.relation == "in":
        region = obs.footprint(goal.anchor)
    elif goal.twin is None:
        region = side_band(obs, goal.anchor, goal.relation).buffer(SIDE_TOLERANCE_M)
        region = region.difference(obs.footprint(goal.anchor))
    else:
        region = pair_band(obs, goal.anchor, goal.twin, goal.relation).buffer(SIDE_TOLERANCE_M)
        region = region.difference(obs.footprint(goal.anchor)).difference(obs.footprint(goal.twin))
    if region.contains(centre):
        return True, "placed"
    anchor = obs.objects[goal.anchor].name
    anchor = f"the two {plural(anchor)}" if goal.twin is not None else f"the {anchor}"
    return False, f"the object rests outside the goal region ({goal.relation} {anchor})"
