"""Which weights a stage trains: all of them, the last N decoder layers, or a LoRA adapter (peft).

`trainable: full | last_layers:N | lora` is a setting of SFT and GRPO. With `lora` the stage's checkpoints
and its result are adapter folders (peft's `adapter_config.json` naming the base model folder), which
every loader of the project reads as the base model with the adapter merged in (`eval --policy hf`
included); a resumed run continues training the same adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from spacetools.tools.models.language import load_language_model
from spacetools.train.config import LoraSettings


def load_for_training(
    path: Path,
    trainable: str,
    lora: LoraSettings,
    *,
    resume: bool,
    dtype: torch.dtype,
    freeze_vision: bool = False,
) -> Any:
    """The model of `path` with only the weights `trainable` names requiring gradients.

    `resume`: `path` is the stage's own checkpoint (its adapter stays an adapter and keeps training);
    otherwise `path` is the stage's starting model, merged if it is an adapter, and a fresh adapter is
    put on top with `lora`.
    """
    model = load_language_model(path, dtype=dtype, train_adapter=resume and trainable == "lora")
    if trainable == "lora":
        if not resume:
            from peft import LoraConfig, get_peft_model

            config = LoraConfig(
                r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.targets
            )
            model = get_peft_model(model, config)
        return model
    if trainable.startswith("last_layers:"):
        freeze_all_but_last_layers(model, int(trainable.partition(":")[2]))
    elif freeze_vision:
        for name, parameter in model.named_parameters():
            if "visual" in name:
                parameter.requires_grad_(False)
    return model


def decoder_layers(model: Any) -> tuple[str, torch.nn.ModuleList]:
    """The language model's stack of decoder layers (the longest `layers` list outside a vision tower)."""
    stacks = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList)
        and name.rsplit(".", 1)[-1] == "layers"
        and "visual" not in name
    ]
    if not stacks:
        raise ValueError(f"{type(model).__name__}: no decoder layers found to train the last of")
    return max(stacks, key=lambda stack: len(stack[1]))


def freeze_all_but_last_layers(model: Any, count: int) -> None:
    """Train the last `count` decoder layers and the final norm after them; freeze everything else."""
    name, layers = decoder_layers(model)
    if count > len(layers):
        raise ValueError(f"last_layers:{count}, but the model has {len(layers)} decoder layers")
    model.requires_grad_(False)
    for layer in layers[len(layers) - count :]:
        layer.requires_grad_(True)
    parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    norm = getattr(parent, "norm", None)
    if isinstance(norm, torch.nn.Module):
        norm.requires_grad_(True)


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]
