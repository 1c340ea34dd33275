"""`spacetools demo`: the main job. Generate a SpatialSim set, evaluate the scripted expert on it with live
tools, print the table and the report's path."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.rollout import RolloutConfig
from spacetools.bench.evaluate import REPORT_FILE, EvalConfig, evaluate
from spacetools.bench.progress import progress_bar
from spacetools.bench.spatialsim import FAMILIES, generator
from spacetools.bench.spatialsim.balance import balance_table
from spacetools.cli.options import ProfileOption, check_out_folder, seed_option
from spacetools.toolshed import ToolsConfig
from spacetools.toolshed.connection import DEFAULT_PROFILE


def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for data/ (parquet) and run/ (results).")] = Path(
        "spacetools_demo"
    ),
    n: Annotated[int, typer.Option("--n", min=1, help="Questions per family.")] = 20,
    seed: Annotated[int, seed_option("Seed of the generated set and of the tools' realism.")] = 0,
    profile: ProfileOption = DEFAULT_PROFILE,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Episodes run at once.")] = 8,
) -> None:
    """Generate SpatialSim questions, run the scripted expert with live tools, print the table and report."""
    console = Console()
    data, run = check_out_folder(out, own=("data", "a spacetools demo folder")) / "data", out / "run"
    try:
        generator.prepare_output(data)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--out") from error
    start = time.perf_counter()
    try:
        with progress_bar(console, "questions", n * len(FAMILIES), unit="q") as advance:
            by_family = generator.generate(n, seed, on_questions=advance)
    except RuntimeError as error:
        console.print(f"[red]Error:[/red] {error}")
        raise typer.Exit(1) from error
    generator.write_families(data, by_family)
    console.print(balance_table(by_family, title=f"SpatialSim (seed {seed}) in {data}"))
    console.print(
        f"Generated in {time.perf_counter() - start:.1f} s. Evaluating the scripted expert ({profile} tools)..."
    )
    # A fresh run each time: the data were just regenerated, so earlier rows may not match them.
    config = EvalConfig(
        data=data,
        out=run,
        policy="scripted",
        tools=ToolsConfig(profile=profile, seed=seed),
        resume=False,
        rollout=RolloutConfig(concurrency=concurrency),
    )
    evaluate(ScriptedPolicy(), config=config, console=console)
    console.print(f"Done in {time.perf_counter() - start:.1f} s. Report: {(run / REPORT_FILE).resolve()}")
