"""`spacetools tools`: to be filled in."""

import typer

app = typer.Typer(no_args_is_help=True)
