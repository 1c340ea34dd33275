"""What a GRPO step trains on: the measured reward, DAPO's dynamic sampling, the placebo, and the stop rule.

Pure pieces on plain tensors and lists, apart from the collection they drive (`gather_useful_groups` calls
back into whatever runs the episodes), so the trainer's loop stays readable and each rule is tested alone.

Shapes: `B = groups * n` episodes, each group's `n` episodes consecutive; `rewards (B,)`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import torch

Episode = TypeVar("Episode")


def measured_reward(score: dict[str, Any] | None, nndc_weight: float = 0.0) -> float:
    """The reward of one episode: what the evaluation measures.

    Pointing (a score with `nndc`) is rewarded with its `acc`, the fraction of points inside the region,
    plus `nndc_weight` times the dense NNDC term as shaping; everything else with the official `score`.
    A missing or failed score is 0.
    """
    if not score:
        return 0.0
    if "nndc" in score:
        return float(score.get("acc", 0.0)) + nndc_weight * float(score["nndc"])
    return float(score.get("score", 0.0))


def useful_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """`(groups,)` bool: True where a group's rewards differ (a group of equal rewards has advantage 0
    everywhere and only dilutes the token-mean loss, DAPO's dynamic sampling drops it)."""
    groups = rewards.float().view(-1, group_size)
    return (groups.max(dim=1).values - groups.min(dim=1).values) > 0


def placebo_rewards(rewards: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The step's rewards shuffled across all its episodes: a run with everything else equal measures how
    far training moves the answers by chance."""
    return rewards[torch.randperm(len(rewards), generator=generator)]


def cut_turns(ids: torch.Tensor, mask: torch.Tensor, stop_ids: Sequence[int]) -> int:
    """How many of an episode's turns were cut at the token limit: runs of model tokens (`mask (T,)` 1)
    that do not end in a stop token (`ids (T,)`)."""
    written = mask.bool()
    ends = written & ~torch.cat([written[1:], written.new_zeros(1)])  # last token of each run
    stops = torch.tensor(list(stop_ids), dtype=ids.dtype)
    return int((ends & ~torch.isin(ids, stops)).sum())


@dataclass
class Gathered(Generic[Episode]):
    """A step's collected groups: the useful ones kept (in order), and what it took to find them."""

    episodes: list[Episode] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    seen_episodes: list[Episode] = field(default_factory=list)  # every sampled episode, dropped ones too
    seen_rewards: list[float] = field(default_factory=list)
    groups_sampled: int = 0
    groups_dropped: int = 0
    rounds: int = 0

    @property
    def dropped_fraction(self) -> float:
        return self.groups_dropped / self.groups_sampled if self.groups_sampled else 0.0


Collect = Callable[[list[int], int], Awaitable[tuple[list[Episode], list[float]]]]
"""Runs `n` episodes of each prompt index (round number given) and returns them with their rewards."""


async def gather_useful_groups(
    collect: Collect[Episode],
    first: list[int],
    pool_size: int,
    group_size: int,
    *,
    rng: np.random.Generator,
    dynamic: bool,
    max_rounds: int,
) -> Gathered[Episode]:
    """A step's groups: with `dynamic`, groups of equal rewards are dropped and fresh prompts (drawn by
    `rng` from the `pool_size` prompts) are sampled until `len(first)` useful groups are kept or
    `max_rounds` rounds have run (the step then trains on fewer); without it every group is kept."""
    wanted = len(first)
    gathered: Gathered[Episode] = Gathered()
    indices = first
    while True:
        episodes, rewards = await collect(indices, gathered.rounds)
        gathered.rounds += 1
        gathered.seen_episodes += episodes
        gathered.seen_rewards += rewards
        keep = useful_groups(torch.tensor(rewards), group_size).tolist() if dynamic else [True] * len(indices)
        gathered.groups_sampled += len(indices)
        for g, kept in enumerate(keep):
            if not kept or len(gathered.rewards) >= wanted * group_size:
                gathered.groups_dropped += int(not kept)
                continue
            gathered.episodes += episodes[g * group_size : (g + 1) * group_size]
            gathered.rewards += rewards[g * group_size : (g + 1) * group_size]
        missing = wanted - len(gathered.rewards) // group_size
        if missing <= 0 or gathered.rounds >= max_rounds:
            return gathered
        indices = rng.choice(pool_size, size=missing, replace=pool_size < missing).tolist()


class ZeroRewardWatch:
    """Says when a stage has seen only zero rewards for `patience` steps in a row (no gradient can come of
    it: every advantage is 0), so the run stops that stage instead of silently training nothing."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.streak = 0

    def update(self, rewards: Sequence[float]) -> bool:
        """Record a step's rewards (all of them, useful groups or not); True when the stage should stop."""
        self.streak = self.streak + 1 if not any(rewards) else 0
        return self.patience > 0 and self.streak >= self.patience
