"""A command that needs an optional extra the install lacks says so in one line and exits with 2.

An uninstalled package is simulated the way Python itself models one that cannot be imported: a
``sys.modules`` entry set to None in a fresh interpreter (a fake of the missing package, the only part
that cannot run here: every extra is installed in this environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spacetools.bench.spatialsim import generator

RUN_WITHOUT = """
import sys
for module in sys.argv[1].split(","):
    sys.modules[module] = None
sys.argv = ["spacetools", *sys.argv[2:]]
from spacetools.cli.main import app
app()
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    generator.export(folder, n=1, seed=0, families=["cvb2drelation"])
    return folder


def run_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    return subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT, modules, *args],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("modules", "extra", "args"),
    [
        ("fastapi,uvicorn", "server", ["serve", "--port", "8797"]),
        ("mcp", "integrations", ["serve", "--mcp"]),
        # MCP needs the web stack too: a core-only install is told the extra that brings both at once.
        ("fastapi,uvicorn,mcp", "integrations", ["serve", "--mcp"]),
        ("ray", "ray", ["serve", "--backend", "ray", "--port", "8797"]),
        ("torch,transformers", "hf", ["eval", "--policy", "hf", "--option", "model_path={tmp}"]),
        ("openai", "openai", ["eval", "--policy", "openai", "--option", "model=m"]),
        ("peft", "train", ["train", "dirl", "--config", "configs/dirl-tiny.yaml", "--out", "{tmp}/run"]),
    ],
)
def test_a_missing_extra_is_one_line(
    modules: str, extra: str, args: list[str], data: Path, tmp_path: Path
) -> None:
    line = one_error_line(modules, args, data, tmp_path)
    assert line.startswith("Error: ") and line.endswith(
        f'needs the {extra} extra: pip install -e ".[{extra}]" (or make install)'
    )


def test_two_missing_extras_are_one_line_and_one_install(data: Path, tmp_path: Path) -> None:
    """Ray on a core-only install lacks the server too: both extras in one command, not one per rerun."""
    line = one_error_line(
        "fastapi,uvicorn,ray", ["serve", "--backend", "ray", "--port", "8797"], data, tmp_path
    )
    assert line == (
        "Error: fastapi, ray are not installed; spacetools serve needs the server and ray extras: "
        'pip install -e ".[server,ray]" (or make install)'
    )


def one_error_line(modules: str, args: list[str], data: Path, tmp_path: Path) -> str:
    """The command's stderr, which must be one line, after it exits with 2 having written nothing."""
    args = [arg.format(tmp=tmp_path) for arg in args]
    if args[0] == "eval":
        args += ["--data", str(data), "--out", str(tmp_path / "eval")]
    result = run_without(modules, *args)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert not (tmp_path / "run").exists() and not (tmp_path / "eval" / "samples.jsonl").exists()
    return line


def test_a_module_no_extra_brings_still_raises() -> None:
    result = run_without("yaml", "tools", "list")
    assert result.returncode == 1 and "Traceback" in result.stderr
