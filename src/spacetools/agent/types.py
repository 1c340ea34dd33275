"""Data types shared by the protocol, the rollout loop and every policy."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from spacetools.kit import imagecodec
from spacetools.kit.errors import ImageDecodeError

if TYPE_CHECKING:
    from spacetools.kit.definition import ToolSpec

#: The keys of a sample's ``extra_info`` a policy may read: what a model is shown with the question.
#: Everything else (the answer, the scene specification, the generator's bookkeeping) stays out of the
#: policy's view; the scene goes to the tool session as an attachment.
PUBLIC_EXTRA_INFO_KEYS = frozenset(
    {"qa_type", "category", "choices", "marked_points", "image_index", "index", "split", "question"}
)


@dataclass
class Task:
    """What a policy sees of one question: its id, source, text, images and public metadata.

    Never the ground truth and never the scene specification: those reach the scorer and the tool
    session alone (see :class:`EpisodeInput`). ``extra_info`` is cut to :data:`PUBLIC_EXTRA_INFO_KEYS`.
    """

    id: str
    data_source: str
    question: str
    images: list[np.ndarray]
    extra_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.images:
            raise ValueError(f"task {self.id!r} has no image")
        self.extra_info = {k: v for k, v in self.extra_info.items() if k in PUBLIC_EXTRA_INFO_KEYS}


Attachment = dict[str, Any]
"""Per-image data only the tools receive, e.g. ``{"scene": spec_json}`` for the simulated tools."""

Scorer = Callable[[str], dict[str, Any]]
"""Scores an episode's solution text (every assistant turn, joined)."""


@dataclass
class EpisodeInput:
    """One episode to run: the policy's :class:`Task`, and what only the tools and the scorer see.

    ``attachments`` holds one entry (or None) per task image and goes to the tool session alone;
    ``scorer`` fills the trajectory's ``score``; ``seed`` is the session seed.
    """

    task: Task
    attachments: list[Attachment | None] = field(default_factory=list)
    scorer: Scorer | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.attachments:
            self.attachments = [None] * len(self.task.images)
        if len(self.attachments) != len(self.task.images):
            raise ValueError(
                f"task {self.task.id!r}: {len(self.attachments)} attachments for "
                f"{len(self.task.images)} images (need one each)"
            )


@dataclass
class EpisodeTokens:
    """An episode token by token, as its model read and wrote it (verl's ``AgentLoopOutput``).

    ``ids`` is the whole episode (prompt, then every turn and tool response), ``mask`` 1 on the tokens the
    model sampled and 0 on the context (system, question, tool responses, chat-template glue), ``logprobs``
    each sampled token's log-probability under the distribution it was drawn from (softmax(logits /
    temperature); a greedy turn's are under softmax(logits)), 0 on context, or None when the engine gave
    none. ``prompt_length`` tokens open ``ids`` before the first sampled one; ``vision`` holds the
    processor's pixel inputs of the images in ``ids``, in order (empty for a text-only model);
    ``blocked`` the token ids the sampler never allowed (a trainer scores with them blocked too).
    """

    ids: list[int]
    mask: list[int]
    logprobs: list[float] | None
    prompt_length: int
    vision: list[dict[str, Any]] = field(default_factory=list)
    blocked: list[int] = field(default_factory=list)

    @property
    def prompt_ids(self) -> list[int]:
        return self.ids[: self.prompt_length]

    @property
    def response_ids(self) -> list[int]:
        return self.ids[self.prompt_length :]

    @property
    def response_mask(self) -> list[int]:
        return self.mask[self.prompt_length :]


@dataclass(eq=False)
class EpisodeState:
    """What a policy sees before its next turn (compared and hashed by identity: it is one live episode).

    ``messages`` is an OpenAI-style chat whose image parts are ``{"type": "image", "index": i}``;
    ``i`` addresses ``images`` (the task's images first, then those added by tools), which is also
    what a tool's ``image_index`` argument means. ``turn`` counts the assistant turns already taken.
    ``tool_calls`` are the calls run so far, with their structured results (``value``).
    ``fallback`` is what a policy writes back about its answer: set it with the final answer when that
    answer is a guess after a tool failure, so the trajectory records it (`Trajectory.fallback`).

    Token limits (see :class:`~spacetools.agent.rollout.RolloutConfig`): ``max_new_tokens`` is the most
    tokens the next turn may have (the rollout's per-turn limit, cut to what is left of the episode's
    budget; None: the policy's own limit). A policy that writes tokens adds each turn's count to
    ``model_tokens``, which the episode's budget is measured by.

    ``sampling_seed`` (the rollout's, `RolloutConfig.sampling_seed`) seeds the policy's sampling with the
    task id and the turn. A policy that works on tokens keeps its per-episode data (a token trace, a KV
    cache) in ``policy_data``, dropped with the episode, sets ``tokens`` (what `Trajectory.tokens`
    returns) and adds its per-episode figures (model time, entropy) to ``policy_stats``.
    """

    task: Task
    messages: list[dict[str, Any]]
    images: list[np.ndarray]
    turn: int
    tool_specs: list[ToolSpec]
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    fallback: bool = False
    max_new_tokens: int | None = None
    model_tokens: int = 0
    sampling_seed: int = 0
    policy_data: Any = None
    tokens: EpisodeTokens | None = None
    policy_stats: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """Anything that writes the next assistant turn of an episode.

    The project's policies subclass it and so inherit `aclose`'s default; a class of your own may too,
    or have only `name` and `act` (then it holds nothing to close, and `isinstance(p, Policy)` is false).
    """

    name: str

    async def act(self, state: EpisodeState) -> str:
        """Return the raw text of the next assistant turn."""
        ...

    async def aclose(self) -> None:
        """Release what the policy holds in the running event loop (HTTP connections, a batching task)
        before that loop ends; the policy stays usable in a later one. Default: nothing to release."""
        return None  # a body, so that subclasses inherit it (mypy takes a bare docstring as abstract)


