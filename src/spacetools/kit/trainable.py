"""Which weights a stage trains: all of them, the last N decoder layers, or a LoRA adapter (peft).

`trainable: full | last_layers:N | lora` is a setting of SFT and GRPO, applied by `loading.load_vlm`.
With `lora` the stage's checkpoints and its result are adapter folders (peft's `adapter_config.json`
naming the base model folder), which every loader of the project reads as the base model with the
adapter merged in (`eval --policy hf` included); a resumed run continues training the same adapter.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import torch

TRAINABLE_RE = re.compile(r"full|lora|last_layers:[1-9][0-9]*")


class LoraShape(Protocol):
    """The settings of a fresh LoRA adapter (peft's `LoraConfig`), as the training configs hold them."""

    r: int
    alpha: int
    dropout: float
    targets: list[str]


def check_trainable(trainable: str) -> None:
    """A `ValueError` unless `trainable` is `full`, `lora` or `last_layers:N`."""
    if not TRAINABLE_RE.fullmatch(trainable):
        raise ValueError(f"trainable must be full, lora or last_layers:N, got {trainable!r}")


def set_trainable(model: Any, trainable: str, lora: LoraShape | None, *, freeze_vision: bool) -> Any:
    """`model` with only the weights `trainable` names requiring gradients (a new adapter: a new model).

    `lora` puts a fresh adapter on top (`trainable: lora`); without it `model` is the adapter to keep
    training. `freeze_vision` freezes the vision tower of a fully trained model.
    """
    if trainable == "lora":
        if lora is None:
            return model
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.targets
        )
        return get_peft_model(model, config)
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
    _, layers = decoder_layers(model)
    if count > len(layers):
        raise ValueError(f"last_layers:{count}, but the model has {len(layers)} decoder layers")
    model.requires_grad_(False)
    for layer in layers[len(layers) - count :]:
        layer.requires_grad_(True)
    norm = decoder_norm(model)
    if norm is not None:
        norm.requires_grad_(True)


def decoder_norm(model: Any) -> torch.nn.Module | None:
    """The final norm after the decoder layers (the `norm` beside them), if the model has one."""
    name, _ = decoder_layers(model)
    parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    norm = getattr(parent, "norm", None)
    return norm if isinstance(norm, torch.nn.Module) else None


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]
