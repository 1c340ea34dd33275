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
from pathlib import Path
from typing import Any

import torch

from spacetools.bench.runlock import run_folder_lock
from spacetools.kit import imagecodec
from spacetools.kit.loading import load_processor, load_vlm
from spacetools.kit.trainable import trainable_parameters
from spacetools.train.checkpoint import (
    METRICS_FILE,
    MODEL_DIR,
    load_checkpoint,
    publish_model,
    save_checkpoint,
    step_batches,
    truncate_metrics,
)
from spacetools.train.config import SFTConfig, record_config
from spacetools.train.episodes import Example, encode_episode, forward_logprobs

CHECKPOINT_DIR = "checkpoint"


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


def train_sft(config: SFTConfig, *, resume: bool = True, progress: Any = None) -> Path:
    """Run (or continue) SFT; returns the folder of the trained model (`<out>/model`)."""
    with run_folder_lock(config.out):  # one writer per run folder
        return _train_sft(config, resume=resume, progress=progress)


def _train_sft(config: SFTConfig, *, resume: bool, progress: Any) -> Path:
    from transformers import get_cosine_schedule_with_warmup

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
    if not rows:
        raise ValueError(f"{config.data}: no episodes to train on")
    if not examples:
        raise ValueError(f"{config.data}: no episode fits in {config.max_tokens} tokens")

    checkpoint = config.out / CHECKPOINT_DIR
    total_steps = math.ceil(len(examples) / config.batch_size) * config.epochs
    state = load_checkpoint(checkpoint, total_steps) if resume else None
    model_path = checkpoint / MODEL_DIR if state is not None else config.model
    model = load_vlm(
        model_path,
        device=config.device,
        dtype=config.dtype,
        trainable=config.trainable,
        lora=None if state is not None else config.lora,  # a resumed run's adapter keeps training
        freeze_vision=config.freeze_vision,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    model.train()
    trainable = trainable_parameters(model)
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(
        optimizer, int(config.warmup_ratio * total_steps), total_steps
    )

    start_step = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        start_step = state["step"]
    metrics_path = config.out / METRICS_FILE
    truncate_metrics(metrics_path, start_step)

    with metrics_path.open("a", encoding="utf-8") as metrics:
        for step, indices in enumerate(
            step_batches(config.seed, len(examples), config.batch_size, start_step, total_steps), start_step
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
                trainer_state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
                save_checkpoint(checkpoint, model, processor, {**trainer_state, "step": step + 1})
    return publish_model(checkpoint, config.out)
