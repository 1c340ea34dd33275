"""The replay engine of the scripted expert: a plan is re-run over the tool results it already has.

The policy is stateless. A plan is plain straight-line code that asks for tool results through a
:class:`ToolReplay`; on every turn the plan is re-run from the start, the replay feeds it the results
already in the episode (``EpisodeState.tool_calls``, with their structured ``value``), and the first
batch of calls without results becomes the next turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spacetools.agent.types import ToolCallRecord

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class ToolOutcome:
    """One tool result as the expert reads it: its structured value (its text only for the record)."""

    text: str
    is_error: bool = False
    value: Any = None

    @classmethod
    def failed(cls, reason: str) -> ToolOutcome:
        """An error outcome (e.g. a call that got no response)."""
        return cls(f"Error: {reason}", is_error=True)

    def get(self, key: str) -> Any:
        """``value[key]`` of a successful dict result, else None."""
        return self.value.get(key) if not self.is_error and isinstance(self.value, dict) else None


class Pending(Exception):
    """Raised inside a plan when it needs results that are not in the episode yet."""

    def __init__(self, calls: list[Call], thought: str) -> None:
        super().__init__(thought)
        self.calls = calls
        self.thought = thought


@dataclass
class ToolReplay:
    """Hands a plan the results of its earlier tool turns, in order; raises for the first new one."""

    batches: list[list[ToolOutcome]]
    max_tool_turns: int = 7
    _next: int = field(default=0, init=False)

    @property
    def turns_left(self) -> int:
        """Tool turns still allowed before the plan must answer."""
        return self.max_tool_turns - self._next

    def call(self, thought: str, *calls: Call) -> list[ToolOutcome]:
        """The results of ``calls`` (one turn, run in parallel), or end this turn by asking for them."""
        if self._next >= len(self.batches):
            raise Pending(list(calls), thought)
        results = self.batches[self._next]
        self._next += 1
        # A call the rollout rejected without a result still counts as a failed call here.
        missing = [ToolOutcome.failed("no response") for _ in range(len(calls) - len(results))]
        return results[: len(calls)] + missing


@dataclass(frozen=True)
class Answer:
    """A plan's final answer, the reasoning shown before it, and whether it is a guess after a failure."""

    text: str
    thought: str
    fallback: bool = False


def tool_batches(records: Sequence[ToolCallRecord]) -> list[list[ToolOutcome]]:
    """The results of each tool turn, in call order (records grouped by the turn that made them)."""
    batches: dict[int, list[ToolOutcome]] = {}
    for record in records:
        outcome = ToolOutcome(record.result_text, record.is_error, record.value)
        batches.setdefault(record.turn, []).append(outcome)
    return [batches[turn] for turn in sorted(batches)]


def format_tool_turn(thought: str, calls: Sequence[Call]) -> str:
    """A tool-calling turn in the tag protocol."""
    blocks = "\n".join(
        "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        for name, arguments in calls
    )
    return f"<think>{thought}</think>\n{blocks}"


def format_answer_turn(answer: Answer) -> str:
    """A final turn in the tag protocol; a fallback's reasoning owns up to the guess (for the reader:
    code knows a fallback by `EpisodeState.fallback`, never by this text)."""
    thought = f"Fallback guess: {answer.thought}" if answer.fallback else answer.thought
    return f"<think>{thought}</think>\n<answer>{answer.text}</answer>"
