"""`spacetools eval`: evaluate a policy on benchmarks with live tools; `spacetools eval compare A B`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console

from spacetools.agent.policies import POLICIES, make_policy
from spacetools.agent.rollout import RolloutConfig
from spacetools.agent.types import Policy
from spacetools.bench.compare import compare_table, paired_differences, run_rows
from spacetools.bench.dataset import parquet_files
from spacetools.bench.evaluate import (
    MAX_POLICY_ERRORS,
    REPORT_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    EvalConfig,
    PolicyErrorsError,
    RunMismatchError,
    evaluate,
)
from spacetools.bench.runlock import RunFolderBusyError, run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.bench.summary import Summary
from spacetools.cli.options import (
    RUN_FOLDER,
    ProfileOption,
    check_device,
    check_out_folder,
    comma_list,
    key_values,
    read_text_file,
    seed_option,
    toolset_config_option,
)
from spacetools.toolshed import ToolsConfig
from spacetools.toolshed.connection import DEFAULT_PROFILE

app = typer.Typer(no_args_is_help=True)
console = Console()


def _check_data(data: Path, benches: list[str] | None) -> None:
    """The data folder exists and holds a parquet file for every benchmark asked for."""
    try:
        parquet_files(data, benches)
    except FileNotFoundError as error:
        hint = "--bench" if benches and data.exists() else "--data"
        raise typer.BadParameter(str(error), param_hint=hint) from None


def _build_policy(name: str, options: dict[str, Any]) -> Policy:
    if "device" in options:  # before a model loads onto a device this machine lacks
        check_device(str(options["device"]), "--option")
    try:
        return make_policy(name, **options)
    except ModuleNotFoundError:  # an extra not installed: the one line of cli.extras
        raise
    except (ValueError, TypeError, OSError, ImportError) as error:  # a missing file or folder, no torch
        hint = "--policy" if name not in POLICIES else "--option"
        raise typer.BadParameter(str(error), param_hint=hint) from None


def _run(policy: str, options: dict[str, Any], config: EvalConfig, console: Console) -> None:
    """Hold the run folder, then build the policy and evaluate it: what loading the model logs (peft's
    word on an adapter) goes to the run's `run.log` too."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(run_folder_lock(config.out))
        except ValueError as error:  # a run in progress, a folder not ours, a planted symlink
            raise typer.BadParameter(str(error), param_hint="--out") from None
        held.enter_context(run_log(config.out))
        chosen = _build_policy(policy, options)
        try:
            evaluate(chosen, config=config, console=console)
        except (RunMismatchError, RunFolderBusyError) as error:  # --out holds another run's settings
            raise typer.BadParameter(str(error), param_hint="--out") from None
        except ValueError as error:  # the data or the settings, found wanting once read
            raise typer.BadParameter(str(error)) from None
        except (PolicyErrorsError, ConnectionError, OSError, RuntimeError) as error:
            # The arguments were fine but the run failed (a model or a Toolshed that does not answer).
            typer.echo(f"Error: {error}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo(
                f"Interrupted: the finished samples are in {config.out / SAMPLES_FILE}; rerun the same command "
                "to resume.",
                err=True,
            )
            raise typer.Exit(130) from None