@dataclass
class ToolCallRecord:
    """One executed tool call: what was asked, what came back, and how long it took.

    ``image_indices`` are the conversation indices of the pictures the call returned (see
    :class:`Trajectory` for where those images are kept).
    """

    name: str
    arguments: dict[str, Any]
    result_text: str
    is_error: bool
    variables: list[str]
    latency_s: float
    turn: int
    image_indices: list[int] = field(default_factory=list)
    value: Any = None
    """The tool's structured result (`ToolResult.value`), JSON-able."""
    geometry: dict[str, str] = field(default_factory=dict)
    """The keys of `value` that hold geometry, with their kinds, as the tool method declares them
    (`ToolSpec.geometry`): what the report draws."""


def assistant_text(messages: Iterable[dict[str, Any]]) -> str:
    """Every assistant turn's raw text, joined by newlines: the solution string verl hands a scorer."""
    return "\n".join(
        message["content"]
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), str)
    )


@dataclass
class Trajectory:
    """A finished episode, JSON-serialisable with :meth:`to_dict` / :meth:`from_dict`.

    ``images`` holds only the images tools added; an image part with index ``i`` refers to the
    task's image ``i`` when ``i < task_image_count`` and to ``images[i - task_image_count]`` otherwise.
    ``finish_reason`` is one of ``answer``, ``no_tool_call``, ``max_turns``, ``max_episode_tokens``,
    ``policy_error``, ``toolshed_error``, ``rollout_error``.
    ``error`` is set when the policy, the Toolshed or the scorer failed, so a run never loses an
    episode silently. ``fallback`` says the policy marked its answer a guess after a tool failure
    (`EpisodeState.fallback`); training drops such episodes. Records from before it read as False.
    ``tokens`` is the episode token by token (:class:`EpisodeTokens`) when the policy works on tokens; it
    lives in memory only (a trainer reads it from the rollout's result) and is not written by
    :meth:`to_dict`.
    """

    task_id: str
    data_source: str
    messages: list[dict[str, Any]]
    tool_calls: list[ToolCallRecord]
    answer: str | None
    turns: int
    score: dict[str, Any] | None
    parse_errors: int
    stats: dict[str, Any]
    wall_s: float
    finish_reason: str = "answer"
    error: str | None = None
    images: list[np.ndarray] = field(default_factory=list)
    task_image_count: int = 1
    fallback: bool = False
    tokens: EpisodeTokens | None = field(default=None, repr=False, compare=False)

    @property
    def solution_text(self) -> str:
        """Every assistant turn's raw text, joined by newlines: the solution string verl hands a scorer."""
        return assistant_text(self.messages)

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-compatible dict (tool images become PNG data URLs)."""
        data = asdict(dataclasses.replace(self, tokens=None))
        del data["tokens"]
        data["images"] = [imagecodec.to_data_url(image) for image in self.images]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Rebuild a trajectory written by :meth:`to_dict`."""
        values = dict(data)
        try:
            values["tool_calls"] = [ToolCallRecord(**record) for record in values.get("tool_calls", [])]
            values["images"] = [imagecodec.decode(url) for url in values.get("images", [])]
            return cls(**values)
        except (TypeError, ImageDecodeError) as exc:
            raise ValueError(f"not a trajectory record: {exc}") from exc


def write_trajectories(trajectories: Iterable[Trajectory], path: str | Path, *, append: bool = False) -> None:
    """Write trajectories to a JSON-lines file, one per line (ASCII JSON, so any text survives, lone
    surrogates included)."""
    with Path(path).open("a" if append else "w", encoding="utf-8") as stream:
        for trajectory in trajectories:
            stream.write(json.dumps(trajectory.to_dict()) + "\n")


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a JSON-lines file of trajectories (:func:`write_trajectories`), or of evaluation rows that
    hold one under ``"trajectory"`` (a run folder's ``samples.jsonl``)."""
    trajectories: list[Trajectory] = []
    with Path(path).open(encoding="utf-8") as stream:
        for line_number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if isinstance(record, dict) and "task_id" not in record and "trajectory" in record:
                    record = record["trajectory"]
                if not isinstance(record, dict):
                    raise ValueError(f"expected a JSON object, got {type(record).__name__}")
                trajectories.append(Trajectory.from_dict(record))
            except (json.JSONDecodeError, ValueError) as exc:
                raise ValueError(f"{path}:{line_number}: not a trajectory record: {exc}") from exc
    return trajectories
