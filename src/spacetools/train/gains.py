"""Did RL help? The mean episode reward over the last fifth of steps against the first fifth, with a
bootstrap interval that resamples prompts (each prompt's group of episodes is one unit, since questions
differ in difficulty far more than the episodes of one question do), each fifth on its own."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel

from spacetools.bench.bootstrap import difference_of_means


class RewardGain(BaseModel):
    """First- and last-fifth mean rewards, their difference and its bootstrap interval."""

    steps: int
    first_mean: float
    last_mean: float
    gain: float
    low: float
    high: float
    confidence: float
    prompts_first: int
    prompts_last: int

    def describe(self) -> str:
        return (
            f"reward, last fifth of {self.steps} steps {self.last_mean:.3f} vs first fifth {self.first_mean:.3f}: "
            f"{self.gain:+.3f} ({self.confidence:.0%} bootstrap interval over prompts {self.low:+.3f} to "
            f"{self.high:+.3f}; {self.prompts_first} and {self.prompts_last} prompts)"
        )


def _prompt_means(rows: list[dict[str, Any]]) -> np.ndarray:
    """The mean reward of each prompt's group in `rows`: `(prompts,)`."""
    means = []
    for row in rows:
        rewards = np.asarray(row["rewards"], dtype=float)
        size = int(row.get("group_size", 1))
        means.extend(rewards.reshape(-1, size).mean(axis=1))
    return np.asarray(means)


def reward_gain(
    rows: list[dict[str, Any]], *, confidence: float = 0.95, resamples: int = 4000, seed: int = 0
) -> RewardGain | None:
    """The gain over a GRPO stage's metric rows (each with per-episode `rewards` and its `group_size`);
    None without rows."""
    rows = [row for row in rows if row.get("rewards")]
    if not rows:
        return None
    fifth = max(1, round(len(rows) / 5))
    first, last = _prompt_means(rows[:fifth]), _prompt_means(rows[-fifth:])
    low, high = difference_of_means(first, last, confidence=confidence, resamples=resamples, seed=seed)
    return RewardGain(
        steps=len(rows),
        first_mean=float(first.mean()),
        last_mean=float(last.mean()),
        gain=float(last.mean() - first.mean()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        prompts_first=int(first.size),
        prompts_last=int(last.size),
    )
