"""`spacetools serve`'s limit options are generated from `ServerLimits`: one per field, its default."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.cli.serve import with_limit_options
from spacetools.toolshed.limits import ServerLimits

runner = CliRunner()


def test_every_limit_but_the_token_is_an_option_with_the_fields_default() -> None:
    serve = typer.main.get_command(app).commands["serve"]
    options = {param.name: param for param in serve.params if param.param_type_name == "option"}
    limits = {name: field for name, field in ServerLimits.model_fields.items() if name != "token"}
    assert all(options[name].default == field.default for name, field in limits.items())
    assert all(options[name].help == field.description for name, field in limits.items())
    assert "--token" in options["token"].opts and options["token"].envvar  # its own option


def test_the_limit_options_reach_the_command_as_one_dict() -> None:
    received: dict[str, Any] = {}

    @with_limit_options
    def command(name: str = "first", *, limit_options: dict[str, Any]) -> None:
        received.update(limit_options, name=name)

    typed = typer.Typer()
    typed.command()(command)
    result = runner.invoke(typed, ["--name", "second", "--max-sessions", "7", "--session-ttl-s", "2.5"])
    assert result.exit_code == 0, result.output
    assert received.pop("name") == "second"
    assert ServerLimits(**received) == ServerLimits(max_sessions=7, session_ttl_s=2.5)
    refused = runner.invoke(typed, ["--max-sessions", "many"])
    assert refused.exit_code == 2 and "--max-sessions" in refused.output
