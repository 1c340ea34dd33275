"""`ToolDeployment`: how one tool is served (its class, instance count, backend, timeout, config)."""

from __future__ import annotations

import importlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spacetools.tools.definition import Tool, tool_methods

__all__ = ["BackendName", "ToolDeployment", "resolve_tool_class"]

# A Ray backend adds "ray" here and to `spacetools.toolshed.backends.BACKENDS`.
BackendName = Literal["inprocess", "process"]


class ToolDeployment(BaseModel):
    """One tool served by a pool of identical instances."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    tool: type[Tool] | str = Field(description='A Tool subclass or its import path "module:Class".')
    instances: int = Field(default=1, ge=1, le=256)
    backend: BackendName = "process"
    timeout_s: float = Field(default=60.0, gt=0)
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tool")
    @classmethod
    def _check_tool(cls, value: type[Tool] | str) -> type[Tool] | str:
        if isinstance(value, str):
            if value.count(":") != 1:
                raise ValueError(f'expected "module:Class", got {value!r}')
            return value
        if not (isinstance(value, type) and issubclass(value, Tool)):
            raise ValueError(f"expected a Tool subclass, got {value!r}")
        return value

    def tool_class(self) -> type[Tool]:
        """The tool class, imported if it was given as a path."""
        return resolve_tool_class(self.tool)

    def with_setting(self, key: str, value: Any) -> ToolDeployment:
        """This deployment with ``config[key] = value`` if its tool understands `key` (else unchanged)."""
        tool_class = self.tool_class()
        if key not in tool_class.config_keys:
            return self
        config = {**self.config, key: value}
        tool_class.check_config(config)
        return self.model_copy(update={"config": config})

    @property
    def name(self) -> str:
        """The tool's name (the part before the dot in its methods' names)."""
        return self.tool_class().name


def resolve_tool_class(tool: type[Tool] | str) -> type[Tool]:
    """Import `"module:Class"` (or pass a class through) and check that it is a usable tool class."""
    if isinstance(tool, str):
        module_name, _, class_name = tool.partition(":")
        try:
            tool = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot import tool {module_name}:{class_name}: {exc}") from exc
    if not (isinstance(tool, type) and issubclass(tool, Tool)):
        raise ValueError(f"{tool!r} is not a Tool subclass")
    tool_methods(tool)  # fails early, with the class named, if a schema cannot be built
    return tool
