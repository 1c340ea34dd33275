"""Rollout throughput: concurrent episodes against sequential ones, and the framework's cost per turn.

The policy and the tools have fixed latencies (an ``asyncio.sleep`` in the policy, the diagnostic
``sleep.sleep`` tool served in-process by one instance per concurrent episode), so the ideal speed-up
of N concurrent episodes over running them one by one is N; the target is at least 0.8 of it.

The framework overhead per turn is what an episode spends outside the policy and the tools: the
rollout loop's own work (prompt, parsing, messages) and the Toolshed's (argument validation,
dispatch, variables), measured sequentially with zero-latency policy and tools.

    python benchmarks/rollout_throughput.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import numpy as np

from spacetools.agent.rollout import run_episodes
from spacetools.agent.types import EpisodeState, Task, Trajectory
from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed

TARGET_EFFICIENCY = 0.8


class FixedLatencyPolicy:
    """Each turn waits ``latency_s`` (a model's generation time), then calls tools or answers."""

    name = "fixed-latency"

    def __init__(self, latency_s: float, tool_turns: int, calls_per_turn: int, tool_latency_s: float) -> None:
        self.latency_s = latency_s
        self.tool_turns = tool_turns
        call = json.dumps({"name": "sleep.sleep", "arguments": {"seconds": tool_latency_s}})
        self.tool_turn = "<think>measure</think>" + f"<tool_call>{call}</tool_call>" * calls_per_turn

    async def act(self, state: EpisodeState) -> str:
        await asyncio.sleep(self.latency_s)
        return self.tool_turn if state.turn < self.tool_turns else "<think>done</think><answer>(A)</answer>"


def make_tasks(count: int) -> list[Task]:
    image = np.zeros((480, 640, 3), dtype=np.uint8)
    return [
        Task(id=f"bench-{i}", data_source="bench", question="Which is closer?", images=[image])
        for i in range(count)
    ]


async def timed_run(
    shed: Toolshed, policy: FixedLatencyPolicy, tasks: list[Task], concurrency: int
) -> tuple[float, list[Trajectory]]:
    started = time.perf_counter()
    trajectories = await run_episodes(policy, shed, tasks, concurrency=concurrency)
    elapsed = time.perf_counter() - started
    failed = [t for t in trajectories if t.finish_reason != "answer" or t.stats["tool_errors"]]
    if failed:
        raise RuntimeError(
            f"{len(failed)} benchmark episodes failed, e.g. {failed[0].error or failed[0].stats}"
        )
    return elapsed, trajectories


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    instances = args.episodes * args.calls_per_turn
    deployments = [
        ToolDeployment(tool=SleepTool, instances=instances, backend="inprocess"),
        ToolDeployment(tool=EchoTool, backend="inprocess"),
    ]
    async with Toolshed(deployments) as shed:
        tasks = make_tasks(args.episodes)
        policy = FixedLatencyPolicy(
            args.policy_latency, args.tool_turns, args.calls_per_turn, args.tool_latency
        )
        await timed_run(shed, policy, tasks[:2], concurrency=2)  # warm-up: threads, imports, caches
        sequential_s, _ = await timed_run(shed, policy, tasks, concurrency=1)
        concurrent_s, _ = await timed_run(shed, policy, tasks, concurrency=args.episodes)

        # Overhead: zero-latency policy and tools, so every second measured is framework time.
        instant = FixedLatencyPolicy(0.0, args.tool_turns, args.calls_per_turn, 0.0)
        overhead_tasks = make_tasks(args.overhead_episodes)
        overhead_s, trajectories = await timed_run(shed, instant, overhead_tasks, concurrency=1)
    turns = sum(t.turns for t in trajectories)
    in_rollout_s = [
        (t.wall_s - t.stats["policy_s"] - t.stats["tools_s"]) / t.turns for t in trajectories
    ]  # the rollout loop alone, without the Toolshed's share
    tool_turn_s = [t.stats["tools_s"] / args.tool_turns for t in trajectories]
    speedup = sequential_s / concurrent_s
    ideal = float(args.episodes)
    return {
        "episodes": args.episodes,
        "turns_per_episode": args.tool_turns + 1,
        "calls_per_tool_turn": args.calls_per_turn,
        "policy_latency_s": args.policy_latency,
        "tool_latency_s": args.tool_latency,
        "sequential_s": round(sequential_s, 4),
        "concurrent_s": round(concurrent_s, 4),
        "speedup": round(speedup, 2),
        "ideal_speedup": ideal,
        "efficiency": round(speedup / ideal, 3),
        "target_efficiency": TARGET_EFFICIENCY,
        "meets_target": speedup / ideal >= TARGET_EFFICIENCY,
        "overhead_per_turn_ms": round(1000 * overhead_s / turns, 3),
        "rollout_loop_per_turn_ms": round(1000 * statistics.median(in_rollout_s), 3),
        "toolshed_per_tool_turn_ms": round(1000 * statistics.median(tool_turn_s), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=16, help="concurrent episodes (the ideal speed-up)")
    parser.add_argument("--tool-turns", type=int, default=3, help="tool-calling turns before the answer")
    parser.add_argument("--calls-per-turn", type=int, default=2, help="parallel tool calls per turn")
    parser.add_argument("--policy-latency", type=float, default=0.05, help="seconds per policy turn")
    parser.add_argument("--tool-latency", type=float, default=0.1, help="seconds per tool call")
    parser.add_argument("--overhead-episodes", type=int, default=200, help="episodes for the overhead run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if min(args.episodes, args.tool_turns, args.calls_per_turn, args.overhead_episodes) < 1:
        parser.error("--episodes, --tool-turns, --calls-per-turn and --overhead-episodes must be at least 1")
    if args.policy_latency < 0 or not 0 <= args.tool_latency <= 60:
        parser.error("latencies must be non-negative (tool latency at most 60 s)")
    result = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(result))
        return
    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
