"""One config object per training stage, loaded from YAML, recorded in the run folder, compared on resume."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from spacetools.agent.rollout import RolloutConfig
from spacetools.toolshed import ToolsConfig
from spacetools.toolshed.safeyaml import load_yaml
from spacetools.toolshed.toolsets import get_toolset

Config = TypeVar("Config", bound=BaseModel)
CONFIG_FILE = "config.json"
Thoughts = Literal["full", "empty"]
"""What SFT data keeps of a teacher's `<think>` text: all of it, or empty tags."""
ReportTo = Literal["tensorboard", "wandb"]
"""Where a training stage's figures go besides `metrics.jsonl` (W&B runs offline without an API key)."""
REPORT_TO_HELP = "tensorboard (event files in the run folder) and/or wandb (offline without WANDB_API_KEY)"
# Settings a resumed run may change: where figures are shown, and how many episodes share a generate
# call (an episode samples the same tokens whichever episodes share its batch): not what is trained.
_NOT_COMPARED = frozenset({"report_to", "generation_batch_size"})
Trainable = Annotated[str, StringConstraints(pattern=r"^(full|lora|last_layers:[1-9][0-9]*)$")]
"""Which weights a stage trains: `full`, `lora`, or `last_layers:N` (see `spacetools.kit.trainable`)."""


