"""A training stage's monitor: TensorBoard scalars written as each step ends, and a progress bar."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from spacetools.train.monitor import StageMonitor


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(logdir))
    events.Reload()
    return {
        tag: [(event.step, round(event.value, 6)) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def test_each_step_is_in_tensorboard_before_the_stage_ends(tmp_path: Path) -> None:
    out = io.StringIO()
    with StageMonitor("grpo", tmp_path / "tb", Console(file=out, width=120)) as monitor:
        monitor(1, 2, {"stage": "grpo", "step": 1, "reward_mean": 0.25, "kl": 0.0, "rewards": [0.0, 0.5]})
        # Read while the stage still runs: the row is flushed at the step.
        assert _scalars(tmp_path / "tb") == {"grpo/reward_mean": [(1, 0.25)], "grpo/kl": [(1, 0.0)]}
        monitor(2, 2, {"stage": "grpo", "step": 2, "reward_mean": 0.5, "kl": 0.125})
    assert _scalars(tmp_path / "tb")["grpo/reward_mean"] == [(1, 0.25), (2, 0.5)]
    shown = out.getvalue()
    assert "grpo" in shown and "2/2" in shown and "reward_mean 0.5" in shown


def test_a_resumed_stage_starts_its_bar_at_the_step_it_resumes_from(tmp_path: Path) -> None:
    out = io.StringIO()
    with StageMonitor("sft", None, Console(file=out, width=120)) as monitor:
        monitor(7, 10, {"stage": "sft", "step": 7, "loss": 1.5})
    assert "7/10" in out.getvalue() and "loss 1.5" in out.getvalue()
