"""Run folders of training stages: seeded data order, whole checkpoints swapped in atomically, metric rows.

A stage killed at any point (even with -9) resumes from its last checkpoint: the data position is a function
of the step, the checkpoint holds the model, optimiser, scheduler and random state, and the metric rows
written after that checkpoint are dropped, so the resumed run writes exactly what an unbroken one would.

A checkpoint is only ever read as data (`torch.load(weights_only=True)`: a planted pickle runs nothing), and
one that exists but cannot be read whole (a file missing, cut short or not a checkpoint) is refused with a
`CheckpointError` naming the file and the way out, never silently restarted from step 0.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spacetools.kit.manifest import manifest_problem, write_manifest

MODEL_DIR = "model"
STATE_FILE = "trainer.pt"
METRICS_FILE = "metrics.jsonl"
STATE_KEYS = ("step", "optimizer", "torch_rng")


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be resumed from."""

    def __init__(self, checkpoint: Path, file: Path, problem: str) -> None:
        super().__init__(
            f"{file}: {problem}; this checkpoint cannot be resumed: use a fresh --out, or delete "
            f"{checkpoint} to train this stage again from step 0"
        )


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


def load_checkpoint(path: Path, total_steps: int | None = None) -> dict[str, Any] | None:
    """The trainer state of the checkpoint at `path` (its model is in `path / MODEL_DIR`), if there is one;
    a `CheckpointError` when there is one that cannot be read whole, or whose step is not one of the
    run's `total_steps` (when given)."""
    recover_checkpoint(path)
    if not path.exists():
        return None
    check_files(path)
    state_file = path / STATE_FILE
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(path, state_file, "missing") from None
    except Exception as error:  # torch raises many kinds for a damaged or foreign file
        problem = (
            "holds objects other than tensors and plain data, which could run code; not loaded"
            if isinstance(error, pickle.UnpicklingError) and "Weights only" in str(error)
            else f"damaged or cut short ({type(error).__name__})"
        )
        raise CheckpointError(path, state_file, problem) from None
    if not isinstance(state, dict) or any(key not in state for key in STATE_KEYS):
        raise CheckpointError(path, state_file, f"not a trainer state (it needs {', '.join(STATE_KEYS)})")
    step = state["step"]
    if total_steps is not None and (type(step) is not int or not 0 < step <= total_steps):
        raise CheckpointError(
            path, state_file, f"step {step!r} is not a step of this run (1 to {total_steps})"
        )
    return state


def check_files(path: Path) -> None:
    """Every file the checkpoint's manifest lists is there with its size and hash (a checkpoint written
    before manifests has none to check)."""
    problem = manifest_problem(path)
    if problem is not None:
        raise CheckpointError(path, *problem)


def save_checkpoint(path: Path, model: Any, processor: Any, state: dict[str, Any]) -> None:
    """Write the checkpoint beside the old one, then swap: a kill leaves one whole checkpoint."""
    staging = path.with_name(path.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    model.save_pretrained(staging / MODEL_DIR)
    processor.save_pretrained(staging / MODEL_DIR)
    torch.save({**state, "torch_rng": torch.get_rng_state()}, staging / STATE_FILE)
    write_manifest(staging)  # written last: a file cut short, lost or changed is found at load
    recover_checkpoint(path)
    retired = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(retired)
    staging.rename(path)
    if retired.exists():
        shutil.rmtree(retired)


def recover_checkpoint(path: Path) -> None:
    """Finish a swap that a kill interrupted. Without a checkpoint the retired one is whole (the kill came
    between the two renames) and goes back; beside one it is what a kill left while deleting it."""
    retired = path.with_name(path.name + ".old")
    if not retired.exists():
        return
    if path.exists():
        shutil.rmtree(retired)
    else:
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
