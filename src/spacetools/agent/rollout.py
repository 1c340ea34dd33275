"""The multi-turn rollout loop: one episode of a policy against a tool session, and many at once.

Episode rules (the original's): an episode ends at an ``<answer>``, at a turn with no ``<tool_call>``
block, or after ``max_turns`` assistant turns; with ``max_episode_tokens``, also once the model has
written that many tokens (its last turn's tool calls are then not run). A turn with both tool calls and an answer ends the
episode at the answer and its tool calls are not run (counted in ``stats["skipped_tool_calls"]``).
A malformed tool-call block gets an ``Error: …`` tool response in its place and is counted in
``parse_errors`` (so is a turn with neither a tool call nor an answer); the Toolshed validates arguments
and reports tool failures as error results.

Nothing the model writes and no failure inside one episode makes the rollout raise: a policy exception
ends the episode with ``finish_reason`` ``policy_error``, a Toolshed that breaks with ``toolshed_error``,
and anything else (the parser choking on a turn, a bug) with ``rollout_error``; the message is in
``error``. So :func:`run_episodes` never loses a batch to one bad episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

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
from spacetools.agent.types import (
    EpisodeInput,
    EpisodeState,
    Policy,
    Scorer,
    Task,
    ToolCallRecord,
    Trajectory,
)

if TYPE_CHECKING:
    import numpy as np

    from spacetools.kit.definition import ToolResult
    from spacetools.toolshed import ToolProvider, ToolSession

DEFAULT_MAX_TURNS = 8
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 16
DEFAULT_CONCURRENCY = 8

NO_ANSWER_FEEDBACK = (
    "Error: your turn had neither a <tool_call> nor an <answer>. Call a tool, or give the final answer "
    "inside <answer>...</answer>."
)


class RolloutConfig(BaseModel):
    """How episodes run; one object for one episode, a batch, an evaluation or a training step.

    ``system_prompt`` is a template text for :func:`~spacetools.agent.protocol.build_system_prompt`
    (None: ours). ``show_tool_images``: whether pictures returned by tools are shown to the model (they
    are always recorded in the trajectory, for reports); the original switched them off in RL and
    evaluation. ``policy_timeout_s`` bounds one policy turn. ``feedback_on_no_answer``: a turn with
    neither a tool call nor an answer ends the episode (the original rule); with this set, the model is
    told so instead and the episode goes on (either way it counts as a ``no_answer`` parse error).
    ``concurrency`` is how many episodes :func:`run_episodes` runs at once.

    Token limits, in the model's tokens (the policy counts them, see
    :attr:`~spacetools.agent.types.EpisodeState.max_new_tokens`): ``max_new_tokens`` bounds one turn
    (None: the policy's own limit); ``max_episode_tokens`` bounds all of an episode's turns together, as
    verl's ``response_length`` does (None: no limit). The turn that reaches it is cut to what is left, and
    the episode ends there with ``finish_reason`` ``max_episode_tokens``. A policy that does not count its
    tokens cannot run under that budget: its episodes end with a ``rollout_error`` saying so.

    ``sampling_seed`` seeds a sampling policy's draws (with each task id and turn): a training step passes
    its own, so a step's episodes are reproducible whichever episodes share a batch.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_turns: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TURNS
    max_tool_response_chars: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TOOL_RESPONSE_CHARS
    max_tool_calls_per_turn: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TOOL_CALLS_PER_TURN
    show_tool_images: bool = False
    policy_timeout_s: Annotated[float | None, Field(gt=0)] = None
    feedback_on_no_answer: bool = False
    system_prompt: str | None = None
    concurrency: Annotated[int, Field(ge=1)] = DEFAULT_CONCURRENCY
    max_new_tokens: Annotated[int | None, Field(ge=1)] = None
    max_episode_tokens: Annotated[int | None, Field(ge=1)] = None
    sampling_seed: int = 0

    def turn_token_limit(self, written: int) -> int | None:
        """The most tokens the next turn may have, once the model has written ``written`` in the episode."""
        if self.max_episode_tokens is None:
            return self.max_new_tokens
        left = self.max_episode_tokens - written
        return left if self.max_new_tokens is None else min(left, self.max_new_tokens)

    def with_options(self, system_prompt: str | Path | None = None, **options: Any) -> RolloutConfig:
        """A validated copy with ``options`` replaced (unknown names are refused); a ``system_prompt``
        Path is read here, once."""
        if isinstance(system_prompt, Path):
            system_prompt = read_prompt_template(system_prompt)
        if system_prompt is not None:
            options["system_prompt"] = system_prompt
        if not options:
            return self
        return RolloutConfig.model_validate({**self.model_dump(), **options})


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
        self.invalid_turns = 0  # turns with a malformed call, or with neither a call nor an answer
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
        geometry = {spec.name: spec.geometry for spec in state.tool_specs}
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
                    geometry=dict(geometry.get(call.name, {})),
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
            "invalid_turns": self.invalid_turns,
            "images_added": len(self.tool_images),
            "policy_s": self.policy_s,
            "tools_s": self.tools_s,
        }


