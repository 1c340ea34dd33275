"""Run folders of training stages: seeded data order, whole checkpoints swapped in atomically, metric rows.

A stage killed at any point (even with -9) resumes from its last checkpoint: the data position is a function
of the step, the checkpoint holds the model, optimiser, scheduler and random state, and the metric rows
written after that checkpoint are dropped, so the resumed run writes exactly what an unbroken one would.
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

MODEL_DIR = "model"
STATE_FILE = "trainer.pt"
METRICS_FILE = "metrics.jsonl"


def step_batches(
    order_seed: int, size: int, batch_size: int, start_step: int, total_steps: int
) -> Iterator[list[int]]:
    """Example indices of each optimiser step from `start_step` on: a fresh seeded permutation per epoch,
    so the data position of a resumed run is a function of the step alone."""
    steps_per_epoch = math.ceil(size / batch_size)
    for step in range(start_step, total_steps):
        epoch, position = divmod(step, steps_per_epoch)
        order = np.random.default_rng([order_seed, epoch]).permutation(size)
        yield order[position * batch_size : (position + 1) * batch_size].tolist()


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The trainer state of the checkpoint at `path` (its model is in `path / MODEL_DIR`), if there is one."""
    recover_checkpoint(path)
    state_file = path / STATE_FILE
    return torch.load(state_file, weights_only=False) if state_file.is_file() else None


def save_checkpoint(path: Path, model: Any, processor: Any, state: dict[str, Any]) -> None:
    """Write the checkpoint beside the old one, then swap: a kill leaves one whole checkpoint."""
    staging = path.with_name(path.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    model.save_pretrained(staging / MODEL_DIR)
    processor.save_pretrained(staging / MODEL_DIR)
    torch.save({**state, "torch_rng": torch.get_rng_state()}, staging / STATE_FILE)
    retired = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(retired)
    staging.rename(path)
    if retired.exists():
        shutil.rmtree(retired)


def recover_checkpoint(path: Path) -> None:
    """Finish a swap that a kill interrupted: the retired checkpoint is whole, the staging one may not be."""
    retired = path.with_name(path.name + ".old")
    if not path.exists() and retired.exists():
        retired.rename(path)


def truncate_metrics(path: Path, step: int) -> None:
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


def publish_model(checkpoint: Path, out: Path) -> Path:
    """Copy the checkpoint's model to `out / MODEL_DIR`, the stage's result."""
    final = out / MODEL_DIR
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(checkpoint / MODEL_DIR, final)
    return final
