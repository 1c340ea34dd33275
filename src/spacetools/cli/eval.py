"""`spacetools eval`: evaluate a policy on benchmarks with live tools; `spacetools eval compare A B`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from spacetools.agent.policies import POLICIES, make_policy
from spacetools.bench.evaluate import REPORT_FILE, SAMPLES_FILE, SUMMARY_FILE, evaluate
from spacetools.bench.summary import Summary, compare_table
from spacetools.cli.options import profile_option, toolset_deployments

app = typer.Typer(no_args_is_help=True)
console = Console()


def _comma_list(values: list[str] | None) -> list[str] | None:
    """`--bench a,b --bench c` → [a, b, c]."""
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _policy_options(values: list[str] | None) -> dict[str, Any]:
    """`--option key=value` pairs; values are read as JSON when they parse (numbers, booleans)."""
    options: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--option")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return options


@app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    policy: str | None = typer.Option(None, "--policy", help=f"One of: {', '.join(POLICIES)}."),
    data: Path | None = typer.Option(
        None, "--data", help="A parquet file, a folder of <key>.parquet, or the eval set's folder (data/)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Run folder: samples.jsonl, summary.json, report.html."
    ),
    bench: list[str] | None = typer.Option(
        None, "--bench", help="Benchmark keys (parquet stems), comma-separated or repeated; default all."
    ),
    profile: str = profile_option(),
    limit: int | None = typer.Option(None, "--limit", help="At most this many samples per benchmark."),
    concurrency: int = typer.Option(8, "--concurrency", help="Episodes run at once."),
    max_turns: int = typer.Option(8, "--max-turns", help="Assistant turns per episode."),
    seed: int = typer.Option(0, "--seed", help="Toolshed seed (realism draws are reproducible)."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip samples already in samples.jsonl."),
    option: list[str] | None = typer.Option(
        None, "--option", help="Policy option key=value, repeated (e.g. model=..., base_url=...)."
    ),
    system_prompt: Path | None = typer.Option(
        None,
        "--system-prompt",
        exists=True,
        dir_okay=False,
        help="System prompt template file ({tools} marks the tools block); default: our own prompt.",
    ),
    max_tool_response_chars: int = typer.Option(
        2048, "--max-tool-response-chars", min=1, help="Longer tool responses are cut in the middle."
    ),
    toolshed_url: str | None = typer.Option(
        None,
        "--toolshed-url",
        help="Use a running Toolshed server (spacetools serve) instead of local tools.",
    ),
    toolset_config: Path | None = typer.Option(
        None,
        "--toolset-config",
        help="Tool-set config YAML (backends, models, devices); default: the simulated V1 tools.",
    ),
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
    if limit is not None and limit < 1:
        raise typer.BadParameter(f"must be at least 1, got {limit}", param_hint="--limit")
    if concurrency < 1:
        raise typer.BadParameter(f"must be at least 1, got {concurrency}", param_hint="--concurrency")
    if toolset_config is not None and toolshed_url is not None:
        raise typer.BadParameter(
            "a Toolshed server has its own tools; give --toolset-config to `spacetools serve --config`",
            param_hint="--toolset-config",
        )
    # The simulated default keeps its name in run.json, so runs made before config files still resume.
    toolset = (
        "v1" if toolset_config is None else toolset_deployments("v1", toolset_config, "--toolset-config")
    )
    options = _policy_options(option)
    if policy == "scripted":
        options.setdefault("max_turns", max_turns)
    try:
        chosen = make_policy(policy, **options)
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(str(error), param_hint="--policy") from error
    try:
        evaluate(
            chosen,
            data,
            out_dir=out,
            benches=_comma_list(bench),
            profile=profile,
            concurrency=concurrency,
            limit=limit,
            resume=resume,
            seed=seed,
            max_turns=max_turns,
            max_tool_response_chars=max_tool_response_chars,
            system_prompt=system_prompt,
            toolshed_url=toolshed_url,
            toolset=toolset,
            console=console,
        )
    except FileNotFoundError as error:
        raise typer.BadParameter(str(error), param_hint="--data") from error
    except (ValueError, ConnectionError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(1) from error
    console.print(
        f"Report: {out / REPORT_FILE}  (samples: {out / SAMPLES_FILE}, summary: {out / SUMMARY_FILE})"
    )


@app.command()
def compare(
    a: Path = typer.Argument(..., help="Run folder or summary.json of run A."),
    b: Path = typer.Argument(..., help="Run folder or summary.json of run B."),
) -> None:
    """Print two runs side by side with B − A for every metric."""
    try:
        first, second = Summary.load(a), Summary.load(b)
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error)) from error
    console.print(compare_table(first, second, label_a=_run_label(a), label_b=_run_label(b)))


def _run_label(path: Path) -> str:
    """A run's short name: its folder's name."""
    return (path if path.is_dir() else path.parent).name
