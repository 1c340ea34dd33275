"""The scripted expert as a package: its replay engine, question reading, measuring steps and plans.

- `replay`: re-running a plan over the episode's tool results; the turn formats.
- `questions`: reading the benchmarks' wordings and the task's public metadata.
- `measure`: the calls the plans make and how their structured results (``value``) are read.
- `plans_spatial`, `plans_compatibility`, `plans_vision`: one plan per task family (compatibility
  measures free table space, so it has a module of its own).
- `policy`: `ScriptedPolicy` and the choice of plan.
"""

from spacetools.agent.policies.scripted.measure import Box3D, read_box, read_grasp
from spacetools.agent.policies.scripted.policy import PLANS, ScriptedPolicy, choose_plan
from spacetools.agent.policies.scripted.questions import QuestionNotUnderstood
from spacetools.agent.policies.scripted.replay import (
    Answer,
    ToolOutcome,
    ToolReplay,
    tool_batches,
)

__all__ = [
    "PLANS",
    "Answer",
    "Box3D",
    "QuestionNotUnderstood",
    "ScriptedPolicy",
    "ToolOutcome",
    "ToolReplay",
    "choose_plan",
    "read_box",
    "read_grasp",
    "tool_batches",
]
