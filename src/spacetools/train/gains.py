"""Did RL help? The mean episode reward over the last fifth of steps against the first fifth, with a
bootstrap interval over episodes (each fifth resampled on its own)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel


class RewardGain(BaseModel):
    """First- and last-fifth mean rewards, their difference and its bootstrap interval."""

    steps: int
    first_mean: float
    last_mean: float
    gain: float
    low: float
    high: float
    confidence: float
    episodes_first: int
    episodes_last: int

    def describe(self) -> str:
        return (
            f"reward, last fifth of {self.steps} steps {self.last_mean:.3f} vs first fifth {self.first_mean:.3f}: "
            f"{self.gain:+.3f} ({self.confidence:.0%} bootstrap interval {self.low:+.3f} to {self.high:+.3f}, "
            f"{self.episodes_first} and {self.episodes_last} episodes)"
        )


def reward_gain(
    rows: list[dict[str, Any]], *, confidence: float = 0.95, resamples: int = 4000, seed: int = 0
) -> RewardGain | None:
    """The gain over a GRPO stage's metric rows (each with per-episode `rewards`); None without rows."""
    rows = [row for row in rows if row.get("rewards")]
    if not rows:
        return None
    fifth = max(1, round(len(rows) / 5))
    first = np.array([reward for row in rows[:fifth] for reward in row["rewards"]], dtype=float)
    last = np.array([reward for row in rows[-fifth:] for reward in row["rewards"]], dtype=float)
    rng = np.random.default_rng(seed)
    # (resamples, n) draws of each fifth's episodes, with replacement.
    first_means = rng.choice(first, size=(resamples, first.size)).mean(axis=1)
    last_means = rng.choice(last, size=(resamples, last.size)).mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(last_means - first_means, [tail, 1 - tail])
    return RewardGain(
        steps=len(rows),
        first_mean=float(first.mean()),
        last_mean=float(last.mean()),
        gain=float(last.mean() - first.mean()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        episodes_first=int(first.size),
        episodes_last=int(last.size),
    )
