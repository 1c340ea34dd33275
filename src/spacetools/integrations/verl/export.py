"""`spacetools export verl`: the files verl's trainer needs to train with a running Toolshed server.

- ``tool_config.yaml``: verl's tool config, one :class:`~.tool.ToolshedTool` per tool method of the
  tool set, with its OpenAI function schema (the project's own names: the hermes format carries dots);
- ``rollout.yaml``: the multi-turn rollout settings and the reward function, as a config fragment;
- ``overrides.txt``: the same settings as the trainer's command-line overrides, one per line
  (``python -m verl.trainer.main_ppo $(cat overrides.txt) …``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spacetools.agent.protocol import DEFAULT_MAX_TOOL_RESPONSE_CHARS
from spacetools.rewards import dispatch
from spacetools.tools.definition import ToolSpec
from spacetools.toolshed import Toolshed

TOOL_CLASS = "spacetools.integrations.verl.tool.ToolshedTool"
MAX_ASSISTANT_TURNS = 8
TOOL_CALL_FORMAT = "hermes"
REWARD_FUNCTION = "compute_score"
TOOL_CONFIG_FILE = "tool_config.yaml"
ROLLOUT_FILE = "rollout.yaml"
OVERRIDES_FILE = "overrides.txt"


@dataclass(frozen=True)
class VerlExport:
    """The written files."""

    tool_config: Path
    rollout: Path
    overrides: Path


def verl_tool_schema(spec: ToolSpec) -> dict[str, Any]:
    """The OpenAI function schema in the form verl's schema model reads.

    verl wants a ``type`` on every property; a union (``anyOf`` of plain types, e.g. a number or a
    ``"$name"`` reference) becomes the equivalent list of types.
    """
    schema = spec.to_openai()
    properties = schema["function"]["parameters"].get("properties", {})
    for name, prop in properties.items():
        options = prop.get("anyOf")
        if "type" not in prop and options and all(set(option) == {"type"} for option in options):
            properties[name] = {
                "type": [option["type"] for option in options],
                **{key: value for key, value in prop.items() if key != "anyOf"},
            }
    return schema


def tool_config(toolset: str, url: str) -> dict[str, Any]:
    """verl's tool config for every tool method of ``toolset``, served at ``url``."""
    return {
        "tools": [
            {
                "class_name": TOOL_CLASS,
                "config": {"type": "native", "url": url},
                "tool_schema": verl_tool_schema(spec),
            }
            for spec in Toolshed(toolset).specs()
        ]
    }


def rollout_settings(tool_config_path: Path, reward_path: Path) -> dict[str, Any]:
    """The multi-turn rollout settings (8 turns, 2048-character tool responses, hermes) and the reward."""
    return {
        "actor_rollout_ref": {
            "rollout": {
                "multi_turn": {
                    "enable": True,
                    "max_assistant_turns": MAX_ASSISTANT_TURNS,
                    "max_tool_response_length": DEFAULT_MAX_TOOL_RESPONSE_CHARS,
                    "format": TOOL_CALL_FORMAT,
                    "tool_config_path": str(tool_config_path),
                },
                "agent": {"default_agent_loop": "tool_agent"},
            }
        },
        "reward": {"custom_reward_function": {"path": str(reward_path), "name": REWARD_FUNCTION}},
    }


def _overrides(settings: dict[str, Any], prefix: str = "") -> list[str]:
    lines: list[str] = []
    for key, value in settings.items():
        if isinstance(value, dict):
            lines.extend(_overrides(value, f"{prefix}{key}."))
        else:
            lines.append(f"{prefix}{key}={str(value).lower() if isinstance(value, bool) else value}")
    return lines


def export_verl(toolset: str, url: str, out_dir: Path) -> VerlExport:
    """Write the tool config, the rollout settings and their overrides into ``out_dir``."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    tool_config_path = out_dir / TOOL_CONFIG_FILE
    tool_config_path.write_text(yaml.safe_dump(tool_config(toolset, url), sort_keys=False))
    settings = rollout_settings(tool_config_path, Path(dispatch.__file__).resolve())
    rollout_path = out_dir / ROLLOUT_FILE
    rollout_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    overrides_path = out_dir / OVERRIDES_FILE
    overrides_path.write_text("\n".join(_overrides(settings)) + "\n")
    return VerlExport(tool_config_path, rollout_path, overrides_path)