class _EpisodeEnded(Exception):
    """Ends the turn loop with a finish reason and an error message."""

    def __init__(self, finish_reason: str, error: str) -> None:
        super().__init__(error)
        self.finish_reason, self.error = finish_reason, error


async def _policy_turn(policy: Policy, state: EpisodeState, timeout_s: float | None) -> str:
    try:
        text = await asyncio.wait_for(policy.act(state), timeout_s)
    except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11
        raise _EpisodeEnded("policy_error", f"TimeoutError: the policy took over {timeout_s} s") from None
    except Exception as exc:
        raise _EpisodeEnded("policy_error", _describe(exc)) from exc
    if not isinstance(text, str):
        raise _EpisodeEnded("policy_error", f"policy {policy.name!r} returned {type(text).__name__}, not str")
    return text


async def _turns(
    policy: Policy, session: ToolSession, state: EpisodeState, episode: _Episode, config: RolloutConfig
) -> tuple[str, str | None]:
    """Run the turns of one episode; return the finish reason and the answer."""
    tool_names = {spec.name for spec in state.tool_specs}
    messages = state.messages
    while state.turn < config.max_turns:
        written = state.model_tokens
        state.max_new_tokens = config.turn_token_limit(written)
        policy_started = time.perf_counter()
        try:
            text = await _policy_turn(policy, state, config.policy_timeout_s)
        finally:
            episode.policy_s += time.perf_counter() - policy_started
        messages.append({"role": "assistant", "content": text})
        state.turn += 1
        parsed = parse_turn(text, tool_names)
        if parsed.answer is not None:
            episode.skipped_tool_calls += parsed.block_count
            return "answer", parsed.answer
        if _budget_spent(config, state, written, policy.name):
            episode.skipped_tool_calls += parsed.block_count
            return "max_episode_tokens", None
        episode.invalid_turns += parsed.block_count == 0 or bool(parsed.errors)
        if parsed.block_count == 0:
            episode.parse_errors["no_answer"] += 1
            if not config.feedback_on_no_answer or state.turn >= config.max_turns:
                return "no_tool_call", None
            messages.append({"role": "user", "content": NO_ANSWER_FEEDBACK})
            continue
        limit = config.max_tool_calls_per_turn
        calls = [call for call in parsed.tool_calls if call.index < limit]
        errors = list(parsed.errors)
        for call in parsed.tool_calls[len(calls) :]:
            message = f"Error: at most {limit} tool calls per turn; {call.name} was not run."
            errors.append(ParseError(call.index, "too_many_calls", message))
        try:
            await episode.run_tools(session, state, calls, errors, config.max_tool_response_chars)
        except Exception as exc:
            raise _EpisodeEnded("toolshed_error", _describe(exc)) from exc
    return "max_turns", None


def _budget_spent(config: RolloutConfig, state: EpisodeState, written: int, policy: str) -> bool:
    """Whether the model's tokens have reached the episode's budget (never, without one)."""
    if config.max_episode_tokens is None:
        return False
    if state.model_tokens == written:  # a real turn has at least its end token
        raise _EpisodeEnded(
            "rollout_error",
            f"max_episode_tokens needs a policy that counts its tokens; {policy!r} does not "
            "(EpisodeState.model_tokens)",
        )
    return state.model_tokens >= config.max_episode_tokens


