"""One config object per training stage, loaded from YAML, recorded in the run folder, compared on resume."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from spacetools.toolshed.safeyaml import load_yaml

Config = TypeVar("Config", bound=BaseModel)
CONFIG_FILE = "config.json"
Thoughts = Literal["full", "empty"]
"""What SFT data keeps of a teacher's `<think>` text: all of it, or empty tags."""
ReportTo = Literal["tensorboard", "wandb"]
"""Where a training stage's figures go besides `metrics.jsonl` (W&B runs offline without an API key)."""
REPORT_TO_HELP = "tensorboard (event files in the run folder) and/or wandb (offline without WANDB_API_KEY)"
# Settings that change where figures are shown, not what is trained: a resumed run may change them.
_NOT_COMPARED = frozenset({"report_to"})
Trainable = Annotated[str, StringConstraints(pattern=r"^(full|lora|last_layers:[1-9][0-9]*)$")]
"""Which weights a stage trains: `full`, `lora`, or `last_layers:N` (see `spacetools.kit.trainable`)."""


class LoraSettings(BaseModel):
    """The LoRA adapter of `trainable: lora` (peft's `LoraConfig`)."""

    model_config = ConfigDict(extra="forbid")

    r: PositiveInt = 16
    alpha: PositiveInt = 32
    dropout: float = Field(0.0, ge=0, lt=1)
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="module names the adapter wraps (the language model's attention projections)",
    )


class SFTConfig(BaseModel):
    """Supervised fine-tuning on teacher traces: loss on the assistant's tokens only.

    Defaults follow the paper's SFT stage (warm-up 0.1 then cosine, vision tower frozen, 2 epochs).
    """

    model_config = ConfigDict(extra="forbid")

    model: Path = Field(description="a local folder with the model, its processor and chat template")
    data: Path = Field(description="the SFT data set (JSONL written by `spacetools train traces`)")
    out: Path = Field(description="the run folder: checkpoints, metrics, the trained model")
    epochs: PositiveInt = 2
    learning_rate: float = Field(2e-5, gt=0)
    batch_size: PositiveInt = Field(8, description="episodes per optimiser step (accumulated one by one)")
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    freeze_vision: bool = True
    max_tokens: PositiveInt = Field(8192, description="longer episodes are left out (and counted)")
    seed: int = Field(0, ge=0)
    checkpoint_every: PositiveInt = Field(20, description="optimiser steps between checkpoints")
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    report_to: list[ReportTo] = Field(["tensorboard"], description=REPORT_TO_HELP)
    trainable: Trainable = Field("full", description="full, last_layers:N or lora")
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings.model_validate({}))


def load_config(
    cls: type[Config], path: str | Path | None = None, dotlist: Sequence[str] = (), **overrides: Any
) -> Config:
    """A config from a YAML file (optional), `key=value` overrides (`dotlist`) on it, then keyword
    overrides on top; pydantic says what is wrong."""
    values: dict[str, Any] = {}
    if path is not None:
        loaded = load_yaml(Path(path).read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
        values.update(loaded)
    values = apply_dotlist(values, dotlist)
    values.update({key: value for key, value in overrides.items() if value is not None})
    return cls.model_validate(values)


def apply_dotlist(values: dict[str, Any], dotlist: Sequence[str]) -> dict[str, Any]:
    """`values` with OmegaConf-style overrides on top, as verl and TRL users write them: `sft.epochs=2`
    sets a nested setting, values are read as YAML (`1e-6`, `true`, `[tensorboard, wandb]`)."""
    if not dotlist:
        return values
    from omegaconf import Container, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    merged: Container = OmegaConf.create(values)
    for item in dotlist:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([item]))
        except yaml.YAMLError as error:
            raise ValueError(f"{item!r}: not a YAML value ({getattr(error, 'problem', error)})") from None
        except OmegaConfBaseException as error:
            raise ValueError(f"{item!r}: {' '.join(str(error).split())}") from None
    resolved = OmegaConf.to_container(merged)
    assert isinstance(resolved, dict)  # merged onto a mapping
    return {str(key): value for key, value in resolved.items()}


