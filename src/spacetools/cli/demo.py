"""`spacetools demo` (interim, until the evaluation harness replaces it): a small SpatialSim set and its summary."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console

from spacetools.bench.spatialsim import FAMILIES, generator
from spacetools.bench.spatialsim.balance import balance_table
from spacetools.bench.spatialsim.draw import render_sample


def demo(
    out: Path = typer.Option(
        Path("spatialsim_demo"), "--out", help="Folder for the parquet files and previews."
    ),
    n: int = typer.Option(4, "--n", min=1, help="Questions per family."),
    seed: int = typer.Option(0, "--seed", help="Run seed."),
) -> None:
    """Generate and render a small SpatialSim set, write one preview per family and print its summary."""
    console = Console()
    try:
        generator.prepare_output(out)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--out") from error
    start = time.perf_counter()
    with console.status(f"Generating {n} questions for each of {len(FAMILIES)} families..."):
        by_family = generator.generate(n, seed)
    files = generator.write_families(out, by_family)
    elapsed = time.perf_counter() - start
    for name, samples in by_family.items():
        render_sample(samples[0]).save(out / f"preview_{FAMILIES[name].data_source}.png")
    console.print(balance_table(by_family, title=f"SpatialSim demo (seed {seed})"))
    total = sum(len(samples) for samples in by_family.values())
    console.print(f"{total} questions in {elapsed:.1f} s; {len(files)} parquet files and previews in {out}/")
