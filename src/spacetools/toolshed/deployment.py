"""`ToolDeployment`: how one tool is served (class, instances, backend, timeout, config, resources, batching)."""

from __future__ import annotations

import importlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spacetools.kit.definition import Tool, tool_methods

__all__ = ["MAX_TIMEOUT_S", "BackendName", "ToolDeployment", "resolve_tool_class"]

BackendName = Literal["inprocess", "process", "ray"]

#: The longest per-call timeout a deployment may set (a day): past it a hung call holds its instance
#: for good, and the deadline a client can count on is gone.
MAX_TIMEOUT_S = 86_400.0


class ToolDeployment(BaseModel):
    """One tool served by a pool of identical instances."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, allow_inf_nan=False)

    tool: type[Tool] | str = Field(description='A Tool subclass or its import path "module:Class".')
    instances: int = Field(default=1, ge=1, le=256)
    backend: BackendName = "process"
    timeout_s: float = Field(default=60.0, gt=0, le=MAX_TIMEOUT_S)
    config: dict[str, Any] = Field(default_factory=dict)
    # Ray backend: each instance is an actor holding this share of a node; a placement group (one
    # bundle per instance, up to max_instances) packs them on few nodes or spreads them over many.
    num_cpus: float = Field(
        default=1.0,
        ge=0,
        description="CPUs per instance: reserved per Ray actor; a worker process's BLAS threads (at least 1).",
    )
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs (or a fraction of one) per Ray actor.")
    placement: Literal["pack", "spread"] | None = Field(
        default=None, description="Ray placement group strategy."
    )
    # Dynamic batching, for tools with a `batch_<method>` counterpart (see toolshed.batcher).
    batch_size: int = Field(
        default=1, ge=1, le=1024, description="Most calls run as one batch (1: no batching)."
    )
    batch_window_ms: float = Field(default=5.0, ge=0, description="How long a batch waits for more calls.")
    # Autoscaling between `instances` and `max_instances` (see toolshed.autoscale).
    max_instances: int | None = Field(default=None, ge=1, le=256, description="None: a fixed pool.")
    target_queue_wait_ms: float = Field(default=100.0, gt=0, description="Grow when calls wait longer.")
    scale_down_idle_s: float = Field(
        default=30.0, gt=0, description="Shrink after an instance idled this long."
    )
    # Warm standby (see toolshed.standby): started outside the pool, taken at once when the pool grows
    # or an instance must be replaced (a fresh Ray actor takes seconds to start).
    standby_instances: int = Field(
        default=0, ge=0, le=256, description="Instances kept started outside the pool, ready to join it."
    )

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

    @model_validator(mode="after")
    def _check_scaling(self) -> ToolDeployment:
        if self.max_instances is not None and self.max_instances < self.instances:
            raise ValueError(f"max_instances ({self.max_instances}) is below instances ({self.instances})")
        return self

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