def _config(**fields: Any) -> EvalConfig:
    try:
        return EvalConfig(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        # A tool setting's option: `tools.toolshed_url` is --toolshed-url (the URL and file together: the file).
        hint = _TOOLS_OPTIONS.get(where) or ("--toolset-config" if where == "tools" else None)
        raise typer.BadParameter(message if hint else f"{where}: {message}", param_hint=hint) from None


_TOOLS_OPTIONS = {f"tools.{name}": "--" + name.replace("_", "-") for name in ToolsConfig.model_fields}


@app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    policy: Annotated[str | None, typer.Option("--policy", help=f"One of: {', '.join(POLICIES)}.")] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", help="A parquet file, a folder of <key>.parquet, or the eval set's folder (data/)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run folder: run.json, samples.jsonl, summary.json, report.html."),
    ] = None,
    bench: Annotated[
        list[str] | None,
        typer.Option(
            "--bench", help="Benchmark keys (parquet stems), comma-separated or repeated; default all."
        ),
    ] = None,
    profile: ProfileOption = DEFAULT_PROFILE,
    limit: Annotated[
        int | None, typer.Option("--limit", help="At most this many samples per benchmark.")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Episodes run at once.")] = 8,
    max_turns: Annotated[int, typer.Option("--max-turns", help="Assistant turns per episode.")] = 8,
    seed: Annotated[int, seed_option("Toolshed seed (realism draws are reproducible).")] = 0,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Skip samples already in samples.jsonl.")
    ] = True,
    max_policy_errors: Annotated[
        int,
        typer.Option(
            "--max-policy-errors",
            min=0,
            help="Stop the run (exit 1) when this many episodes in a row end with a policy error, such as a "
            "model endpoint that does not answer; 0: never stop.",
        ),
    ] = MAX_POLICY_ERRORS,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Policy option key=value, repeated (e.g. model=..., base_url=...)."),
    ] = None,
    system_prompt: Annotated[
        Path | None,
        typer.Option(
            "--system-prompt",
            exists=True,
            dir_okay=False,
            help="System prompt template file ({tools} marks the tools block); default: our own prompt.",
        ),
    ] = None,
    max_tool_response_chars: Annotated[
        int,
        typer.Option("--max-tool-response-chars", min=1, help="Longer tool responses are cut in the middle."),
    ] = 2048,
    toolshed_url: Annotated[
        str | None,
        typer.Option(
            "--toolshed-url", help="Use a running Toolshed server (spacetools serve) instead of local tools."
        ),
    ] = None,
    toolset_config: Annotated[Path | None, toolset_config_option("default: the simulated V1 tools")] = None,
) -> None:
    """Evaluate a policy on benchmark samples with live tools and write a run folder."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        name for name, value in (("--policy", policy), ("--data", data), ("--out", out)) if value is None
    ]
    if missing:
        raise typer.BadParameter(f"missing {', '.join(missing)}", param_hint=", ".join(missing))
    assert policy is not None and data is not None and out is not None  # checked just above
    for hint, value in (("--limit", limit), ("--concurrency", concurrency), ("--max-turns", max_turns)):
        if value is not None and value < 1:
            raise typer.BadParameter(f"must be at least 1, got {value}", param_hint=hint)
    benches = comma_list(bench)
    _check_data(data, benches)
    check_out_folder(out, own=RUN_FOLDER)
    if system_prompt is not None:
        read_text_file(system_prompt, "--system-prompt")
    options = key_values(option)
    if policy == "scripted":
        options.setdefault("max_turns", max_turns)
    if policy not in POLICIES:
        raise typer.BadParameter(
            f"unknown policy {policy!r}; choose one of {', '.join(sorted(POLICIES))}", param_hint="--policy"
        )
    config = _config(
        data=data,
        out=out,
        benches=benches,
        limit=limit,
        policy=policy,
        policy_options=options,
        tools={
            "profile": profile,
            "seed": seed,
            "toolshed_url": toolshed_url,
            "toolset_config": toolset_config,
        },
        system_prompt=system_prompt,
        resume=resume,
        max_policy_errors=max_policy_errors,
        rollout=RolloutConfig(
            concurrency=concurrency, max_turns=max_turns, max_tool_response_chars=max_tool_response_chars
        ),
    )
    _run(policy, options, config, console)
    console.print(
        f"Report: {out / REPORT_FILE}  (samples: {out / SAMPLES_FILE}, summary: {out / SUMMARY_FILE})"
    )


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Run folder or summary.json of run A.")],
    b: Annotated[Path, typer.Argument(help="Run folder or summary.json of run B.")],
) -> None:
    """Print two runs side by side: every metric with B − A over the samples both runs scored and its
    paired 95% bootstrap interval ("not significant" where the interval holds 0)."""
    try:
        first, second = Summary.load(a), Summary.load(b)
        rows_a, rows_b = run_rows(a), run_rows(b)
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error)) from error
    try:
        paired = None if rows_a is None or rows_b is None else paired_differences(rows_a, rows_b)
    except (KeyError, TypeError, ValueError) as error:  # a row without its id, data source or score keys
        raise typer.BadParameter(f"samples.jsonl holds a row that cannot be scored: {error!r}") from None
    console.print(compare_table(first, second, paired, label_a=_run_label(a), label_b=_run_label(b)))


def _run_label(path: Path) -> str:
    """A run's short name: its folder's name."""
    return (path if path.is_dir() else path.parent).name
