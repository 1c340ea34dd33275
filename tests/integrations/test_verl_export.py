"""`spacetools export verl` in the main environment, where verl is not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from spacetools.bench.dataset import read_samples, write_parquet
from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.cli.main import app
from spacetools.rewards import dispatch
from spacetools.toolshed import Toolshed


def test_export_writes_tool_config_rollout_settings_and_reward_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["export", "verl", "--toolset", "v1", "--url", "http://127.0.0.1:9000/", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    tools = yaml.safe_load((tmp_path / "tool_config.yaml").read_text())["tools"]
    specs = Toolshed("v1").specs()
    assert [tool["tool_schema"]["function"]["name"] for tool in tools] == [spec.name for spec in specs]
    # verl's schema model needs a type on every property: unions become lists of types.
    properties = [
        (name, prop)
        for tool in tools
        for name, prop in tool["tool_schema"]["function"]["parameters"]["properties"].items()
    ]
    assert all("type" in prop and "anyOf" not in prop for _, prop in properties)
    assert ("focal_length_px", ["number", "string"]) in [(name, prop["type"]) for name, prop in properties]
    assert {tool["class_name"] for tool in tools} == {"spacetools.integrations.verl.tool.ToolshedTool"}
    assert all(tool["config"] == {"type": "native", "url": "http://127.0.0.1:9000"} for tool in tools)

    overrides = dict(line.split("=", 1) for line in (tmp_path / "overrides.txt").read_text().split())
    prefix = "actor_rollout_ref.rollout.multi_turn."
    assert overrides[prefix + "max_assistant_turns"] == "8"
    assert overrides[prefix + "max_tool_response_length"] == "2048"
    assert overrides[prefix + "format"] == "hermes"
    assert overrides[prefix + "enable"] == "true"
    assert Path(overrides[prefix + "tool_config_path"]) == (tmp_path / "tool_config.yaml").resolve()
    assert Path(overrides["reward.custom_reward_function.path"]) == Path(dispatch.__file__).resolve()
    assert overrides["reward.custom_reward_function.name"] == "compute_score"
    rollout = yaml.safe_load((tmp_path / "rollout.yaml").read_text())
    assert rollout["actor_rollout_ref"]["rollout"]["multi_turn"]["max_assistant_turns"] == 8


def test_exported_data_gives_every_tool_its_questions_scene(tmp_path: Path) -> None:
    data = tmp_path / "sim"
    write_families(data, {"robospatial": generate_group(0, "robospatial", 0, 2)})
    photo = read_samples(data)[0].model_copy(update={"data_source": "photo"})
    photo.extra_info = {k: v for k, v in photo.extra_info.items() if k != "scene"}
    write_parquet([photo], data / "photo.parquet")
    out = tmp_path / "verl"
    command = ["export", "verl", "--out", str(out), "--data", str(data)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    written = sorted((out / "data").glob("*.parquet"))
    assert [path.name for path in written] == ["photo.parquet", "spatialsim_robospatial.parquet"]
    assert f"data.train_files=[{written[0]}," in result.output.replace("\n", "")
    names = [spec.name for spec in Toolshed("v1").specs()]
    for path in written:
        source = pq.read_table(data / path.name).to_pylist()
        rows = pq.read_table(path).to_pylist()
        assert len(rows) == len(source)
        for row, original in zip(rows, source, strict=True):
            tools_kwargs = row["extra_info"].pop("tools_kwargs")
            assert row == original  # nothing else changed
            scene = original["extra_info"]["scene"]
            assert list(tools_kwargs) == names
            assert all(
                kw == {"create_kwargs": {"attachments": [{"scene": scene}] if scene else []}}
                for kw in tools_kwargs.values()
            )
    # The copies still read as the project's data set.
    assert [s.ground_truth for s in read_samples(out / "data")] == [
        s.ground_truth for s in read_samples(data)
    ]


def test_export_data_that_is_not_there_or_not_parquet_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.parquet").write_text("not parquet")
    for data, message in (("missing", "does not exist"), ("empty", "no parquet"), ("notes.parquet", "")):
        out = tmp_path / f"out-{data}"
        result = CliRunner().invoke(
            app, ["export", "verl", "--out", str(out), "--data", str(tmp_path / data)]
        )
        assert result.exit_code == 2 and "--data" in result.output and message in result.output
        assert "Traceback" not in result.output
        assert not (out / "tool_config.yaml").exists()


@pytest.mark.parametrize(
    ("arguments", "wrong"), [(["--url", "ftp://x"], "--url"), (["--toolset", "nope"], "--toolset")]
)
def test_bad_export_arguments_exit_2_naming_the_option(
    tmp_path: Path, arguments: list[str], wrong: str
) -> None:
    result = CliRunner().invoke(app, ["export", "verl", "--out", str(tmp_path), *arguments])
    assert result.exit_code == 2 and wrong in result.output
    assert not (tmp_path / "tool_config.yaml").exists()


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed here")
def test_the_adapter_imports_without_verl_and_says_what_it_needs() -> None:
    from spacetools.integrations.verl.tool import VERL_AVAILABLE, ToolshedTool

    assert not VERL_AVAILABLE
    with pytest.raises(ImportError, match="inside verl"):
        ToolshedTool({"url": "http://127.0.0.1:1"}, None)