def record_config(config: BaseModel, out: Path, *, resume: bool) -> None:
    """Write the config into the run folder, or check that a resumed run has the same one.

    A run folder may be moved: a path setting matches when it is the same path, or the same path relative
    to the run folder (a stage's model and data inside the moved run, or the folder itself).
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    current = json.loads(config.model_dump_json())
    if resume and path.is_file():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(recorded, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{path} is unreadable ({error}); use a new --out") from None
        recorded_out = recorded.get("out", str(out))
        changed = sorted(
            key
            for key in set(recorded) | set(current)
            if recorded.get(key) != current.get(key)
            and key not in _NOT_COMPARED
            and not (
                isinstance(getattr(config, key, None), Path)
                and isinstance(recorded.get(key), str)
                and os.path.relpath(recorded[key], recorded_out) == os.path.relpath(current[key], out)
            )
        )
        if changed:
            raise ValueError(f"{out} holds a run with other settings ({', '.join(changed)}); use a new --out")
        return
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")


class GRPOConfig(BaseModel):
    """Multi-turn GRPO with live tools: n episodes per prompt, group-normalised advantages, clipped ratio
    loss on the model's tokens, KL to the starting model. Defaults follow the paper's stage-2 IRL."""

    model_config = ConfigDict(extra="forbid")

    model: Path = Field(description="the starting model (the SFT output); also the KL reference")
    data: Path = Field(description="a folder of <key>.parquet in the verl layout")
    out: Path
    benches: list[str] | None = None
    limit: PositiveInt | None = Field(None, description="prompts per benchmark")
    steps: PositiveInt = 10
    prompts_per_step: PositiveInt = 4
    group_size: int = Field(5, ge=2, description="episodes per prompt (GRPO's n)")
    learning_rate: float = Field(1e-6, gt=0)
    clip_eps: float = Field(0.2, gt=0)
    scale_rewards: bool = Field(True, description="divide by the group's reward std; false: Dr. GRPO")
    kl_coef: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: PositiveInt = 512
    max_turns: PositiveInt = 8
    max_tool_response_chars: PositiveInt = 2048
    system_prompt: str | None = Field(None, description="a prompt template text ({tools} marks the tools)")
    toolset: str = "v1"
    profile: str = "exact"
    toolshed_url: str | None = None
    seed: int = Field(0, ge=0)
    checkpoint_every: PositiveInt = 5
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    report_to: list[ReportTo] = Field(["tensorboard"], description=REPORT_TO_HELP)
    trainable: Trainable = Field("full", description="full, last_layers:N or lora")
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings.model_validate({}))


class TracesConfig(BaseModel):
    """Teacher traces for SFT: run a teacher with live tools, keep its correct, tool-measured episodes."""

    model_config = ConfigDict(extra="forbid")

    teacher: str = Field(
        "scripted", description="a policy name (scripted, openai, hf) or a local model folder"
    )
    teacher_options: dict[str, Any] = Field(default_factory=dict)
    data: Path
    out: Path = Field(description="the SFT data set to write (JSONL)")
    benches: list[str] | None = None
    limit: PositiveInt | None = None
    min_score_exact: float = Field(1.0, description="kept when scored at least this (yes/no, choices)")
    min_score_graded: float = Field(0.5, description="kept when scored at least this (points, boxes, grasps)")
    min_score_by_family: dict[str, float] = Field(default_factory=dict, description="overrides per family")
    toolset: str = "v1"
    profile: str = "exact"
    toolshed_url: str | None = None
    seed: int = Field(0, ge=0)
    max_turns: PositiveInt = 8
    max_tool_response_chars: PositiveInt = 2048
    system_prompt: str | None = None
    concurrency: PositiveInt = 8


class TinyModelConfig(BaseModel):
    """The locally built base model of `dirl-tiny` (random weights, tokenizer trained on the traces)."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: PositiveInt = 2048
    hidden_size: PositiveInt = 64
    layers: PositiveInt = 2
    heads: PositiveInt = 4
    max_pixels: PositiveInt = 224 * 168


