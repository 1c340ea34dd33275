"""What fails before a run starts is one `Error:` line and exit status 2: hostile YAML in any config file
the commands read, a device this machine lacks, a model folder whose config.json is empty."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacetools.bench.spatialsim import generator
from spacetools.cli.main import app

# A billion-laughs block: ten values, each level ten aliases of the one before (10^9 values expanded).
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{previous}'] * 10)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)
DEEP = "tools: " + "[" * 10_000 + "]" * 10_000 + "\n"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=1, seed=11, families=["cvb2drelation"])
    return folder


def _one_error_line(arguments: list[str | Path]) -> str:
    result = CliRunner().invoke(app, [str(argument) for argument in arguments])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "Traceback" not in result.output
    return errors[0]


def _commands(config: Path, data: Path, tmp_path: Path) -> list[list[str | Path]]:
    """Every command that reads a YAML config file, with `config` as that file."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    out = tmp_path / "out"
    return [
        ["eval", "--policy", "scripted", "--data", data, "--out", out, "--toolset-config", config],
        ["serve", "--toolset-config", config],
        ["tools", "list", "--toolset-config", config],
        ["train", "sft", "--model", model, "--data", traces, "--out", out, "--config", config],
        ["train", "grpo", "--model", model, "--data", data, "--out", out, "--config", config],
        ["train", "dirl", "--config", config, "--out", out],
        ["train", "traces", "--data", data, "--out", out / "traces.jsonl", "--config", config],
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (ALIAS_BOMB, "more than 100000 values once its aliases are expanded"),
        (DEEP, "nested deeper than 100 levels"),
        ("a: &a [*a]\n", "an alias refers to a node that contains it"),
    ],
    ids=["alias-bomb", "10000-deep", "recursive-alias"],
)
def test_hostile_yaml_is_refused_in_one_line_by_every_command(
    text: str, problem: str, data: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    for command in _commands(config, data, tmp_path):
        line = _one_error_line(command)
        assert f"{config}: refused: {problem}" in line, (command, line)


@NO_CUDA
def test_a_cuda_device_on_a_machine_without_cuda_is_one_line(data: Path, tmp_path: Path) -> None:
    line = _one_error_line(
        [
            *("eval", "--policy", "hf", "--option", f"model_path={tmp_path}", "--option", "device=cuda:0"),
            *("--data", data, "--out", tmp_path / "out"),
        ]
    )
    assert "device 'cuda:0' requested but CUDA is not available" in line
    config = tmp_path / "cuda.yaml"
    config.write_text("device: cuda:0\n")
    for command in _commands(config, data, tmp_path)[3:5]:  # the training stages that load a model
        assert "device 'cuda:0' requested but CUDA is not available" in _one_error_line(command)


def test_a_model_folder_with_an_empty_config_is_one_line(data: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("")
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    for command in (
        ["train", "sft", "--model", model, "--data", traces, "--out", tmp_path / "sft"],
        ["train", "grpo", "--model", model, "--data", data, "--out", tmp_path / "grpo"],
        [
            "eval",
            "--policy",
            "hf",
            "--option",
            f"model_path={model}",
            "--data",
            data,
            "--out",
            tmp_path / "e",
        ],
    ):
        assert f"{model / 'config.json'}" in _one_error_line(command)
