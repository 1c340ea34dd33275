"""Issue 32's small ones on the command line: plain help texts, piped tables at full width, option
errors that list the options, one punctuation mark after a suggestion, `env` and the versions in
run.json, and the package metadata."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spacetools.bench.spatialsim import generator
from spacetools.cli.main import PIPED_COLUMNS, _piped_width, app

ROOT = Path(__file__).parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    generator.export(folder, n=1, seed=0, families=["cvb2drelation"])
    return folder


def test_help_keeps_its_brackets() -> None:
    result = runner.invoke(app, ["train", "dirl", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "report_to=[tensorboard,wandb]" in result.output


def test_a_piped_command_measures_tables_at_full_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert not sys.stdout.isatty()  # pytest captures it, as a pipe would
    with _piped_width():
        assert Console().width == PIPED_COLUMNS
    assert Console(file=sys.stdout).width == 80  # restored: nothing leaks past the command


def test_an_unknown_option_lists_the_policy_options(data: Path, tmp_path: Path) -> None:
    args = [
        "eval",
        "--policy",
        "scripted",
        "--option",
        "foo=bar",
        "--data",
        str(data),
        "--out",
        str(tmp_path),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "'foo'" in line and "its options: max_turns" in line and "__init__" not in line


def test_a_suggestion_ends_with_its_own_question_mark() -> None:
    result = runner.invoke(app, ["evall"])
    assert result.exit_code == 2
    assert "Did you mean 'eval'? Try" in result.output and "?." not in result.output


def test_env_and_run_json_record_the_versions(data: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["env", "--json"])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["spacetools"] and report["numpy"] and "torch" in report and "git_commit" in report
    assert set(report["extras"]) >= {"server", "hf", "train"}
    args = [
        "eval",
        "--policy",
        "scripted",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--profile",
        "exact",
    ]
    assert runner.invoke(app, args).exit_code == 0
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["versions"]["numpy"] == report["numpy"] and record["versions"]["python"] == report["python"]
    record["versions"]["numpy"] = "0.0"  # an upgraded install still resumes its run
    (tmp_path / "run" / "run.json").write_text(json.dumps(record))
    assert runner.invoke(app, args).exit_code == 0


def test_package_metadata_is_in_todays_format() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license = "Apache-2.0"$', text, re.M)  # an SPDX string, not the deprecated table
    (pybullet,) = re.findall(r'"(pybullet *[<>=!~][^"]*)"', text)
    assert "==" not in pybullet and ">=" in pybullet


def test_a_misspelt_config_key_gets_the_key_it_may_mean(tmp_path: Path) -> None:
    args = ["train", "dirl", "--config", str(ROOT / "configs/dirl-tiny.yaml"), "--out", str(tmp_path / "run")]
    result = runner.invoke(app, [*args, "sft.epochz=2"])
    assert result.exit_code == 2 and "sft.epochz: unknown key; did you mean 'epochs'?" in result.output
    nested = runner.invoke(app, [*args, "grpo.rollout.max_trns=2"])
    assert nested.exit_code == 2 and "did you mean 'max_turns'" in nested.output
    assert not (tmp_path / "run").exists()
