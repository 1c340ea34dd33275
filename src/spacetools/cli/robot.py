"""`spacetools robot`: serve a simulated robot over the original's HTTP API, evaluate on robot tasks."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spacetools.agent.policies import make_policy
from spacetools.bench.progress import progress_bar
from spacetools.cli.options import RUN_FOLDER, ProfileOption, check_out_folder, comma_list, key_values
from spacetools.tools.robot.http_client import DEFAULT_MAX_BODY_BYTES as ROBOT_MAX_BODY_BYTES
from spacetools.tools.robot.http_client import DEFAULT_MAX_CONNECTIONS as ROBOT_MAX_CONNECTIONS
from spacetools.tools.robot.http_client import TOKEN_ENV as ROBOT_TOKEN_ENV
from spacetools.toolshed.connection import DEFAULT_PROFILE

app = typer.Typer(no_args_is_help=True)
console = Console()

ROBOT_POLICIES = ("scripted", "openai", "hf", "replay")


@app.command()
def serve(
    category: Annotated[
        str, typer.Option("--category", help="Task category whose scene the robot faces.")
    ] = "pick",
    seed: Annotated[int, typer.Option("--seed", help="Task seed (the same seed gives the same scene).")] = 0,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=ROBOT_TOKEN_ENV,
            show_envvar=True,
            help="Bearer token clients must send (at least 16 characters; required beyond loopback).",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest request body (a motion's is a few hundred bytes).")
    ] = ROBOT_MAX_BODY_BYTES,
    max_connections: Annotated[
        int, typer.Option(min=1, help="Open connections (past them every request gets a 503).")
    ] = ROBOT_MAX_CONNECTIONS,
) -> None:
    """Serve a simulated robot (one world) with the robot HTTP API of the original."""
    import uvicorn

    from spacetools.bench.robot.tasks import CATEGORIES, make_task
    from spacetools.integrations.robot_api.server import check_exposure, create_robot_app, robot_server_limits
    from spacetools.tools.robot.simulated import SimulatedRobot
    from spacetools.toolshed.slow_clients import server_options

    if category not in CATEGORIES:
        raise typer.BadParameter(f"unknown category {category!r}; choose one of: {', '.join(CATEGORIES)}")
    try:
        check_exposure(host, token)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--token" if token else "--host") from None
    task = make_task(category, seed)
    robot = SimulatedRobot.from_spec(task.scene, record_frames=False)
    console.print(f"Robot at http://{host}:{port}  task: {task.question}")
    try:
        app = create_robot_app(robot, token=token, max_body_bytes=max_body_bytes)
        limits = robot_server_limits(max_connections)
        uvicorn.run(app, host=host, port=port, log_level="warning", **server_options(limits))
    finally:
        robot.close()


@app.command(name="eval")
def evaluate(
    policy: Annotated[str, typer.Option("--policy", help=f"One of: {', '.join(ROBOT_POLICIES)}.")],
    out: Annotated[
        Path, typer.Option("--out", help="Run folder: episodes.jsonl, summary.json, report.html.")
    ] = Path("runs/robot"),
    tasks_per_category: Annotated[
        int, typer.Option("--tasks-per-category", min=1, help="Seeded tasks per category.")
    ] = 30,
    categories: Annotated[
        list[str] | None,
        typer.Option("--category", help="Categories, comma-separated or repeated; default all three."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Task suite and Toolshed seed.")] = 0,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Skip the episodes already in episodes.jsonl.")
    ] = True,
    profile: ProfileOption = DEFAULT_PROFILE,
    max_turns: Annotated[int, typer.Option("--max-turns", min=2, help="Assistant turns per episode.")] = 10,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Episodes run at once.")] = 1,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option", help="Policy option key=value, repeated (e.g. model=..., trajectories=...)."
        ),
    ] = None,
) -> None:
    """Run a policy on the robot task suite and print the per-category success table."""
    from spacetools.bench.robot.evaluate import EPISODES_FILE, evaluate_robot, summarize
    from spacetools.bench.robot.report import REPORT_FILE
    from spacetools.bench.robot.tasks import CATEGORIES, make_task
    from spacetools.bench.runlock import RunFolderBusyError

    if policy not in ROBOT_POLICIES:
        raise typer.BadParameter(f"unknown policy {policy!r}; choose one of: {', '.join(ROBOT_POLICIES)}")
    check_out_folder(out, own=RUN_FOLDER)
    chosen_categories = tuple(comma_list(categories) or CATEGORIES)
    unknown = [c for c in chosen_categories if c not in CATEGORIES]
    if unknown:
        raise typer.BadParameter(f"unknown category {unknown[0]!r}; choose from: {', '.join(CATEGORIES)}")
    options = key_values(option)
    try:
        if policy == "scripted":  # the expert retries only while turns are left to finish
            chosen = make_policy("robot_scripted", **{"max_turns": max_turns, **options})
        else:
            chosen = make_policy(policy, **options)
    except (ValueError, TypeError, OSError) as error:  # OSError: a model folder without its weights
        raise typer.BadParameter(" ".join(str(error).split()), param_hint="--policy") from None
    # Built as their turn comes, categories interleaved, so a long run's first rows cover every category.
    tasks = [
        partial(make_task, category, seed, index)  # type: ignore[arg-type]  # checked above
        for index in range(tasks_per_category)
        for category in chosen_categories
    ]
    console.print(f"Running {len(tasks)} task(s) (seed {seed}); episodes go to {out / EPISODES_FILE} …")
    with progress_bar(console, "episodes", len(tasks), unit="ep") as advance:
        try:
            results = asyncio.run(
                evaluate_robot(
                    chosen,
                    tasks,
                    profile=profile,
                    seed=seed,
                    max_turns=max_turns,
                    concurrency=concurrency,
                    out_dir=out,
                    resume=resume,
                    on_result=lambda _: advance(1),
                    policy_options=options,
                )
            )
        except (ValueError, RunFolderBusyError, NotADirectoryError) as error:
            # --out holds a run with other settings, a run in progress, or it is a file
            raise typer.BadParameter(str(error), param_hint="--out") from None
    table = Table("category", "episodes", "points", "success", "first motion (s)", "s / episode")
    for s in summarize(results):
        first = "–" if s.time_to_first_motion_s is None else f"{s.time_to_first_motion_s:.1f}"
        table.add_row(
            s.category, str(s.episodes), f"{s.points}/{s.possible}", f"{s.success_rate:.2f}", first,
            f"{s.seconds_per_episode:.1f}",
        )  # fmt: skip
    steps = sum(r.sim_steps for r in results)
    step_s = sum(r.step_wall_s for r in results)
    console.print(table)
    if step_s > 0:
        console.print(f"Simulation: {steps} steps, {steps / step_s:.0f} steps/s")
    console.print(f"Report: {out / REPORT_FILE}")
