"""The agent: the tag protocol, the multi-turn rollout loop and the policies that write model turns."""

from spacetools.agent.protocol import (
    DEFAULT_SYSTEM_PROMPT,
    ParsedTurn,
    build_system_prompt,
    format_tool_response,
    parse_turn,
    truncate_middle,
)
from spacetools.agent.rollout import RolloutConfig, run_episode, run_episodes
from spacetools.agent.types import (
    EpisodeInput,
    EpisodeState,
    Policy,
    Task,
    ToolCallRecord,
    Trajectory,
    read_trajectories,
    write_trajectories,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "EpisodeInput",
    "EpisodeState",
    "ParsedTurn",
    "Policy",
    "RolloutConfig",
    "Task",
    "ToolCallRecord",
    "Trajectory",
    "build_system_prompt",
    "format_tool_response",
    "parse_turn",
    "read_trajectories",
    "run_episode",
    "run_episodes",
    "truncate_middle",
    "write_trajectories",
]