class DataConfig(BaseModel):
    """SpatialSim sets generated into the run folder (training and held-out, on different seeds)."""

    model_config = ConfigDict(extra="forbid")

    train_n: PositiveInt = 24
    train_seed: int = Field(default=100, ge=0)
    eval_n: PositiveInt = 8
    eval_seed: int = Field(default=200, ge=0)
    second_eval_seed: int | None = Field(
        default=None,
        ge=0,
        description="a second held-out set: the SFT and DIRL models are evaluated on it too",
    )
    families: list[str] | None = None


class DIRLConfig(BaseModel):
    """The whole DIRL recipe: teacher traces, SFT, GRPO with live tools, an evaluation after each stage.

    Stage settings are partial configs of the stage objects (paths are filled in by the recipe).
    `base_model` is a local model folder, a known pretrained base (`smollm2-135m`), or `tiny` to build one. The teaching phase mixes traces of the
    IRL teacher (the base model after stage-1 GRPO with one pointing tool) and of the universal teacher at
    `mix` (the paper: 1:3).
    """

    model_config = ConfigDict(extra="forbid")

    base_model: str = "tiny"
    tiny: TinyModelConfig = Field(default_factory=lambda: TinyModelConfig())
    data: DataConfig = Field(default_factory=lambda: DataConfig())
    system_prompt: str | None = Field(None, description="prompt template text for every stage")
    universal_teacher: dict[str, Any] = Field(default_factory=lambda: {"teacher": "scripted"})
    irl: dict[str, Any] = Field(default_factory=dict, description="stage-1 GRPO settings (IRL teacher)")
    irl_toolset: str = "pointing"
    irl_traces_limit: PositiveInt | None = Field(
        None, description="training questions per family the IRL teacher answers for the mix (None: all)"
    )
    irl_families: list[str] = Field(default_factory=lambda: ["robospatial"])
    mix: dict[str, float] = Field(default_factory=lambda: {"irl": 1.0, "universal": 3.0})
    teacher_thoughts: Thoughts = Field(
        "full", description="`empty` trains on the teachers' turns with empty <think> blocks"
    )
    sft: dict[str, Any] = Field(default_factory=dict)
    grpo: dict[str, Any] = Field(default_factory=dict)
    ablation: bool = Field(False, description="also train DIRL without stage 1 (the IRL teacher)")
    eval_limit: PositiveInt | None = None
    ablation_eval_limit: PositiveInt | None = Field(
        None, description="questions per benchmark for the untrained and without-stage-1 evaluations"
    )
    eval_max_new_tokens: PositiveInt = Field(128, description="tokens per turn in the evaluations")
    eval_max_turns: PositiveInt = 4
    profile: str = "exact"
    seed: int = Field(0, ge=0)
    device: str = "cpu"
    turn_check: bool = Field(
        True, description="refuse families the turn limits cannot finish (off: a plumbing smoke test)"
    )
    report_to: list[ReportTo] = Field(
        ["tensorboard"], description=f"every training stage's: {REPORT_TO_HELP}"
    )

    @field_validator("universal_teacher", "irl", "sft", "grpo")
    @classmethod
    def _stage_settings(cls, settings: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """A stage's partial settings are checked against its stage object now, not hours into the run
        (the paths are the recipe's, so placeholders stand in for them)."""
        stages: dict[str, type[BaseModel]] = {"universal_teacher": TracesConfig, "sft": SFTConfig}
        stage = stages.get(info.field_name or "", GRPOConfig)
        placeholders = {name: "." for name in ("model", "data", "out") if name in stage.model_fields}
        try:
            stage.model_validate({**placeholders, **settings})
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors(include_url=False)
            )
            raise PydanticCustomError("stage_settings", "{problems}", {"problems": problems}) from None
        return settings
