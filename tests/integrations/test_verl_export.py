"""`spacetools export verl` in the main environment, where verl is not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

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
