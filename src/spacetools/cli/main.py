"""The `spacetools` command: one typer app with a sub-app per concept.

Every bad input ends the same way, wherever it is caught (click's parser or a command's own checks): one
line on stderr naming the option and what is wrong, and exit status 2; never a traceback or a box. A
command that needs an optional extra the install lacks says which one, in one line (`cli.extras`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from spacetools import __version__
from spacetools.cli import data, demo, env, eval, export, models, robot, serve, tools, train
from spacetools.cli.extras import missing_extra_line
from spacetools.cli.logs import LogLevel, setup_logging

#: The width of a piped command's tables: wide enough for any of them, never cut.
PIPED_COLUMNS = 400


@contextlib.contextmanager
def _piped_width() -> Iterator[None]:
    """Piped into a file, a table keeps its natural width (rich would cut it at 80 columns). Rich reads
    COLUMNS whenever it measures, so the consoles made at import follow it; restored afterwards."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        yield
        return
    os.environ["COLUMNS"] = str(PIPED_COLUMNS)
    try:
        yield
    finally:
        os.environ.pop("COLUMNS", None)


class OneLineErrors(TyperGroup):
    """A command group whose usage errors print as ``Error: <what> Try '<command> --help'.``"""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        with _piped_width():
            return self._main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)

    def _main(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        standalone_mode: bool,
        windows_expand_args: bool,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except ModuleNotFoundError as error:  # an optional extra the install lacks
            line = missing_extra_line(error, sys.argv[1:] if args is None else list(args))
            if line is None:
                raise
            typer.echo(line, err=True)
            sys.exit(2)
        except typer.TyperException as error:  # the base of typer's usage and parameter errors
            context = getattr(error, "ctx", None)
            hint = f" Try '{context.command_path} --help'." if context is not None else ""
            format_message = getattr(error, "format_message", None)
            text = format_message() if format_message is not None else str(error)
            line = " ".join(text.split()).rstrip(".")  # one line, whatever the message holds
            if line:
                end = "" if line.endswith(("?", "!")) else "."  # "Did you mean 'eval'?" ends already
                typer.echo(f"Error: {line}{end}{hint}", err=True)
            elif hasattr(error, "show"):  # a group run without arguments shows its help
                error.show()
            sys.exit(getattr(error, "exit_code", 2))
        sys.exit(result if isinstance(result, int) else 0)


app = typer.Typer(
    name="spacetools",
    cls=OneLineErrors,
    help="Tool-augmented spatial reasoning: simulated data, Toolshed tools, evaluation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"spacetools {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            envvar="SPACETOOLS_LOG_LEVEL",
            case_sensitive=False,
            help="Diagnostics shown on stderr; run folders' run.log keep info and above.",
        ),
    ] = LogLevel.warning,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Tool-augmented spatial reasoning: simulated data, Toolshed tools, evaluation."""
    setup_logging(log_level)


app.add_typer(data.app, name="data", help="Generate and inspect SpatialSim benchmark sets.")
app.add_typer(tools.app, name="tools", help="List, describe and run Toolshed tools.")
app.add_typer(eval.app, name="eval", help="Evaluate a policy on benchmarks with live tools.")
app.add_typer(export.app, name="export", help="Export configs for other frameworks (verl).")
app.add_typer(robot.app, name="robot", help="The simulated robot: its HTTP API and the robot benchmark.")
app.add_typer(train.app, name="train", help="DIRL training: teacher traces, SFT, GRPO with live tools.")
app.add_typer(models.app, name="models", help="Pretrained base models that run here (converted once).")
app.command(name="demo")(demo.demo)
app.command(name="serve", help="Serve a tool set over HTTP.")(serve.serve)
app.command(name="env")(env.env)
# Help texts are plain text: rich markup would eat their brackets ("report_to=[tensorboard,wandb]").
for _sub_app in (app, *(group.typer_instance for group in app.registered_groups)):
    if _sub_app is not None:
        _sub_app.rich_markup_mode = None

if __name__ == "__main__":
    app()
