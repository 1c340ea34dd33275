"""One config object per training stage, loaded from YAML, recorded in the run folder, compared on resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, StringConstraints

Config = TypeVar("Config", bound=BaseModel)
CONFIG_FILE = "config.json"
Thoughts = Literal["full", "empty"]
"""What SFT data keeps of a teacher's `<think>` text: all of it, or empty tags."""
Trainable = Annotated[str, StringConstraints(pattern=r"^(full|lora|last_layers:[1-9][0-9]*)$")]
"""Which weights a stage trains: `full`, `lora`, or `last_layers:N` (see `spacetools.train.trainable`)."""


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
    trainable: Trainable = Field("full", description="full, last_layers:N or lora")
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings.model_validate({}))


def load_config(cls: type[Config], path: str | Path | None = None, **overrides: Any) -> Config:
    """A config from a YAML file (optional) with keyword overrides on top; pydantic says what is wrong."""
    values: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
        values.update(loaded)
    values.update({key: value for key, value in overrides.items() if value is not None})
    return cls.model_validate(values)


def record_config(config: BaseModel, out: Path, *, resume: bool) -> None:
    """Write the config into the run folder, or check that a resumed run has the same one."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    current = json.loads(config.model_dump_json())
    if resume and path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(key for key in set(recorded) | set(current) if recorded.get(key) != current.get(key))
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
    irl_families: list[str] = Field(default_factory=lambda: ["robospatial"])
    mix: dict[str, float] = Field(default_factory=lambda: {"irl": 1.0, "universal": 3.0})
    teacher_thoughts: Thoughts = Field(
        "full", description="`empty` trains on the teachers' turns with empty <think> blocks"
    )
    sft: dict[str, Any] = Field(default_factory=dict)
    grpo: dict[str, Any] = Field(default_factory=dict)
    ablation: bool = Field(False, description="also train DIRL without stage 1 (the IRL teacher)")
    eval_limit: PositiveInt | None = None
    eval_max_new_tokens: PositiveInt = Field(128, description="tokens per turn in the evaluations")
    eval_max_turns: PositiveInt = 4
    profile: str = "exact"
    seed: int = Field(0, ge=0)
    device: str = "cpu"
    turn_check: bool = Field(
        True, description="refuse families the turn limits cannot finish (off: a plumbing smoke test)"
    )
