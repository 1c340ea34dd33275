"""`spacetools data`: generate SpatialSim parquet sets and draw a sample's ground truth."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spacetools.bench.dataset import parquet_files, read_samples
from spacetools.bench.progress import progress_bar
from spacetools.bench.spatialsim import FAMILIES, generator
from spacetools.bench.spatialsim.balance import balance_table
from spacetools.bench.spatialsim.draw import render_sample
from spacetools.cli.options import check_out_file, seed_option
from spacetools.rewards.benchmarks import SPATIALSIM_PREFIX

app = typer.Typer(no_args_is_help=True)
console = Console()


def _family_list(values: list[str] | None) -> list[str] | None:
    """`--families a,b --families c` → [a, b, c], validated against the known families."""
    if not values:
        return None
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    try:
        return generator.check_families(names)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--families") from error


@app.command()
def generate(
    out: Annotated[Path, typer.Option("--out", help="Folder for the spatialsim_<family>.parquet files.")],
    n: Annotated[int, typer.Option("--n", help="Questions per family.")],
    seed: Annotated[int, seed_option("Run seed; the same arguments give identical files.")] = 0,
    families: Annotated[
        list[str] | None,
        typer.Option(
            "--families",
            help=f"Families to generate, comma-separated or repeated (default all: {', '.join(FAMILIES)}).",
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (default: up to 2).")] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Write into a folder that is not empty, replacing its SpatialSim files."
        ),
    ] = False,
) -> None:
    """Generate SpatialSim questions with ground truth into verl parquet files."""
    if n < 1:
        raise typer.BadParameter(
            f"must be a positive number of questions per family, got {n}", param_hint="--n"
        )
    if workers is not None and workers < 1:
        raise typer.BadParameter(f"must be at least 1, got {workers}", param_hint="--workers")
    names = _family_list(families)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise typer.BadParameter(
            f"{out} is not empty; give --overwrite to replace its SpatialSim files, or another folder",
            param_hint="--out",
        )
    try:
        generator.prepare_output(out)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--out") from error
    start = time.perf_counter()
    try:
        with progress_bar(console, "questions", n * len(names or FAMILIES), unit="q") as advance:
            by_family = generator.generate(n, seed, names, workers, on_questions=advance)
    except RuntimeError as error:
        console.print(f"[red]Error:[/red] {error}")
        raise typer.Exit(1) from error
    # The folder holds this set only: files of families not generated this time would be mixed in.
    for stale in out.glob(f"{SPATIALSIM_PREFIX}*.parquet"):
        stale.unlink()
    generator.write_families(out, by_family)
    elapsed = time.perf_counter() - start
    console.print(balance_table(by_family, title=f"SpatialSim in {out}"))
    total = sum(len(samples) for samples in by_family.values())
    console.print(f"{total} questions in {elapsed:.1f} s ({total / elapsed:.1f} questions/s)")


@app.command()
def show(
    folder: Annotated[Path, typer.Argument(help="A folder of parquet files (or one parquet file).")],
    index: Annotated[int, typer.Option("--index", help="The sample's extra_info index.")],
    family: Annotated[
        str | None, typer.Option("--family", help="Family to show (default: the first file's).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="PNG to write, or a folder to write show_<key>_<index>.png into (default: the data's folder).",
        ),
    ] = None,
) -> None:
    """Write a PNG of one sample with its question and ground truth drawn on the image."""
    if family is not None and family not in FAMILIES:
        raise typer.BadParameter(f"unknown family {family!r}; valid: {list(FAMILIES)}", param_hint="--family")
    try:
        files = parquet_files(folder, [FAMILIES[family].data_source] if family else None)
    except FileNotFoundError as error:
        raise typer.BadParameter(str(error), param_hint="FOLDER") from error
    if not files:
        raise typer.BadParameter(f"no parquet files in {folder}", param_hint="FOLDER")
    try:
        samples = read_samples(files[0])
    except ValueError as error:  # not parquet, or not in the verl layout
        raise typer.BadParameter(str(error), param_hint="FOLDER") from None
    # Rows without an `index` (foreign files) are addressed by their position.
    matches = [s for position, s in enumerate(samples) if s.extra_info.get("index", position) == index]
    if not matches:
        raise typer.BadParameter(
            f"no sample with index {index} in {files[0].name} ({len(samples)} rows)", param_hint="--index"
        )
    sample = matches[0]
    name = f"show_{sample.data_source}_{index}.png"
    if out is None:
        target = (folder if folder.is_dir() else folder.parent) / name
    else:
        target = out / name if out.is_dir() or out.suffix == "" else out
    check_out_file(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        render_sample(sample).save(target)
    except (OSError, ValueError) as error:  # a missing folder, a file in the way, an unknown extension
        raise typer.BadParameter(f"cannot write {target}: {error}", param_hint="--out") from None
    console.print(f"{sample.data_source} #{index}: {sample.question}")
    console.print(f"wrote {target}")
