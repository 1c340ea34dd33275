"""Stage 1 of DIRL's teaching phase: supervised fine-tuning on teacher traces, loss on the model's turns only.

Readable top to bottom: read the traces, encode each episode into token ids with a mask that is 1 on the
assistant's tokens (the same `ChatTrace` that records a policy's own generations), then an AdamW loop with
warm-up and cosine decay. Every `checkpoint_every` steps the model, optimiser, scheduler and random state
are saved, so a run killed at any point continues from its last checkpoint and ends where an uninterrupted
run would. Shapes: an episode is `(1, T)` ids; a step accumulates `batch_size` episodes.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spacetools.agent.policies.hf import load_processor
from spacetools.tools import imagecodec
from spacetools.train.config import SFTConfig, record_config
from spacetools.train.episodes import Example, encode_episode, forward_logprobs

CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"
MODEL_DIR = "model"


def read_traces(path: Path) -> list[dict[str, Any]]:
    """The rows of an SFT data set: `{"messages": [...], "images": [data URL, ...], ...}` per line."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON row ({exc})") from None
    return rows


def episode_loss(model: Any, example: Example, device: str) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the assistant tokens of one episode, and how many there are."""
    logp = forward_logprobs(model, example, device)  # (1, T)
    mask = example.mask.unsqueeze(0).to(device)  # (1, T)
    return -(logp * mask).sum(), int(mask.sum())


def batches(
    order_seed: int, size: int, batch_size: int, start_step: int, total_steps: int
) -> Iterator[list[int]]:
    """Example indices of each optimiser step from `start_step` on: a fresh seeded permutation per epoch,
    so the data position of a resumed run is a function of the step alone."""
    steps_per_epoch = math.ceil(size / batch_size)
    for step in range(start_step, total_steps):
        epoch, position = divmod(step, steps_per_epoch)
        order = np.random.default_rng([order_seed, epoch]).permutation(size)
        yield order[position * batch_size : (position + 1) * batch_size].tolist()


def train_sft(config: SFTConfig, *, resume: bool = True, progress: Any = None) -> Path:
    """Run (or continue) SFT; returns the folder of the trained model (`<out>/model`)."""
    from transformers import AutoModelForImageTextToText, get_cosine_schedule_with_warmup

    record_config(config, config.out, resume=resume)
    torch.manual_seed(config.seed)
    processor = load_processor(config.model)
    rows = read_traces(config.data)
    examples = []
    for row in rows:
        images = [imagecodec.decode(image) for image in row.get("images", [])]
        example = encode_episode(processor, row["messages"], images)
        if len(example.ids) <= config.max_tokens:
            examples.append(example)
    if not examples:
        raise ValueError(f"{config.data}: no episode fits in {config.max_tokens} tokens")

    checkpoint = config.out / CHECKPOINT_DIR
    _recover_checkpoint(checkpoint)
    model_path = checkpoint / MODEL_DIR if resume and (checkpoint / "trainer.pt").is_file() else config.model
    model: Any = AutoModelForImageTextToText.from_pretrained(
        model_path, dtype=getattr(torch, config.dtype), local_files_only=True
    )
    model.to(config.device)
    if config.freeze_vision:
        for name, parameter in model.named_parameters():
            if "visual" in name:
                parameter.requires_grad_(False)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    total_steps = math.ceil(len(examples) / config.batch_size) * config.epochs
    scheduler = get_cosine_schedule_with_warmup(
        optimizer, int(config.warmup_ratio * total_steps), total_steps
    )

    start_step = 0
    if model_path != config.model:
        state = torch.load(checkpoint / "trainer.pt", weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        start_step = state["step"]
    metrics_path = config.out / METRICS_FILE
    _truncate_metrics(metrics_path, start_step)

    with metrics_path.open("a", encoding="utf-8") as metrics:
        for step, indices in enumerate(
            batches(config.seed, len(examples), config.batch_size, start_step, total_steps), start_step
        ):
            tokens = sum(int(examples[i].mask.sum()) for i in indices)
            total = 0.0
            for i in indices:  # token-mean over the whole batch, accumulated one episode at a time
                loss, _ = episode_loss(model, examples[i], config.device)
                (loss / max(tokens, 1)).backward()
                total += float(loss.detach())
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            row = {
                "stage": "sft",
                "step": step + 1,
                "loss": total / max(tokens, 1),
                "grad_norm": float(grad_norm),
                "lr": scheduler.get_last_lr()[0],
                "tokens": tokens,
            }
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
            if progress is not None:
                progress(step + 1, total_steps, row)
            if (step + 1) % config.checkpoint_every == 0 or step + 1 == total_steps:
                _save_checkpoint(model, processor, optimizer, scheduler, step + 1, checkpoint)

    final = config.out / MODEL_DIR
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(checkpoint / MODEL_DIR, final)
    return final


def _save_checkpoint(
    model: Any, processor: Any, optimizer: Any, scheduler: Any, step: int, path: Path
) -> None:
    """Write the checkpoint beside the old one, then swap: a kill leaves one whole checkpoint."""
    staging = path.with_name(path.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    model.save_pretrained(staging / MODEL_DIR)
    processor.save_pretrained(staging / MODEL_DIR)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "step": step,
        },
        staging / "trainer.pt",
    )
    retired = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(retired)
    staging.rename(path)
    if retired.exists():
        shutil.rmtree(retired)


def _recover_checkpoint(path: Path) -> None:
    """Finish a swap that a kill interrupted: the retired checkpoint is whole, the staging one may not be."""
    retired = path.with_name(path.name + ".old")
    if not path.exists() and retired.exists():
        retired.rename(path)


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep the metric rows up to the checkpoint a run resumes from (and drop a torn last line)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("step", 0) <= step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
