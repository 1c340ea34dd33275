"""Stage 2's reward gain: last fifth of steps against the first fifth, with a bootstrap interval."""

from __future__ import annotations

import pytest

from spacetools.train.gains import reward_gain
from spacetools.train.grpo import throughput


def _rows(*rewards: list[float], group_size: int = 2) -> list[dict[str, object]]:
    return [
        {"stage": "grpo", "step": i + 1, "rewards": list(r), "group_size": group_size}
        for i, r in enumerate(rewards)
    ]


def test_gain_compares_the_prompts_of_the_first_and_last_fifth() -> None:
    # 10 steps of one prompt (2 episodes): fifths of 2 steps; the first fifth's prompts average 0 and 0.5,
    # the last fifth's 1.0.
    rows = _rows([0.0, 0.0], [0.5, 0.5], *([[0.25, 0.25]] * 6), [1.0, 1.0], [1.0, 1.0])
    gain = reward_gain(rows)
    assert gain is not None
    assert (gain.steps, gain.prompts_first, gain.prompts_last) == (10, 2, 2)
    assert (gain.first_mean, gain.last_mean, gain.gain) == (0.25, 1.0, 0.75)
    # The last fifth never varies, the first ranges over means 0 to 0.5: the interval lies within.
    assert 0.5 <= gain.low <= 0.75 <= gain.high <= 1.0
    assert "+0.750" in gain.describe()


def test_the_interval_resamples_prompts_not_episodes() -> None:
    # Two prompts per fifth, each answered alike by its whole group: a hard and an easy one first, two
    # easy ones last. Resampling episodes would treat 8 episodes as independent; prompts are 2.
    rows = _rows([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], [1.0] * 8, group_size=4)
    gain = reward_gain(rows)
    assert gain is not None and (gain.prompts_first, gain.prompts_last) == (2, 2)
    assert gain.gain == 0.5 and gain.low == 0.0 and gain.high == 1.0  # first-fifth means 0, 0.5 or 1


def test_an_unchanged_reward_has_a_zero_width_interval_and_no_rows_no_gain() -> None:
    gain = reward_gain(_rows([0.0, 0.0], [0.0, 0.0], [0.0, 0.0]))
    assert gain is not None and (gain.gain, gain.low, gain.high) == (0.0, 0.0, 0.0)
    assert reward_gain([]) is None
    assert reward_gain([{"stage": "sft", "step": 1, "loss": 1.0}]) is None


def test_the_interval_is_seeded() -> None:
    rows = _rows([0.0, 1.0, 0.5], [1.0, 0.0, 0.0], [0.5, 1.0, 1.0], group_size=1)
    assert reward_gain(rows, seed=3) == reward_gain(rows, seed=3)


def test_throughput_counts_the_model_idle_time_of_generation_as_waiting_on_tools() -> None:
    figures = throughput(episodes=8, tokens=400, generation_s=4.0, step_s=5.0, busy_s=1.0)
    assert figures == {"episodes_per_s": 1.6, "tokens_per_s": 100.0, "tool_wait_fraction": pytest.approx(0.6)}
    assert throughput(0, 0, 0.0, 0.0, 0.0) == {
        "episodes_per_s": 0.0,
        "tokens_per_s": 0.0,
        "tool_wait_fraction": 0.0,
    }
