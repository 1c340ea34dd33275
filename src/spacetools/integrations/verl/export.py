"""`spacetools export verl`: the files verl's trainer needs to train with a running Toolshed server.

- ``tool_config.yaml``: verl's tool config, one :class:`~.tool.ToolshedTool` per tool method of the
  tool set, with its OpenAI function schema (the project's own names: the hermes format carries dots);
- ``rollout.yaml``: the multi-turn rollout settings and the reward function, as a config fragment;
- ``overrides.txt``: the same settings as the trainer's command-line overrides, one per line
  (``python -m verl.trainer.main_ppo $(cat overrides.txt) …``);
- with a data set, ``data/*.parquet``: its files with ``extra_info.tools_kwargs``, the ``create_kwargs``
  verl hands each tool's ``create``: the attachments of the question's images (a simulated question's
  scene, so the tools see the scene it shows).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from spacetools.agent.protocol import DEFAULT_MAX_TOOL_RESPONSE_CHARS
from spacetools.bench.dataset import parquet_files
from spacetools.kit.definition import ToolSpec
from spacetools.rewards import dispatch
from spacetools.toolshed import Toolshed

TOOL_CLASS = "spacetools.integrations.verl.tool.ToolshedTool"
MAX_ASSISTANT_TURNS = 8
TOOL_CALL_FORMAT = "hermes"
REWARD_FUNCTION = "compute_score"
TOOL_CONFIG_FILE = "tool_config.yaml"
ROLLOUT_FILE = "rollout.yaml"
OVERRIDES_FILE = "overrides.txt"
DATA_DIR = "data"


@dataclass(frozen=True)
class VerlExport:
    """The written files."""

    tool_config: Path
    rollout: Path
    overrides: Path
    data: list[Path]


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


def with_tools_kwargs(table: pa.Table, tool_names: list[str]) -> pa.Table:
    """``table`` with ``extra_info.tools_kwargs``: for every tool, ``{"create_kwargs": {"attachments":
    [...]}}``, the attachment of the row's image (``{"scene": extra_info.scene}``; none for a
    photograph), which verl passes to ``create``."""
    extra_info = table.column("extra_info").combine_chunks()
    keys = [key for key in extra_info.type.names if key != "tools_kwargs"]
    scenes = extra_info.field("scene").to_pylist() if "scene" in keys else [None] * len(table)
    kwargs = [
        {name: {"create_kwargs": {"attachments": [{"scene": scene}] if scene else []}} for name in tool_names}
        for scene in scenes
    ]
    fields = [extra_info.field(key) for key in keys]
    extended = pa.StructArray.from_arrays([*fields, pa.array(kwargs)], names=[*keys, "tools_kwargs"])
    return table.set_column(table.schema.get_field_index("extra_info"), "extra_info", extended)


def export_verl_data(data: Path, toolset: str, out_dir: Path) -> list[Path]:
    """Copies of the parquet files of ``data`` (a file or a folder) whose rows carry ``tools_kwargs``."""
    names = [spec.name for spec in Toolshed(toolset).specs()]
    sources = parquet_files(data)
    if not sources:
        raise FileNotFoundError(f"no parquet files in {data}")
    tables = {source.name: with_tools_kwargs(pq.read_table(source), names) for source in sources}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in tables.items():
        pq.write_table(table, out_dir / name, compression="zstd")
        written.append(out_dir / name)
    return written


def export_verl(toolset: str, url: str, out_dir: Path, data: Path | None = None) -> VerlExport:
    """Write the tool config, the rollout settings and their overrides into ``out_dir``, and with ``data``
    its parquet files with the tools' create arguments into ``out_dir/data``."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = export_verl_data(data, toolset, out_dir / DATA_DIR) if data is not None else []
    tool_config_path = out_dir / TOOL_CONFIG_FILE
    tool_config_path.write_text(yaml.safe_dump(tool_config(toolset, url), sort_keys=False))
    settings = rollout_settings(tool_config_path, Path(dispatch.__file__).resolve())
    rollout_path = out_dir / ROLLOUT_FILE
    rollout_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    overrides_path = out_dir / OVERRIDES_FILE
    overrides_path.write_text("\n".join(_overrides(settings)) + "\n")
    return VerlExport(tool_config_path, rollout_path, overrides_path, written)
