"""The multi-turn rollout loop: one episode of a policy against a Toolshed session, and many at once.

Episode rules (the original's): an episode ends at an ``<answer>``, at a turn with no ``<tool_call>``
block, or after ``max_turns`` assistant turns. A turn with both tool calls and an answer ends the
episode at the answer and its tool calls are not run (counted in ``stats["skipped_tool_calls"]``).
A malformed tool-call block gets an ``Error: …`` tool response in its place and is counted in
``parse_errors`` (so is a turn with neither a tool call nor an answer); the Toolshed validates arguments
and reports tool failures as error results.

Nothing the model writes and no tool failure makes an episode raise: a policy exception (or a
Toolshed that breaks) ends the episode with ``finish_reason`` ``policy_error`` / ``toolshed_error`` and
the message in ``error``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spacetools.agent.protocol import (
    DEFAULT_MAX_TOOL_RESPONSE_CHARS,
    ParseError,
    ToolCall,
    build_system_prompt,
    build_user_message,
    parse_turn,
    read_prompt_template,
    tool_message,
)
from spacetools.agent.types import EpisodeState, Policy, Task, ToolCallRecord, Trajectory

if TYPE_CHECKING:
    import numpy as np

    from spacetools.tools.definition import ToolResult
    from spacetools.toolshed import ToolProvider, ToolSession

DEFAULT_MAX_TURNS = 8
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 16
DEFAULT_CONCURRENCY = 16

Scorer = Callable[[str], dict[str, Any]]

NO_ANSWER_FEEDBACK = (
    "Error: your turn had neither a <tool_call> nor an <answer>. Call a tool, or give the final answer "
    "inside <answer>...</answer>."
)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _timed_call(session: ToolSession, call: ToolCall) -> tuple[ToolResult, float]:
    """One call of a turn (the turn's calls are gathered, so they run in parallel) and its latency."""
    started = time.perf_counter()
    result = await session.call(call.name, call.arguments)
    return result, time.perf_counter() - started


class _Episode:
    """The mutable bookkeeping of one running episode."""

    def __init__(self, show_tool_images: bool) -> None:
        self.show_tool_images = show_tool_images
        self.records: list[ToolCallRecord] = []
        self.tool_images: list[np.ndarray] = []
        self.parse_errors: Counter[str] = Counter()
        self.skipped_tool_calls = 0
        self.policy_s = 0.0
        self.tools_s = 0.0

    async def run_tools(
        self,
        session: ToolSession,
        state: EpisodeState,
        calls: list[ToolCall],
        errors: list[ParseError],
        max_chars: int,
    ) -> None:
        """Run the turn's calls in parallel and append one tool message per block, in block order."""
        started = time.perf_counter()
        timed = await asyncio.gather(*(_timed_call(session, call) for call in calls))
        self.tools_s += time.perf_counter() - started
        responses: dict[int, dict[str, Any]] = {}
        kept: list[tuple[int, np.ndarray]] = []
        for call, (result, latency_s) in zip(calls, timed, strict=True):
            pictures = self._keep_images(session, result)
            kept.extend(pictures)
            indices = [index for index, _ in pictures]
            shown = indices if self.show_tool_images else []
            responses[call.index] = tool_message(result, max_chars, image_indices=shown)
            self.records.append(
                ToolCallRecord(
                    name=call.name,
                    arguments=call.arguments,
                    result_text=result.text,
                    is_error=result.is_error,
                    variables=sorted(result.variables),
                    value=result.value,
                    latency_s=latency_s,
                    turn=state.turn,
                    image_indices=indices,
                )
            )
        self._append_images(state, kept)
        for error in errors:
            self.parse_errors[error.kind] += 1
            responses[error.index] = tool_message(error.message, max_chars)
        state.messages.extend(responses[index] for index in sorted(responses))

    def _keep_images(self, session: ToolSession, result: ToolResult) -> list[tuple[int, np.ndarray]]:
        """The conversation indices of a tool's pictures, with the pictures.

        The session stored them where they were made (`result.image_indices`); a provider that does
        not is given them here.
        """
        indices = list(result.image_indices)
        if len(indices) != len(result.images):
            indices = [session.add_image(image) for image in result.images]
        return list(zip(indices, result.images, strict=True))

    def _append_images(self, state: EpisodeState, kept: list[tuple[int, np.ndarray]]) -> None:
        """Add a turn's tool pictures to the episode in index order (parallel calls finish in any order)."""
        for index, image in sorted(kept, key=lambda pair: pair[0]):
            if index != len(state.images):
                raise RuntimeError(
                    f"the session gave image index {index}, the episode expected {len(state.images)}"
                )
            state.images.append(image)
            self.tool_images.append(image)

    def stats(self, turns: int) -> dict[str, Any]:
        """The statistics block of the trajectory."""
        by_name = Counter(record.name for record in self.records)
        errors_by_name = Counter(record.name for record in self.records if record.is_error)
        return {
            "turns": turns,
            "tool_calls": len(self.records),
            "tool_calls_by_name": dict(by_name),
            "tool_errors": sum(errors_by_name.values()),
            "tool_errors_by_name": dict(errors_by_name),
            "parse_errors_by_kind": dict(self.parse_errors),
            "skipped_tool_calls": self.skipped_tool_calls,
            "images_added": len(self.tool_images),
            "policy_s": self.policy_s,
            "tools_s": self.tools_s,
        }


async def run_episode(
    policy: Policy,
    toolshed: ToolProvider,
    task: Task,
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_tool_response_chars: int = DEFAULT_MAX_TOOL_RESPONSE_CHARS,
    system_prompt: str | Path | None = None,
    scorer: Scorer | None = None,
    max_tool_calls_per_turn: int = DEFAULT_MAX_TOOL_CALLS_PER_TURN,
    show_tool_images: bool = False,
    seed: int | None = None,
    policy_timeout_s: float | None = None,
    feedback_on_no_answer: bool = False,
) -> Trajectory:
    """Run one episode of ``policy`` on ``task`` with a fresh session of ``toolshed``.

    Args:
        policy: Writes the assistant turns.
        toolshed: A started Toolshed.
        task: The question and its images.
        max_turns: Most assistant turns.
        max_tool_response_chars: Tool responses longer than this are cut in the middle.
        system_prompt: A template (text, or a Path to a file) for
            :func:`~spacetools.agent.protocol.build_system_prompt`; None for ours.
        scorer: Called with the trajectory's solution text (every assistant turn) to fill ``score``.
        max_tool_calls_per_turn: Blocks beyond this in one turn get an error response instead of running.
        show_tool_images: Whether images returned by tools are shown to the model (they are always
            recorded in the trajectory, for reports). The original switched them off in RL and evaluation.
        seed: The session seed (enters every tool call's random seed); vary it across the rollouts of
            one prompt to draw different tool noise under the ``realistic`` and ``harsh`` profiles.
        policy_timeout_s: Most seconds one policy turn may take (a ``policy_error`` past it); None: no limit.
        feedback_on_no_answer: A turn with neither a tool call nor an answer ends the episode (the
            original rule); with this set, the model is told so instead and the episode goes on.
            Either way such a turn counts as a ``no_answer`` parse error.
    """
    if max_turns < 1 or max_tool_calls_per_turn < 1:
        raise ValueError(
            f"max_turns and max_tool_calls_per_turn must be at least 1 ({max_turns}, {max_tool_calls_per_turn})"
        )
    started = time.perf_counter()
    specs = toolshed.specs()
    tool_names = {spec.name for spec in specs}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": build_system_prompt(specs, system_prompt)},
        build_user_message(task.question, len(task.images)),
    ]
    episode = _Episode(show_tool_images)
    state = EpisodeState(
        task=task,
        messages=messages,
        images=list(task.images),
        turn=0,
        tool_specs=specs,
        tool_calls=episode.records,
    )
    answer: str | None = None
    finish_reason = "max_turns"
    error: str | None = None
    attachments = [{"scene": scene} if scene is not None else {} for scene in task.scenes]
    session = toolshed.open_session(list(task.images), attachments, seed=seed)
    try:
        while state.turn < max_turns:
            policy_started = time.perf_counter()
            try:
                text = await asyncio.wait_for(policy.act(state), policy_timeout_s)
                if not isinstance(text, str):
                    raise TypeError(f"policy {policy.name!r} returned {type(text).__name__}, not str")
            except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11
                finish_reason, error = (
                    "policy_error",
                    f"TimeoutError: the policy took over {policy_timeout_s} s",
                )
                break
            except Exception as exc:
                finish_reason, error = "policy_error", _describe(exc)
                break
            finally:
                episode.policy_s += time.perf_counter() - policy_started
            messages.append({"role": "assistant", "content": text})
            state.turn += 1
            parsed = parse_turn(text, tool_names)
            if parsed.answer is not None:
                answer, finish_reason = parsed.answer, "answer"
                episode.skipped_tool_calls += parsed.block_count
                break
            if parsed.block_count == 0:
                episode.parse_errors["no_answer"] += 1
                if not feedback_on_no_answer or state.turn >= max_turns:
                    finish_reason = "no_tool_call"
                    break
                messages.append({"role": "user", "content": NO_ANSWER_FEEDBACK})
                continue
            calls = [call for call in parsed.tool_calls if call.index < max_tool_calls_per_turn]
            errors = list(parsed.errors)
            for call in parsed.tool_calls[len(calls) :]:
                message = (
                    f"Error: at most {max_tool_calls_per_turn} tool calls per turn; {call.name} was not run."
                )
                errors.append(ParseError(call.index, "too_many_calls", message))
            try:
                await episode.run_tools(session, state, calls, errors, max_tool_response_chars)
            except Exception as exc:
                finish_reason, error = "toolshed_error", _describe(exc)
                break
    finally:
        session.close()
    trajectory = Trajectory(
        task_id=task.id,
        data_source=task.data_source,
        messages=messages,
        tool_calls=episode.records,
        answer=answer,
        turns=state.turn,
        score=None,
        parse_errors=sum(episode.parse_errors.values()),
        stats=episode.stats(state.turn),
        wall_s=0.0,
        finish_reason=finish_reason,
        error=error,
        images=episode.tool_images,
        task_image_count=len(task.images),
    )
    if scorer is not None:
        try:
            trajectory.score = scorer(trajectory.solution_text)
        except Exception as exc:  # a scorer that chokes on model text must not lose the episode
            trajectory.error = f"scorer failed: {_describe(exc)}"
    trajectory.wall_s = time.perf_counter() - started
    return trajectory


