"""Simulated arm speed: physics steps per second, and wall seconds per grasp and per place motion.

Each round builds a seeded scene with the robot, grasps its first object at the ground-truth grasp and
places it on the table, once recording report frames and once without (side by side, same scenes).

    python benchmarks/robot_motion.py [--json] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from typing import Any

from spacetools.sim.layout import build_scene
from spacetools.sim.robot import MotionError, RobotWorld

SEEDS = (1, 2, 3, 5, 7, 11)


def one_round(seed: int, record_frames: bool) -> dict[str, float] | None:
    """Grasp and place in one scene; None when its first object has no top-down grasp in reach."""
    with RobotWorld(build_scene(seed, n_objects=4, with_robot=True), record_frames=record_frames) as world:
        truth = world.scene.ground_truth()[0]
        if truth.grasp_pose is None:
            return None
        started = time.perf_counter()
        try:
            grasped = world.grasp(world.camera.cam_to_world @ truth.grasp_pose)
            grasp_s = time.perf_counter() - started
            if not grasped.success:
                return None
            started = time.perf_counter()
            world.place([0.0, -0.12, 0.0])
        except MotionError:
            return None
        place_s = time.perf_counter() - started
        return {
            "steps": world.log.steps,
            "step_s": world.log.step_wall_s,
            "grasp_s": grasp_s,
            "place_s": place_s,
        }


def measure(rounds: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for record_frames in (False, True):
        rows = [r for seed in SEEDS[:rounds] if (r := one_round(seed, record_frames)) is not None]
        steps, step_s = sum(r["steps"] for r in rows), sum(r["step_s"] for r in rows)
        figures["frames" if record_frames else "no_frames"] = {
            "rounds": len(rows),
            "steps_per_s": steps / step_s if step_s else None,
            "grasp_s": sum(r["grasp_s"] for r in rows) / max(1, len(rows)),
            "place_s": sum(r["place_s"] for r in rows) / max(1, len(rows)),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    figures = measure(args.rounds)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.json:
        print(json.dumps({"date": stamp, "load": load, **figures}, indent=2))
        return
    print(f"{stamp}, load {load:.1f}")
    for name, row in figures.items():
        print(f"{name}: {row}")


if __name__ == "__main__":
    main()
