"""Replay recorded trajectories: re-run their assistant turns against live tools, or re-score them.

Each new episode of a task takes the next unused recording of that task id, so a file holding N
rollouts per prompt (GRPO groups) replays as N episodes. A recording's ``fallback`` flag comes back
with its last turn, so a replayed guess is still known as one.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from spacetools.agent.types import EpisodeState, Policy, Trajectory, read_trajectories


class ReplayExhaustedError(LookupError):
    """The live episode asked for more turns, or more episodes, than were recorded."""


def _assistant_turns(trajectory: Trajectory) -> list[str]:
    turns: list[str] = []
    for message in trajectory.messages:
        if message.get("role") != "assistant":
            continue
        content = message.get("content", "")
        turns.append(content if isinstance(content, str) else "")
    return turns


class ReplayPolicy(Policy):
    """Returns the recorded assistant turns of the episode's task, in order.

    Args:
        trajectories: A JSON-lines file of trajectories, or the trajectories (or their dicts).
    """

    name = "replay"

    def __init__(self, trajectories: str | Path | Iterable[Trajectory | dict[str, Any]]) -> None:
        if isinstance(trajectories, str | Path):
            records = read_trajectories(trajectories)
        else:
            records = [t if isinstance(t, Trajectory) else Trajectory.from_dict(t) for t in trajectories]
        self._queued: dict[str, deque[Trajectory]] = defaultdict(deque)
        for record in records:
            self._queued[record.task_id].append(record)
        self._bound: weakref.WeakKeyDictionary[EpisodeState, tuple[list[str], bool]] = (
            weakref.WeakKeyDictionary()
        )

    def remaining(self, task_id: str) -> int:
        """How many recordings of ``task_id`` have not been replayed yet."""
        return len(self._queued.get(task_id, ()))

    async def act(self, state: EpisodeState) -> str:
        """The recorded turn number ``state.turn`` of the recording bound to this episode."""
        bound = self._bound.get(state)
        if bound is None:
            queue = self._queued.get(state.task.id)
            if not queue:
                raise ReplayExhaustedError(f"no (more) recorded trajectories for task {state.task.id!r}")
            recording = queue.popleft()
            bound = self._bound[state] = (_assistant_turns(recording), recording.fallback)
        turns, fallback = bound
        if state.turn >= len(turns):
            raise ReplayExhaustedError(
                f"task {state.task.id!r}: the recording has {len(turns)} assistant turn(s), "
                f"the live episode asked for turn {state.turn + 1}"
            )
        if state.turn == len(turns) - 1:
            state.fallback = fallback
        return turns[state.turn]


def rescore(
    trajectories: Iterable[Trajectory], score: Callable[[Trajectory], dict[str, Any] | None]
) -> list[Trajectory]:
    """Copies of ``trajectories`` with ``score`` replaced by ``score(trajectory)``.

    ``score`` usually reads ``trajectory.solution_text``, for example
    ``lambda t: compute_score(t.data_source, t.solution_text, ground_truth[t.task_id])``.
    """
    return [dataclasses.replace(trajectory, score=score(trajectory)) for trajectory in trajectories]
