"""Run a policy on the robot task suite with live tools and score each episode on the world's truth.

The V1 tools run as usual; the robot tool runs in this process over a `SimulatedRobots` pool, so
that after each episode the evaluation can read the world it left behind (the truth never goes
through the tools). Output folder: `episodes.jsonl` (one row per episode: task, outcome, timing,
trajectory), `summary.json` (per category), `report.html` and per-episode motion frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spacetools.agent.rollout import run_episode
from spacetools.agent.types import Policy, Trajectory
from spacetools.bench.robot.checks import Outcome, check
from spacetools.bench.robot.tasks import CATEGORIES, RobotTask
from spacetools.bench.runlog import run_log
from spacetools.tools.robot.simulated import SimulatedRobots
from spacetools.tools.robot.tool import RobotTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.toolsets import V1

EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
DEFAULT_MAX_TURNS = 10
logger = logging.getLogger(__name__)


@dataclass
class EpisodeResult:
    """One scored robot episode."""

    task: RobotTask
    outcome: Outcome
    trajectory: Trajectory
    time_to_first_motion_s: float | None
    wall_s: float
    sim_steps: int
    step_wall_s: float
    """Wall seconds spent in physics steps (for steps per second)."""
    frames: list[Any] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """The JSON row of `episodes.jsonl`."""
        return {
            "id": self.task.id,
            "category": self.task.category,
            "question": self.task.question,
            "picked": self.outcome.picked,
            "placed": self.outcome.placed,
            "points": self.outcome.points,
            "possible": self.outcome.possible,
            "reason": self.outcome.reason,
            "time_to_first_motion_s": self.time_to_first_motion_s,
            "wall_s": self.wall_s,
            "sim_steps": self.sim_steps,
            "step_wall_s": self.step_wall_s,
            "trajectory": self.trajectory.to_dict(),
        }


@dataclass
class CategorySummary:
    """Per category: success rate (points over possible points), episodes and timings."""

    category: str
    episodes: int
    points: int
    possible: int
    time_to_first_motion_s: float | None
    seconds_per_episode: float

    @property
    def success_rate(self) -> float:
        return self.points / self.possible if self.possible else 0.0


def summarize(results: list[EpisodeResult]) -> list[CategorySummary]:
    """One summary per category present, in suite order."""
    summaries = []
    for category in CATEGORIES:
        rows = [r for r in results if r.task.category == category]
        if not rows:
            continue
        motions = [r.time_to_first_motion_s for r in rows if r.time_to_first_motion_s is not None]
        summaries.append(
            CategorySummary(
                category=category,
                episodes=len(rows),
                points=sum(r.outcome.points for r in rows),
                possible=sum(r.outcome.possible for r in rows),
                time_to_first_motion_s=sum(motions) / len(motions) if motions else None,
                seconds_per_episode=sum(r.wall_s for r in rows) / len(rows),
            )
        )
    return summaries


def robot_toolset(robots: SimulatedRobots) -> list[ToolDeployment]:
    """V1 as usual, and the robot in this process over `robots` (one instance: pybullet is one lock)."""
    robot = ToolDeployment(
        tool=RobotTool, instances=1, backend="inprocess", timeout_s=300, config={"robots": robots}
    )
    return [*V1, robot]


async def run_robot_episode(
    policy: Policy, toolshed: Toolshed, robots: SimulatedRobots, task: RobotTask, max_turns: int, seed: int
) -> EpisodeResult:
    """Run one task, then score it on the world it left and free that world."""
    started = time.perf_counter()
    trajectory = await run_episode(policy, toolshed, task.episode_input(), max_turns=max_turns, seed=seed)
    wall_s = time.perf_counter() - started
    robot = robots.find_by_scene(task.scene)
    world = robot.world if robot is not None else None
    outcome = check(task, world)
    first = world.log.first_motion_at if world is not None else None
    result = EpisodeResult(
        task=task,
        outcome=outcome,
        trajectory=trajectory,
        time_to_first_motion_s=None if first is None else first - started,
        wall_s=wall_s,
        sim_steps=world.log.steps if world is not None else 0,
        step_wall_s=world.log.step_wall_s if world is not None else 0.0,
        frames=list(world.log.frames) if world is not None else [],
    )
    if robot is not None:
        robots.release(robot)
    return result


def _log_episode(result: EpisodeResult) -> None:
    outcome = result.outcome
    logger.debug(
        "%s: %d/%d points in %.1f s (%s)",
        result.task.id,
        outcome.points,
        outcome.possible,
        result.wall_s,
        outcome.reason or result.trajectory.finish_reason,
    )
    if result.trajectory.error:
        logger.warning("%s: %s", result.task.id, result.trajectory.error)


def _points(results: list[EpisodeResult]) -> tuple[int, int]:
    return sum(r.outcome.points for r in results), sum(r.outcome.possible for r in results)


async def evaluate_robot(
    policy: Policy,
    tasks: Sequence[RobotTask | Callable[[], RobotTask]],
    *,
    profile: str = "exact",
    seed: int = 0,
    max_turns: int = DEFAULT_MAX_TURNS,
    concurrency: int = 1,
    out_dir: str | Path | None = None,
) -> list[EpisodeResult]:
    """Run every task (at most `concurrency` at once), score, and write the output folder if given.

    A task may be given as a function that builds it: it is built when its turn comes, so a long run
    writes its first episodes early.
    """
    robots = SimulatedRobots(max_worlds=max(8, 2 * concurrency), keep_closed=True)  # scored after close
    semaphore = asyncio.Semaphore(concurrency)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / EPISODES_FILE).write_text("")

    with run_log(out) if out is not None else contextlib.nullcontext():
        logger.info(
            "robot evaluation of %s: %d tasks, %s tools, seed %d", policy.name, len(tasks), profile, seed
        )
        async with Toolshed(robot_toolset(robots), profile=profile, seed=seed) as toolshed:

            async def one(task_or_builder: RobotTask | Callable[[], RobotTask]) -> EpisodeResult:
                async with semaphore:
                    task = (
                        task_or_builder
                        if isinstance(task_or_builder, RobotTask)
                        else await asyncio.to_thread(task_or_builder)
                    )
                    result = await run_robot_episode(policy, toolshed, robots, task, max_turns, seed)
                _log_episode(result)
                if out is not None:
                    with (out / EPISODES_FILE).open("a") as stream:
                        stream.write(json.dumps(result.row()) + "\n")
                return result

            try:
                results = list(await asyncio.gather(*(one(task) for task in tasks)))
            finally:
                robots.close()
        if out is not None:
            from spacetools.bench.robot.report import write_robot_report

            summary = [{**asdict(s), "success_rate": s.success_rate} for s in summarize(results)]
            (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
            write_robot_report(results, out)
        logger.info("%d episodes, %d of %d points", len(results), *_points(results))
    return results
