"""Simulated world speed: scene build, rebuild from spec, render per view and ground truth per view.

Targets (one core): at least 5 views/s at 320x240 and 3 views/s at 640x480. The process pins itself to one
CPU core where the OS allows it, so the figures are single-core figures.

    python benchmarks/sim_render.py [--json] [--scenes N] [--views N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import numpy as np

from spacetools.sim.layout import build_scene, sample_camera
from spacetools.sim.world import Scene

RESOLUTIONS = ((320, 240), (640, 480))
TARGET_VIEWS_PER_S = {(320, 240): 5.0, (640, 480): 3.0}


def _pin_to_one_core() -> bool:
    if not hasattr(os, "sched_setaffinity"):
        return False
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return True


def _timed(action: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = action(*args, **kwargs)
    return result, time.perf_counter() - start


def measure(n_scenes: int, n_views: int, with_robot: bool) -> dict[str, Any]:
    """Median seconds per scene build / rebuild, and per view for render and ground truth, per resolution."""
    results: dict[str, Any] = {"with_robot": with_robot, "resolutions": {}}
    builds, rebuilds = [], []
    per_resolution: dict[tuple[int, int], dict[str, list[float]]] = {
        res: {"render": [], "ground_truth": []} for res in RESOLUTIONS
    }
    for seed in range(n_scenes):
        scene, seconds = _timed(build_scene, seed, n_objects=8, with_robot=with_robot)
        builds.append(seconds)
        rebuilt, seconds = _timed(Scene.from_spec, scene.spec)
        rebuilds.append(seconds)
        rebuilt.close()
        rng = np.random.default_rng(1000 + seed)
        with scene:
            for width, height in RESOLUTIONS:
                for _ in range(n_views):
                    camera = sample_camera(rng, width, height)
                    view, seconds = _timed(scene.render, camera)
                    per_resolution[(width, height)]["render"].append(seconds)
                    _, seconds = _timed(scene.ground_truth, view)
                    per_resolution[(width, height)]["ground_truth"].append(seconds)
    results["build_s"] = statistics.median(builds)
    results["rebuild_from_spec_s"] = statistics.median(rebuilds)
    for (width, height), times in per_resolution.items():
        render_s = statistics.median(times["render"])
        truth_s = statistics.median(times["ground_truth"])
        results["resolutions"][f"{width}x{height}"] = {
            "render_s": render_s,
            "ground_truth_s": truth_s,
            "views_per_s": 1.0 / render_s,
            "views_with_truth_per_s": 1.0 / (render_s + truth_s),
            "target_views_per_s": TARGET_VIEWS_PER_S[(width, height)],
            "meets_target": 1.0 / render_s >= TARGET_VIEWS_PER_S[(width, height)],
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenes", type=int, default=4, help="scenes per configuration (8 objects each)")
    parser.add_argument("--views", type=int, default=5, help="random views per scene and resolution")
    args = parser.parse_args()
    pinned = _pin_to_one_core()
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_1min_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "one_core": pinned,
        "scenes": args.scenes,
        "views_per_scene": args.views,
        "runs": [measure(args.scenes, args.views, with_robot) for with_robot in (False, True)],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"sim_render: {args.scenes} scenes x {args.views} views, 8 objects, one core: {pinned}")
    for run in report["runs"]:
        robot = "with robot" if run["with_robot"] else "no robot"
        print(
            f"  [{robot}] build {run['build_s'] * 1000:.0f} ms, "
            f"rebuild from spec {run['rebuild_from_spec_s'] * 1000:.0f} ms"
        )
        for name, figures in run["resolutions"].items():
            verdict = "meets" if figures["meets_target"] else "MISSES"
            print(
                f"    {name}: render {figures['render_s'] * 1000:.1f} ms "
                f"({figures['views_per_s']:.1f} views/s, "
                f"{verdict} target {figures['target_views_per_s']:.0f}/s), ground truth "
                f"{figures['ground_truth_s'] * 1000:.1f} ms "
                f"({figures['views_with_truth_per_s']:.1f} views/s with it)"
            )


if __name__ == "__main__":
    main()