class LoraSettings(BaseModel):
    """The LoRA adapter of `trainable: lora` (peft's `LoraConfig`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    r: PositiveInt = 16
    alpha: PositiveInt = 32
    dropout: float = Field(0.0, ge=0, lt=1)
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="module names the adapter wraps (the language model's attention projections)",
    )


class SFTSettings(BaseModel):
    """Supervised fine-tuning on teacher traces (loss on the assistant's tokens only), without its paths:
    a DIRL recipe's `sft:` block. Defaults follow the paper's SFT stage (warm-up 0.1 then cosine, vision
    tower frozen, 2 epochs)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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


class SFTConfig(SFTSettings):
    """An SFT stage: its settings and the model, data and run folder it works on."""

    model: Path = Field(description="a local folder with the model, its processor and chat template")
    data: Path = Field(description="the SFT data set (JSONL written by `spacetools train traces`)")
    out: Path = Field(description="the run folder: checkpoints, metrics, the trained model")


def load_config(
    cls: type[Config], path: str | Path | None = None, dotlist: Sequence[str] = (), **overrides: Any
) -> Config:
    """A config from a YAML file (optional), `key=value` overrides (`dotlist`) on it, then keyword
    overrides on top (a mapping merges into the block of its name: `tools={"toolshed_url": url}`; None
    leaves a setting as it is); pydantic says what is wrong."""
    values: dict[str, Any] = {}
    if path is not None:
        loaded = load_yaml(Path(path).read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
        values.update(loaded)
    values = apply_dotlist(values, dotlist)
    return cls.model_validate(_merged(values, overrides))


def _merged(values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(values)
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            block = merged.get(key)
            nested = _merged(block if isinstance(block, dict) else {}, value)
            if nested:
                merged[key] = nested
        elif value is not None:
            merged[key] = value
    return merged


MAX_KEY_DEPTH = 16
"""Dotted levels an override key may have: settings nest a few levels deep, and OmegaConf recurses once
per level (a 2,000-level key would end in a RecursionError)."""


def apply_dotlist(values: dict[str, Any], dotlist: Sequence[str]) -> dict[str, Any]:
    """`values` with OmegaConf-style overrides on top, as verl and TRL users write them: `sft.epochs=2`
    sets a nested setting, values are read as YAML (`1e-6`, `true`, `[tensorboard, wandb]`).

    Interpolation (`${oc.env:HOME}`, `${sft.epochs}`) is refused rather than resolved: a value is what is
    written (overrides never read the environment), and a `${` kept as text would name a wrong folder."""
    if not dotlist:
        return values
    from omegaconf import Container, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    merged: Container = OmegaConf.create(values)
    for item in dotlist:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        if key.count(".") >= MAX_KEY_DEPTH:
            raise ValueError(f"{key[:40]}...: a key has at most {MAX_KEY_DEPTH} dotted levels")
        if "${" in item:
            raise ValueError(f"{item!r}: interpolation (${{...}}) is not supported; write the value itself")
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


class GRPOSettings(BaseModel):
    """Multi-turn GRPO with live tools (n episodes per prompt, group-normalised advantages, clipped ratio
    loss on the model's tokens, KL to the starting model), without its paths: a DIRL recipe's `irl:` and
    `grpo:` blocks. Defaults follow the paper's stage-2 IRL; `rollout.concurrency` episodes run at once."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig())
    tools: ToolsConfig = Field(default_factory=lambda: ToolsConfig())
    seed: int = Field(0, ge=0, description="the data order's and the sampling's (the tools have their own)")
    generation_batch_size: PositiveInt = Field(
        16, description="episodes sampled together in one generate call (bounds the memory of generation)"
    )
    checkpoint_every: PositiveInt = 5
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    report_to: list[ReportTo] = Field(["tensorboard"], description=REPORT_TO_HELP)
    trainable: Trainable = Field("full", description="full, last_layers:N or lora")
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings.model_validate({}))


class GRPOConfig(GRPOSettings):
    """A GRPO stage: its settings and the model, data and run folder it works on."""

    model: Path = Field(description="the starting model (the SFT output); also the KL reference")
    data: Path = Field(description="a folder of <key>.parquet in the verl layout")
    out: Path


class TracesSettings(BaseModel):
    """Teacher traces for SFT (run a teacher with live tools, keep its correct, tool-measured episodes),
    without their paths: a DIRL recipe's `universal_teacher:` block."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    teacher: str = Field(
        "scripted", description="a policy name (scripted, openai, hf) or a local model folder"
    )
    teacher_options: dict[str, Any] = Field(default_factory=dict)
    benches: list[str] | None = None
    limit: PositiveInt | None = None
    min_score_exact: float = Field(1.0, description="kept when scored at least this (yes/no, choices)")
    min_score_graded: float = Field(0.5, description="kept when scored at least this (points, boxes, grasps)")
    min_score_by_family: dict[str, float] = Field(default_factory=dict, description="overrides per family")
    tools: ToolsConfig = Field(default_factory=lambda: ToolsConfig())
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig())


class TracesConfig(TracesSettings):
    """A traces stage: its settings, the questions and the SFT data set it writes."""

    data: Path
    out: Path = Field(description="the SFT data set to write (JSONL)")


class TinyModelConfig(BaseModel):
    """The locally built base model of `dirl-tiny` (random weights, tokenizer trained on the traces)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    vocab_size: PositiveInt = 2048
    hidden_size: PositiveInt = 64
    layers: PositiveInt = 2
    heads: PositiveInt = 4
    max_pixels: PositiveInt = 224 * 168


class DataConfig(BaseModel):
    """SpatialSim sets generated into the run folder (training and held-out, on different seeds)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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

    Each stage's block holds that stage's settings without its paths (the recipe gives those), checked
    when the config is made. `tools` and `rollout` are every stage's, the evaluations' included; a stage's
    own `tools:` or `rollout:` block changes the fields it names (`irl: {rollout: {max_turns: 3}}`), and
    the IRL teacher trains with the tool set `irl_toolset`. `seed`, `device` and `report_to` are every
    training stage's unless its block sets them. `base_model` is a local model folder, a known pretrained
    base (`smollm2-135m`), or `tiny` to build one. The teaching phase mixes traces of the IRL teacher (the
    base model after stage-1 GRPO with one pointing tool) and of the universal teacher at `mix` (the
    paper: 1:3).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base_model: str = "tiny"
    tiny: TinyModelConfig = Field(default_factory=lambda: TinyModelConfig())
    data: DataConfig = Field(default_factory=lambda: DataConfig())
    tools: ToolsConfig = Field(default_factory=lambda: ToolsConfig())
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig())
    universal_teacher: TracesSettings = Field(default_factory=lambda: TracesSettings.model_validate({}))
    irl: GRPOSettings = Field(
        default_factory=lambda: GRPOSettings.model_validate({}),
        description="stage-1 GRPO settings (IRL teacher)",
    )
    irl_toolset: str = "pointing"
    irl_traces_limit: PositiveInt | None = Field(
        None, description="training questions per family the IRL teacher answers for the mix (None: all)"
    )
    irl_families: list[str] = Field(default_factory=lambda: ["robospatial"])
    mix: dict[str, float] = Field(default_factory=lambda: {"irl": 1.0, "universal": 3.0})
    teacher_thoughts: Thoughts = Field(
        "full", description="`empty` trains on the teachers' turns with empty <think> blocks"
    )
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings.model_validate({}))
    grpo: GRPOSettings = Field(default_factory=lambda: GRPOSettings.model_validate({}))
    ablation: bool = Field(False, description="also train DIRL without stage 1 (the IRL teacher)")
    eval_limit: PositiveInt | None = None
    ablation_eval_limit: PositiveInt | None = Field(
        None, description="questions per benchmark for the untrained and without-stage-1 evaluations"
    )
    second_eval_limit: PositiveInt | None = Field(
        None, description="questions per benchmark on the second held-out set (default: eval_limit)"
    )
    seed: int = Field(0, ge=0, description="the data mix's and every training stage's")
    device: str = "cpu"
    turn_check: bool = Field(
        True, description="refuse families the turn limits cannot finish (off: a plumbing smoke test)"
    )
    report_to: list[ReportTo] = Field(
        ["tensorboard"], description=f"every training stage's: {REPORT_TO_HELP}"
    )

    @field_validator("irl_toolset")
    @classmethod
    def _known_toolset(cls, value: str) -> str:
        get_toolset(value)  # a ValueError listing the choices
        return value

    @model_validator(mode="after")
    def _one_irl_toolset(self) -> DIRLConfig:
        if "toolset" in self.irl.tools.model_fields_set:
            raise ValueError("irl.tools.toolset: the IRL teacher's tool set is irl_toolset")
        return self

    def stage_settings(self, block: BaseModel) -> dict[str, Any]:
        """A stage block's settings over the recipe's: its `tools` and `rollout` are the recipe's with the
        fields the block names on top, its `seed`, `device` and `report_to` the recipe's unless it sets them."""
        fields = type(block).model_fields
        given = block.model_dump(exclude_unset=True)
        shared = {"seed": self.seed, "device": self.device, "report_to": self.report_to}
        values = {key: value for key, value in shared.items() if key in fields}
        values.update(given)
        for name in ("tools", "rollout"):
            if name in fields:
                values[name] = {**getattr(self, name).model_dump(), **given.get(name, {})}
        return values

    def stage_rollout(self, block: GRPOSettings | TracesSettings) -> RolloutConfig:
        """How a stage's episodes run: the recipe's `rollout` with the block's own on top."""
        return RolloutConfig.model_validate(self.stage_settings(block)["rollout"])
