"""The tool-set config file: which backend answers each tool, from which model, on which device.

```yaml
tools:
  depth_estimator:
    backend: depth_pro          # sim | depth_pro | depth_anything
    model_path: models/DepthPro # relative paths are read from the YAML file's folder
    device: cuda:0              # cpu | cuda | cuda:N | mps
    instances: 1
    timeout_s: 120
    batch_size: 1
    options: {focal_length_px: 1200}   # backend-specific settings
```

Only the tools listed are served, in file order. A tool keeps its name, methods and result texts
whatever the backend (the model tools subclass the simulated ones). Every error names the file and the
setting: an unknown tool or backend, a missing model folder, a bad device, an unknown option.
`configs/toolsets/sim.yaml` is the default V1 set; `real.yaml` shows every real backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spacetools.toolshed.deployment import MAX_TIMEOUT_S, BackendName, ToolDeployment, resolve_tool_class
from spacetools.toolshed.safeyaml import YamlError, load_yaml

_SIM = "spacetools.tools"
_MODELS = "spacetools.tools.models"
BACKENDS: dict[str, dict[str, str]] = {
    "roborefer": {
        "sim": f"{_SIM}.pointing:RoboReferTool",
        "endpoint": f"{_MODELS}.pointing:RoboReferEndpointTool",
        "transformers": f"{_MODELS}.pointing:RoboReferTransformersTool",
    },
    "vlm": {
        "sim": f"{_SIM}.pointing:VLMPointingTool",
        "endpoint": f"{_MODELS}.pointing:VLMEndpointTool",
        "transformers": f"{_MODELS}.pointing:VLMTransformersTool",
    },
    "sam2": {
        "sim": f"{_SIM}.segmentation:Sam2Tool",
        "sam2": f"{_MODELS}.segmentation:Sam2ModelTool",
        "sam": f"{_MODELS}.segmentation:SamModelTool",
    },
    "depth_estimator": {
        "sim": f"{_SIM}.depth:DepthEstimatorTool",
        "depth_pro": f"{_MODELS}.depth:DepthProTool",
        "depth_anything": f"{_MODELS}.depth:DepthAnythingTool",
    },
    "bounding_box": {"geometric": f"{_SIM}.bbox:BoundingBoxTool"},
    "grasp_generator": {
        "geometric": f"{_SIM}.grasp:GraspGeneratorTool",
        "http": f"{_MODELS}.grasps:GraspServerTool",
    },
    "vision_ops": {"builtin": f"{_SIM}.vision_ops:VisionOpsTool"},
}
"""Tool name → backend name → the tool class that implements it."""


class ToolsetConfigError(ValueError):
    """A tool-set config that cannot be used; the message names the file and the setting."""


class ToolConfig(BaseModel):
    """One tool's entry in the config file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: str = Field(description="Which implementation answers the tool (see BACKENDS).")
    instances: int = Field(1, ge=1, le=256)
    runtime: BackendName = Field("process", description="Where instances run: process or inprocess.")
    timeout_s: float = Field(60.0, gt=0, le=MAX_TIMEOUT_S)
    num_cpus: float = Field(0.2, ge=0, description="CPU share of each instance on Ray.")
    num_gpus: float = Field(0.0, ge=0, description="GPU share of each instance on Ray.")
    model_path: Path | None = None
    device: str | None = None
    dtype: str | None = None
    batch_size: int | None = Field(None, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)

    def tool_settings(self, base: Path) -> dict[str, Any]:
        """The keyword config of the tool class: the common settings that are set, then `options`."""
        common: dict[str, Any] = {
            "model_path": None if self.model_path is None else str(base / self.model_path),
            "device": self.device,
            "dtype": self.dtype,
            "batch_size": self.batch_size,
        }
        return {**{k: v for k, v in common.items() if v is not None}, **self.options}


class ToolsetConfig(BaseModel):
    """A whole tool-set config file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tools: dict[str, ToolConfig] = Field(min_length=1)


def load_toolset_config(path: str | Path) -> list[ToolDeployment]:
    """The deployments described by a tool-set YAML file; a `ToolsetConfigError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ToolsetConfigError(f"no such tool-set config: {path}")
    try:
        data = load_yaml(path.read_text(), str(path))
    except YamlError as error:
        raise ToolsetConfigError(str(error)) from None
    return toolset_deployments(data, base=path.parent, source=str(path))


def toolset_deployments(data: Any, base: Path, source: str = "config") -> list[ToolDeployment]:
    """The deployments of a parsed config (``base``: the folder relative model paths start from)."""
    try:
        config = ToolsetConfig.model_validate(data)
    except ValidationError as error:
        raise ToolsetConfigError(f"{source}: {_first_problem(error)}") from None
    deployments = []
    for tool_name, entry in config.tools.items():
        where = f"{source}: tools.{tool_name}"
        backends = BACKENDS.get(tool_name)
        if backends is None:
            raise ToolsetConfigError(f"{where}: unknown tool; choose from {', '.join(BACKENDS)}")
        if entry.backend not in backends:
            raise ToolsetConfigError(
                f"{where}.backend: unknown backend {entry.backend!r}; choose from {', '.join(backends)}"
            )
        tool_cls = resolve_tool_class(backends[entry.backend])
        settings = entry.tool_settings(base)
        settings_model = getattr(tool_cls, "settings_model", None)
        if settings_model is not None:
            try:
                settings_model.model_validate(settings)
            except ValidationError as error:
                raise ToolsetConfigError(f"{where}: {_first_problem(error)}") from None
        elif set(settings) - set(entry.options):
            raise ToolsetConfigError(
                f"{where}: backend {entry.backend!r} loads no model "
                f"(remove {', '.join(sorted(set(settings) - set(entry.options)))})"
            )
        elif unknown := sorted(set(entry.options) - tool_cls.config_keys):
            known = ", ".join(sorted(tool_cls.config_keys)) or "none"
            raise ToolsetConfigError(
                f"{where}.options: unknown option {', '.join(unknown)} for backend {entry.backend!r} "
                f"(known: {known})"
            )
        deployments.append(
            ToolDeployment(
                tool=backends[entry.backend],
                instances=entry.instances,
                backend=entry.runtime,
                timeout_s=entry.timeout_s,
                num_cpus=entry.num_cpus,
                num_gpus=entry.num_gpus,
                config=settings,
            )
        )
    return deployments


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    if problem["type"] == "extra_forbidden":
        message = "unknown setting"
    return f"{where}: {message}" if where else message
