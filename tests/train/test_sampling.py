"""What a GRPO step trains on: measured rewards, dynamic sampling, the placebo, cut turns, the zero-reward stop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from spacetools.rewards.scorers import score_mask_points
from spacetools.train.sampling import (
    ZeroRewardWatch,
    cut_turns,
    gather_useful_groups,
    measured_reward,
    placebo_rewards,
    useful_groups,
)


def test_pointing_is_rewarded_with_what_is_measured_plus_optional_shaping() -> None:
    mask = np.zeros((10, 10), dtype=bool)
    mask[0:2, 0:2] = True
    near_miss = score_mask_points("(0.35, 0.35)", mask)  # outside: acc 0, but NNDC > 0
    assert near_miss["acc"] == 0.0 and near_miss["nndc"] > 0.0
    assert measured_reward(near_miss) == 0.0
    assert measured_reward(near_miss, nndc_weight=0.1) == pytest.approx(0.1 * near_miss["nndc"])
    hit = score_mask_points("(0.1, 0.1)", mask)
    assert measured_reward(hit) == 1.0
    # Elsewhere the official score; a failed or missing score is 0.
    assert measured_reward({"score": 0.5, "acc": 1.0}) == 0.5
    assert measured_reward(None) == 0.0 and measured_reward({}) == 0.0


def test_groups_of_equal_rewards_are_not_useful() -> None:
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.5, 0.5, 1.0, 0.999])
    assert useful_groups(rewards, 2).tolist() == [False, True, False, True]


def test_placebo_shuffles_the_same_rewards_deterministically() -> None:
    rewards = torch.arange(8, dtype=torch.float32)
    first = placebo_rewards(rewards, torch.Generator().manual_seed(3))
    again = placebo_rewards(rewards, torch.Generator().manual_seed(3))
    assert sorted(first.tolist()) == rewards.tolist()  # the same rewards, other episodes
    assert first.tolist() == again.tolist() and first.tolist() != rewards.tolist()


def test_cut_turns_are_runs_of_model_tokens_without_a_stop_token() -> None:
    eos = 9
    ids = torch.tensor([1, 2, 3, eos, 5, 6, 7, 8, 1, 2])
    mask = torch.tensor([0, 1, 1, 1, 0, 0, 1, 1, 0, 0])  # turn 1 ends in eos, turn 2 was cut
    assert cut_turns(ids, mask, [eos]) == 1
    assert cut_turns(ids, torch.tensor([0, 1, 1, 1, 0, 0, 0, 0, 0, 1]), [eos]) == 1  # cut at the very end
    assert cut_turns(ids, torch.zeros(10, dtype=torch.long), [eos]) == 0


def _collector(rewards_of: dict[int, list[float]], calls: list[tuple[list[int], int]]):  # type: ignore[no-untyped-def]
    async def collect(indices: list[int], round_: int) -> tuple[list[str], list[float]]:
        calls.append((indices, round_))
        episodes = [f"{i}.{k}" for i in indices for k in range(2)]
        return episodes, [r for i in indices for r in rewards_of[i]]

    return collect


def test_dynamic_sampling_replaces_equal_groups_with_fresh_prompts() -> None:
    # Prompts 0-1 give equal rewards (dropped); 2-5 teach.
    rewards_of = {0: [0.0, 0.0], 1: [1.0, 1.0], 2: [0.0, 1.0], 3: [1.0, 0.0], 4: [0.2, 0.0], 5: [0.0, 0.3]}
    calls: list[tuple[list[int], int]] = []
    gathered = asyncio.run(
        gather_useful_groups(
            _collector(rewards_of, calls),
            [0, 1, 2],
            6,
            2,
            rng=np.random.default_rng(0),
            dynamic=True,
            max_rounds=20,
        )
    )
    assert len(gathered.rewards) == 6 and len(gathered.episodes) == 6  # 3 useful groups of 2
    assert useful_groups(torch.tensor(gathered.rewards), 2).all()
    assert gathered.episodes[:2] == ["2.0", "2.1"]  # the first round's useful group comes first
    assert gathered.rounds == len(calls) >= 2 and [r for _, r in calls] == list(range(len(calls)))
    assert gathered.groups_sampled == sum(len(i) for i, _ in calls)
    assert gathered.dropped_fraction == pytest.approx(gathered.groups_dropped / gathered.groups_sampled)
    assert gathered.groups_dropped >= 2 and len(gathered.seen_rewards) == 2 * gathered.groups_sampled


def test_dynamic_sampling_stops_after_its_rounds_and_off_keeps_every_group() -> None:
    rewards_of = {i: [0.0, 0.0] for i in range(4)}  # nothing teaches
    calls: list[tuple[list[int], int]] = []
    gathered = asyncio.run(
        gather_useful_groups(
            _collector(rewards_of, calls),
            [0, 1],
            4,
            2,
            rng=np.random.default_rng(0),
            dynamic=True,
            max_rounds=3,
        )
    )
    assert gathered.rounds == 3 and gathered.episodes == [] and gathered.dropped_fraction == 1.0
    kept = asyncio.run(
        gather_useful_groups(
            _collector(rewards_of, []),
            [0, 1],
            4,
            2,
            rng=np.random.default_rng(0),
            dynamic=False,
            max_rounds=3,
        )
    )
    assert kept.rounds == 1 and len(kept.episodes) == 4 and kept.groups_dropped == 0


def test_a_stage_of_only_zero_rewards_stops_after_its_patience() -> None:
    watch = ZeroRewardWatch(patience=2)
    assert not watch.update([0.0, 0.0])
    assert not watch.update([0.0, 1.0])  # a reward resets the streak
    assert not watch.update([0.0, 0.0])
    assert watch.update([0.0, 0.0])
    assert not ZeroRewardWatch(patience=0).update([0.0])  # 0: never stops
