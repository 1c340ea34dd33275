"""`spacetools train`: teacher traces, SFT, GRPO with live tools, and the whole DIRL recipe.

Each command takes a YAML config (`--config`) of its stage object, `key=value` overrides of any of its
settings (OmegaConf's dotlist, as in verl and TRL: `sft.epochs=2 grpo.learning_rate=1e-6`) and the few
options a user sets most; options win over overrides, overrides over the file. The resolved config is
written into `--out` (`config.json`), the run's log into `run.log`, and rerunning the same command into
the same folder continues the run.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import LOG_FILE, run_log
from spacetools.cli.extras import require_extra
from spacetools.cli.options import (
    RUN_FOLDER,
    check_device,
    check_model_folder,
    check_out_file,
    check_out_folder,
)
from spacetools.kit.suggestions import problem_line
from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, Thoughts, TracesConfig, load_config

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="A YAML file of settings; KEY=VALUE overrides and options given here win over it.",
    ),
]
RunFolderOption = Annotated[
    Path, typer.Option("--out", help="Run folder: checkpoints, metrics, the trained model.")
]
Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[KEY=VALUE]...",
        help="Settings over the config file, OmegaConf-style: epochs=2 report_to=[tensorboard,wandb].",
        show_default=False,
    ),
]


def _config(cls: type[Any], path: Path | None, overrides: list[str] | None, **options: Any) -> Any:
    """Load and validate a stage config, turning every problem into one clear line (exit 2)."""
    hint = "--config" if not overrides else "--config or KEY=VALUE"
    try:
        return load_config(cls, path, overrides or (), **options)
    except ValidationError as error:
        problems = "; ".join(problem_line(e, cls) for e in error.errors())  # a misspelt key: its match
        raise typer.BadParameter(problems, param_hint=hint) from None
    except (OSError, ValueError) as error:
        raise typer.BadParameter(str(error), param_hint=hint) from None


def _monitor(stage: str, settings: Any) -> Any:
    from spacetools.train.monitor import StageMonitor

    tensorboard = settings.out / "tensorboard"
    config = json.loads(settings.model_dump_json())
    return StageMonitor.reporting_to(settings.report_to, stage, settings.out, tensorboard, Console(), config)


def _check_startup(model: Path | None, device: str) -> None:
    """What would otherwise fail deep inside torch or transformers once the stage starts."""
    if model is not None:
        if not model.is_dir():
            raise typer.BadParameter(f"model folder {model} does not exist", param_hint="--config")
        check_model_folder(model, "--model")
    check_device(device, "--config")


def _run(work: Any) -> Any:
    try:
        return work()
    except ValueError as error:  # settings that only the run itself can check (a changed resume, no data)
        raise typer.BadParameter(str(error)) from None


@app.command()
def traces(
    data: Annotated[Path, typer.Option("--data", exists=True, help="Folder of <key>.parquet questions.")],
    out: Annotated[Path, typer.Option("--out", help="The SFT data set to write (JSONL).")],
    teacher: Annotated[
        str, typer.Option("--teacher", help="scripted, openai, hf, or a model folder.")
    ] = "scripted",
    config: ConfigOption = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Questions per benchmark.")] = None,
    overrides: Overrides = None,
) -> None:
    """Run a teacher with live tools; keep its correct episodes as multi-turn SFT data."""
    from spacetools.train.traces import collect_traces

    check_out_file(check_out_folder(out.parent) / out.name)
    check_out_file(out.parent / LOG_FILE)  # the log goes beside the data set
    settings = _config(TracesConfig, config, overrides, data=data, out=out, teacher=teacher, limit=limit)
    console = Console()
    with run_log(out.parent):
        counts = _run(lambda: collect_traces(settings, console=console))
    table = Table("family", "kept", "wrong", "fallback guess", "no answer", "error", title=f"traces: {out}")
    for family, count in counts.items():
        table.add_row(
            family, *(str(count.get(k, 0)) for k in ("kept", "wrong", "fallback guess", "no answer", "error"))
        )
    console.print(table)


@app.command()
def mix(
    source: Annotated[
        list[str], typer.Option("--source", help="PATH=WEIGHT, e.g. irl.jsonl=1 universal.jsonl=3.")
    ],
    out: Annotated[Path, typer.Option("--out", help="The mixed SFT data set (JSONL).")],
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    thoughts: Annotated[
        Thoughts, typer.Option("--thoughts", help="full, or empty: the teachers' <think> blocks left empty.")
    ] = "full",
) -> None:
    """Mix SFT data sets at the given weights (the paper: IRL teacher 1 to universal teacher 3)."""
    from spacetools.train.traces import mix_traces

    sources: dict[Path, float] = {}
    for item in source:
        path, sep, weight = item.rpartition("=")
        try:
            sources[Path(path)] = float(weight)
        except ValueError:
            raise typer.BadParameter(f"{item!r} is not PATH=WEIGHT", param_hint="--source") from None
        if not sep or not Path(path).is_file():
            raise typer.BadParameter(f"{path or item!r} is not a file", param_hint="--source")
    taken = _run(
        lambda: mix_traces(
            sources, check_out_file(check_out_folder(out.parent) / out.name), seed=seed, thoughts=thoughts
        )
    )
    for path, count in taken.items():
        typer.echo(f"{count:6d} rows from {path}")


@app.command()
def sft(
    model: Annotated[Path, typer.Option("--model", exists=True, file_okay=False, help="The model folder.")],
    data: Annotated[Path, typer.Option("--data", exists=True, dir_okay=False, help="SFT data (JSONL).")],
    out: RunFolderOption,
    config: ConfigOption = None,
    overrides: Overrides = None,
) -> None:
    """Supervised fine-tuning on teacher traces (loss on the assistant's tokens only); resumable."""
    require_extra("train")
    from spacetools.train.sft import train_sft

    settings = _config(
        SFTConfig, config, overrides, model=model, data=data, out=check_out_folder(out, own=RUN_FOLDER)
    )
    _check_startup(settings.model, settings.device)
    with contextlib.ExitStack() as held:
        _run(lambda: held.enter_context(run_folder_lock(settings.out)))  # before anything writes there
        held.enter_context(run_log(settings.out))
        progress = held.enter_context(_monitor("sft", settings))
        trained = _run(lambda: train_sft(settings, progress=progress))
    typer.echo(f"trained model: {trained}")


@app.command()
def grpo(
    model: Annotated[
        Path, typer.Option("--model", exists=True, file_okay=False, help="The starting model (SFT).")
    ],
    data: Annotated[Path, typer.Option("--data", exists=True, help="Folder of <key>.parquet questions.")],
    out: RunFolderOption,
    config: ConfigOption = None,
    toolshed_url: Annotated[
        str | None, typer.Option("--toolshed-url", help="A running Toolshed server.")
    ] = None,
    overrides: Overrides = None,
) -> None:
    """Multi-turn GRPO with live tools; resumable."""
    require_extra("train")
    from spacetools.train.grpo import train_grpo

    settings = _config(
        GRPOConfig,
        config,
        overrides,
        model=model,
        data=data,
        out=check_out_folder(out, own=RUN_FOLDER),
        tools={"toolshed_url": toolshed_url},
    )
    _check_startup(settings.model, settings.device)
    with contextlib.ExitStack() as held:
        _run(lambda: held.enter_context(run_folder_lock(settings.out)))  # before anything writes there
        held.enter_context(run_log(settings.out))
        progress = held.enter_context(_monitor("grpo", settings))
        trained = _run(lambda: train_grpo(settings, progress=progress))
    typer.echo(f"trained model: {trained}")


@app.command()
def dirl(
    config: Annotated[
        Path, typer.Option("--config", exists=True, dir_okay=False, help="e.g. configs/dirl-tiny.yaml")
    ],
    out: Annotated[Path, typer.Option("--out", help="Run folder; rerun the same command to continue it.")],
    overrides: Overrides = None,
) -> None:
    """The whole DIRL recipe: traces, SFT, GRPO with live tools, an evaluation after each stage.

    e.g. `spacetools train dirl --config configs/dirl-tiny.yaml --out runs/d sft.epochs=2 grpo.steps=5`
    """
    require_extra("train")
    from spacetools.train.base_models import BASE_MODELS
    from spacetools.train.dirl import run_dirl
    from spacetools.train.gains import RewardGain
    from spacetools.train.results import RESULTS_FILE, TABLE_FILE

    settings = _config(DIRLConfig, config, overrides)
    # "tiny" is built by the run, a named base (smollm2-135m) converted by it; a folder must be there now.
    named = settings.base_model == "tiny" or settings.base_model in BASE_MODELS
    _check_startup(None if named else Path(settings.base_model).expanduser(), settings.device)
    console = Console()
    _run(lambda: run_dirl(settings, check_out_folder(out, own=RUN_FOLDER), console=console))
    typer.echo((out / TABLE_FILE).read_text(encoding="utf-8"))
    gain = json.loads((out / RESULTS_FILE).read_text(encoding="utf-8"))["training_reward_gain"]
    if gain is not None:
        typer.echo(f"stage 2 GRPO, training prompts: {RewardGain.model_validate(gain).describe()}")
    typer.echo(
        f"results: {out / RESULTS_FILE}, {out / TABLE_FILE}  plots: {out}/*.png  TensorBoard: {out}/tensorboard"
    )