async def run_episode(
    policy: Policy,
    toolshed: ToolProvider,
    task: Task | EpisodeInput,
    *,
    config: RolloutConfig | None = None,
    scorer: Scorer | None = None,
    seed: int | None = None,
    system_prompt: str | Path | None = None,
    **options: Any,
) -> Trajectory:
    """Run one episode of ``policy`` on ``task`` with a fresh session of ``toolshed``; never raises for
    anything that goes wrong inside the episode (see the module docstring).

    Args:
        policy: Writes the assistant turns; it sees the :class:`Task` only.
        toolshed: A started tool provider (a local ``Toolshed`` or a ``RemoteToolshed``).
        task: The policy's task, or an :class:`EpisodeInput` that adds the session attachments, the
            scorer and the seed.
        config: How the episode runs (default :class:`RolloutConfig()`); ``options`` and
            ``system_prompt`` (text, or a Path to a template file) override its fields.
        scorer: Called with the trajectory's solution text to fill ``score`` (overrides the input's).
        seed: The session seed (enters every tool call's random seed; overrides the input's); vary it
            across the rollouts of one prompt to draw different tool noise.
    """
    config = (config or RolloutConfig()).with_options(system_prompt, **options)
    item = task if isinstance(task, EpisodeInput) else EpisodeInput(task)
    return await _run_episode(policy, toolshed, item, config, scorer or item.scorer, _seed(seed, item))


def _seed(seed: int | None, item: EpisodeInput) -> int | None:
    return seed if seed is not None else item.seed


async def _run_episode(
    policy: Policy,
    toolshed: ToolProvider,
    item: EpisodeInput,
    config: RolloutConfig,
    scorer: Scorer | None,
    seed: int | None,
) -> Trajectory:
    started = time.perf_counter()
    task = item.task
    episode = _Episode(config.show_tool_images)
    state = EpisodeState(
        task=task,
        messages=[],
        images=list(task.images),
        turn=0,
        tool_specs=[],
        tool_calls=episode.records,
        sampling_seed=config.sampling_seed,
    )
    answer: str | None = None
    error: str | None = None
    session: ToolSession | None = None
    try:
        try:
            state.tool_specs = toolshed.specs()
            session = toolshed.open_session(list(task.images), item.attachments, seed=seed)
        except Exception as exc:
            raise _EpisodeEnded("toolshed_error", _describe(exc)) from exc
        state.messages.extend(
            [
                {"role": "system", "content": build_system_prompt(state.tool_specs, config.system_prompt)},
                build_user_message(task.question, len(task.images)),
            ]
        )
        finish_reason, answer = await _turns(policy, session, state, episode, config)
    except _EpisodeEnded as ended:
        finish_reason, error = ended.finish_reason, ended.error
    except Exception as exc:  # the parser or a bug: this episode's error, never the batch's
        finish_reason, error = "rollout_error", _describe(exc)
    finally:
        if session is not None:
            with contextlib.suppress(Exception):  # a session that cannot close is the server's to expire
                session.close()
    trajectory = Trajectory(
        task_id=task.id,
        data_source=task.data_source,
        messages=state.messages,
        tool_calls=episode.records,
        answer=answer,
        turns=state.turn,
        score=None,
        parse_errors=sum(episode.parse_errors.values()),
        stats={**episode.stats(state.turn), "model_tokens": state.model_tokens, **state.policy_stats},
        wall_s=0.0,
        finish_reason=finish_reason,
        error=error,
        images=episode.tool_images,
        task_image_count=len(task.images),
        fallback=state.fallback,
        tokens=state.tokens,
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
    tasks: Sequence[Task | EpisodeInput],
    *,
    config: RolloutConfig | None = None,
    on_result: Callable[[Trajectory], None] | None = None,
    scorers: Sequence[Scorer | None] | None = None,
    system_prompt: str | Path | None = None,
    **options: Any,
) -> list[Trajectory]:
    """Run one episode per task, at most ``config.concurrency`` at a time; trajectories in task order.

    No episode's failure raises (each becomes that trajectory's ``error``). ``on_result`` is called with
    each trajectory as it finishes (e.g. to append it to a file); if it raises, the episodes still
    running are cancelled and the error propagates. ``scorers``, when given, holds one scorer (or None)
    per task, overriding the inputs' own. ``options`` and ``system_prompt`` override ``config`` fields.
    """
    config = (config or RolloutConfig()).with_options(system_prompt, **options)
    items = [task if isinstance(task, EpisodeInput) else EpisodeInput(task) for task in tasks]
    if scorers is not None:
        if len(scorers) != len(items):
            raise ValueError(f"{len(scorers)} scorers for {len(items)} tasks (need one each)")
        items = [
            dataclasses.replace(item, scorer=scorer) for item, scorer in zip(items, scorers, strict=True)
        ]
    semaphore = asyncio.Semaphore(config.concurrency)

    async def one(item: EpisodeInput) -> Trajectory:
        async with semaphore:
            trajectory = await _run_episode(policy, toolshed, item, config, item.scorer, item.seed)
        if on_result is not None:
            on_result(trajectory)
        return trajectory

    running = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*running))
    except BaseException:
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
