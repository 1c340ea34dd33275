"""`ScriptedPolicy`: the deterministic expert, one plan per task family, answering from tool results."""

from __future__ import annotations

from collections.abc import Callable

from spacetools.agent.policies.scripted.plans_compatibility import plan_compatibility
from spacetools.agent.policies.scripted.plans_spatial import (
    plan_configuration,
    plan_free_space_point,
    plan_location,
)
from spacetools.agent.policies.scripted.plans_vision import (
    plan_blink_depth,
    plan_depth_3d,
    plan_detect_2d,
    plan_grasp,
    plan_pose,
    plan_relation_2d,
)
from spacetools.agent.policies.scripted.questions import (
    COMPATIBILITY_RE,
    POINTING_QUESTION_RE,
    QuestionNotUnderstood,
)
from spacetools.agent.policies.scripted.replay import (
    Answer,
    Pending,
    ToolReplay,
    format_answer_turn,
    format_tool_turn,
    tool_batches,
)
from spacetools.agent.types import EpisodeState, Policy, Task
from spacetools.rewards.benchmarks import SPATIALSIM_PREFIX

Plan = Callable[[Task, ToolReplay], Answer]

#: The plan for each SpatialSim family and each paper benchmark key.
PLANS: dict[str, Plan] = {
    "configuration": plan_configuration,
    "compatibility": plan_compatibility,
    "vacant": plan_free_space_point,
    "reflocation": plan_location,
    "refplacement": plan_free_space_point,
    "refunseen": plan_location,
    "blinkdepth": plan_blink_depth,
    "cvb2drelation": plan_relation_2d,
    "cvb3ddepth": plan_depth_3d,
    "boppose": plan_pose,
    "bopgrasp": plan_grasp,
    "detect2d": plan_detect_2d,
}


def choose_plan(task: Task) -> Plan:
    """The plan for a task, from its data source and, for RoboSpatial, the question type."""
    family = task.data_source.removeprefix(SPATIALSIM_PREFIX)
    if family == "robospatial":
        qa_type = str(task.extra_info.get("qa_type") or task.extra_info.get("category") or "")
        if qa_type in ("configuration", "compatibility", "vacant"):
            return PLANS[qa_type]
        if POINTING_QUESTION_RE.search(task.question):
            return plan_free_space_point
        return plan_compatibility if COMPATIBILITY_RE.search(task.question) else plan_configuration
    if family == "refspatial":
        qa_type = str(task.extra_info.get("qa_type") or "")
        return plan_free_space_point if "placement" in qa_type else plan_location
    try:
        return PLANS[family]
    except KeyError:
        raise QuestionNotUnderstood(
            f"the scripted policy has no plan for data source {task.data_source!r}"
        ) from None


class ScriptedPolicy(Policy):
    """The deterministic expert: one tool chain per task family, answers from tool results only.

    It is the baseline and the stand-in for the universal teacher. It sees the question, the images,
    the public metadata (``task.extra_info`` without the answer) and the structured results of its
    own tool calls, never the scene. Each turn is real protocol text (``<think>`` then ``<tool_call>``
    blocks, or ``<answer>``), so its traces are valid SFT data; a guess after a tool failure is
    recorded on the episode (``EpisodeState.fallback``, then ``Trajectory.fallback``), so training can
    drop it.
    """

    name = "scripted"

    def __init__(self, max_turns: int = 8) -> None:
        if max_turns < 2:
            raise ValueError(f"max_turns must be at least 2 (one tool turn and the answer), got {max_turns}")
        self.max_turns = max_turns

    async def act(self, state: EpisodeState) -> str:
        """Re-run the task's plan over the results so far; emit its next tool turn or its answer."""
        plan = choose_plan(state.task)
        replay = ToolReplay(tool_batches(state.tool_calls), max_tool_turns=self.max_turns - 1)
        try:
            answer = plan(state.task, replay)
        except Pending as pending:
            return format_tool_turn(pending.thought, pending.calls)
        state.fallback = answer.fallback
        return format_answer_turn(answer)