async def run_episodes(
    policy: Policy,
    toolshed: ToolProvider,
    tasks: Sequence[Task],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_result: Callable[[Trajectory], None] | None = None,
    scorers: Sequence[Scorer | None] | None = None,
    system_prompt: str | Path | None = None,
    **episode_options: Any,
) -> list[Trajectory]:
    """Run one episode per task, at most ``concurrency`` at a time; trajectories in task order.

    ``on_result`` is called with each trajectory as it finishes (e.g. to append it to a file).
    ``scorers``, when given, holds one scorer (or None) per task. Other keywords go to
    :func:`run_episode`.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if scorers is not None and len(scorers) != len(tasks):
        raise ValueError(f"{len(scorers)} scorers for {len(tasks)} tasks (need one each)")
    if isinstance(system_prompt, Path):
        system_prompt = read_prompt_template(system_prompt)  # once, not once per episode
    semaphore = asyncio.Semaphore(concurrency)

    async def one(position: int, task: Task) -> Trajectory:
        async with semaphore:
            trajectory = await run_episode(
                policy,
                toolshed,
                task,
                system_prompt=system_prompt,
                scorer=scorers[position] if scorers is not None else None,
                **episode_options,
            )
        if on_result is not None:
            on_result(trajectory)
        return trajectory

    return list(await asyncio.gather(*(one(position, task) for position, task in enumerate(tasks))))
