"""Run a policy on the robot task suite with live tools and score each episode on the world's truth.

The V1 tools run as usual; the robot tool runs in this process over a `RobotWorlds` pool, so
that after each episode the evaluation can read the world it left behind (the truth never goes
through the tools). Output folder: `run.json` (the settings), `episodes.jsonl` (one row per episode:
task, outcome, timing, trajectory), `summary.json` (per category), `report.html` and per-episode motion
frames. Re-running into the same folder resumes as `spacetools eval` does: episodes already in
`episodes.jsonl` are not run again (a row torn by a kill is dropped), and a folder made with other
settings is refused with the differing ones named.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spacetools.agent.rollout import run_episode
from spacetools.agent.types import Policy, Trajectory
from spacetools.bench.robot.checks import Outcome, check
from spacetools.bench.robot.tasks import CATEGORIES, RobotTask
from spacetools.bench.runfolder import read_rows, repair_samples
from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.sim.robotworlds import RobotWorlds
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.connection import DEFAULT_PROFILE
from spacetools.toolshed.toolsets import ROBOT, V1, with_profile

EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
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

    @classmethod
    def from_row(cls, task: RobotTask, row: dict[str, Any]) -> EpisodeResult:
        """The result an earlier run wrote as ``row`` (its motion frames are in its episode folder)."""
        return cls(
            task=task,
            outcome=Outcome(picked=row["picked"], placed=row["placed"], reason=row["reason"]),
            trajectory=Trajectory.from_dict(row["trajectory"]),
            time_to_first_motion_s=row["time_to_first_motion_s"],
            wall_s=row["wall_s"],
            sim_steps=row["sim_steps"],
            step_wall_s=row["step_wall_s"],
        )


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


def robot_toolset(worlds: RobotWorlds) -> list[ToolDeployment]:
    """V1 as usual, and the robot in this process over `worlds` (one instance: pybullet is one lock)."""
    robot = ROBOT.model_copy(update={"instances": 1, "backend": "inprocess", "config": {"worlds": worlds}})
    return [*V1, robot]


async def run_robot_episode(
    policy: Policy, toolshed: Toolshed, worlds: RobotWorlds, task: RobotTask, max_turns: int, seed: int
) -> EpisodeResult:
    """Run one task, then score it on the world it left and free that world."""
    started = time.perf_counter()
    trajectory = await run_episode(policy, toolshed, task.episode_input(), max_turns=max_turns, seed=seed)
    wall_s = time.perf_counter() - started
    world = worlds.find_by_scene(task.scene)
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
    if world is not None:
        worlds.release(world)
    return result


def _resume(out: Path, settings: dict[str, Any], resume: bool) -> dict[str, dict[str, Any]]:
    """Check and record the run's settings; the rows of the episodes already run, by task id."""
    out.mkdir(parents=True, exist_ok=True)
    episodes, run_file = out / EPISODES_FILE, out / RUN_FILE
    if not resume:  # afresh: no episode row, and no motion picture of an earlier run left to show
        episodes.write_text("")
        shutil.rmtree(out / "episodes", ignore_errors=True)
    elif run_file.is_file():
        previous = json.loads(run_file.read_text(encoding="utf-8"))
        if not isinstance(previous, dict):
            raise ValueError(f"{run_file} is not a run record; use another --out")
        changed = sorted(k for k in settings.keys() | previous.keys() if previous.get(k) != settings.get(k))
        if changed:
            described = "; ".join(f"{k}: {previous.get(k)!r} -> {settings.get(k)!r}" for k in changed)
            raise ValueError(f"{out} holds a run with other settings ({described}); use another --out")
    elif episodes.is_file() and episodes.stat().st_size:
        raise ValueError(f"{out} holds episodes of a run without run.json; use another --out")
    repair_samples(episodes)
    run_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return {row["id"]: row for row in read_rows(episodes)}


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
    profile: str = DEFAULT_PROFILE,
    seed: int = 0,
    max_turns: int = DEFAULT_MAX_TURNS,
    concurrency: int = 1,
    out_dir: str | Path | None = None,
    resume: bool = True,
    on_result: Callable[[EpisodeResult], None] | None = None,
    policy_options: dict[str, Any] | None = None,
) -> list[EpisodeResult]:
    """Run every task (at most `concurrency` at once), score, and write the output folder if given.

    A task may be given as a function that builds it: it is built when its turn comes, so a long run
    writes its first episodes early. The output folder is held for the run (one writer per folder).
    With ``resume``, tasks whose episode the folder holds are not run again (a ``ValueError`` when the
    folder holds a run with other settings: policy and its ``policy_options`` as recorded in
    ``run.json``, profile, seed, max_turns). ``on_result`` sees each episode as it ends, resumed ones
    included (a progress bar).
    """
    settings = {
        "policy": policy.name,
        "policy_options": policy_options or {},
        "profile": profile,
        "seed": seed,
        "max_turns": max_turns,
    }
    if out_dir is None:
        return await _evaluate_robot(policy, tasks, settings, concurrency, None, {}, on_result)
    with run_folder_lock(out_dir) as out, run_log(out):
        done = _resume(out, settings, resume)
        return await _evaluate_robot(policy, tasks, settings, concurrency, out, done, on_result)


async def _evaluate_robot(
    policy: Policy,
    tasks: Sequence[RobotTask | Callable[[], RobotTask]],
    settings: dict[str, Any],
    concurrency: int,
    out: Path | None,
    done: dict[str, dict[str, Any]],
    on_result: Callable[[EpisodeResult], None] | None,
) -> list[EpisodeResult]:
    profile, seed, max_turns = settings["profile"], settings["seed"], settings["max_turns"]
    worlds = RobotWorlds(max_worlds=max(8, 2 * concurrency), keep_closed=True)  # scored after close
    semaphore = asyncio.Semaphore(concurrency)

    logger.info("robot evaluation of %s: %d tasks, %s tools, seed %d", policy.name, len(tasks), profile, seed)
    async with Toolshed(with_profile(robot_toolset(worlds), profile), seed=seed) as toolshed:

        async def one(task_or_builder: RobotTask | Callable[[], RobotTask]) -> EpisodeResult:
            async with semaphore:
                task = (
                    task_or_builder
                    if isinstance(task_or_builder, RobotTask)
                    else await asyncio.to_thread(task_or_builder)
                )
                if task.id in done:
                    result = EpisodeResult.from_row(task, done[task.id])
                else:
                    result = await run_robot_episode(policy, toolshed, worlds, task, max_turns, seed)
                    _log_episode(result)
                    if out is not None:
                        with (out / EPISODES_FILE).open("a") as stream:
                            stream.write(json.dumps(result.row()) + "\n")
            if on_result is not None:
                on_result(result)
            return result

        try:
            results = list(await asyncio.gather(*(one(task) for task in tasks)))
        finally:
            worlds.close()
    if out is not None:
        from spacetools.bench.robot.report import write_robot_report

        summary = [{**asdict(s), "success_rate": s.success_rate} for s in summarize(results)]
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        write_robot_report(results, out, settings)
    logger.info("%d episodes, %d of %d points", len(results), *_points(results))
    return results
