"""Which tools a run calls, and `connect` to them: one `ToolsConfig` for evaluation, traces and GRPO.

In this process, a named tool set (or a tool-set config file) with its simulated tools at a realism
`profile`; or, with `toolshed_url`, a running Toolshed server, whose tools, profile and seed are its own.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spacetools.toolshed.client import RemoteToolshed
from spacetools.toolshed.config import load_toolset_config
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.protocol import ToolProvider
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset, with_profile

DEFAULT_PROFILE = "realistic"
"""The realism of simulated tools wherever none is given (every command's `--profile`, every config)."""


class ToolsConfig(BaseModel):
    """The tools of a run, checked when the config is made (an unknown tool set or profile, a tool-set file
    that does not load, a URL that is not one).

    ``toolset_config`` (a tool-set YAML, see :mod:`spacetools.toolshed.config`) replaces ``toolset``;
    ``profile`` applies to the simulated tools of either (they own the profiles and check the name);
    ``seed`` enters every session's random draws. With ``toolshed_url`` all of these are the server's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    toolset: str = Field(default="v1", description="a named tool set: v1, v2 (with the robot) or pointing")
    profile: str = Field(default=DEFAULT_PROFILE, description="the simulated tools' realism")
    seed: Annotated[int, Field(ge=0)] = 0
    toolshed_url: str | None = Field(default=None, description="a running Toolshed server instead")
    toolset_config: Path | None = Field(default=None, description="a tool-set YAML (backends, models)")

    @field_validator("toolset")
    @classmethod
    def _known_toolset(cls, value: str) -> str:
        get_toolset(value)  # a ValueError listing the choices
        return value

    @field_validator("toolshed_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8100, got {value!r}")
        return value

    @model_validator(mode="after")
    def _server_or_local(self) -> ToolsConfig:
        if self.toolshed_url is None:
            self.local_deployments()  # the file loads, and the simulated tools know the profile
        elif self.toolset_config is not None:
            raise ValueError(
                "a Toolshed server has its own tools: give the tool-set config to `spacetools serve "
                "--toolset-config`, not with toolshed_url"
            )
        return self

    def local_deployments(self) -> list[ToolDeployment]:
        """The tools to run in this process: the tool-set file's (a `ToolsetConfigError` naming the file
        and the setting) or the named set's, with their simulated tools at `profile`."""
        if self.toolset_config is None:
            return with_profile(self.toolset, self.profile)
        return with_profile(load_toolset_config(self.toolset_config), self.profile)


def connect(tools: ToolsConfig) -> AbstractAsyncContextManager[ToolProvider]:
    """The tool provider `tools` describes (a `Toolshed`, or a `RemoteToolshed` for a URL), not yet
    started: use it as ``async with connect(tools) as provider``."""
    if tools.toolshed_url is not None:
        return RemoteToolshed(tools.toolshed_url)
    return Toolshed(tools.local_deployments(), seed=tools.seed)
