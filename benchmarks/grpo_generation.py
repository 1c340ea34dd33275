"""GRPO group generation: a group's episodes sampled together in batched `generate` calls, against one
episode's turn at a time (what the trainer did before: one `generate` per turn under a lock).

SmolLM2-135M-Instruct (CPU) runs one GRPO group, `--group` episodes of one question against an echo tool
in this process, through the recording `hf` policy GRPO samples with; told to go on when a turn has no
answer, every episode runs `--turns` turns of up to `--max-new-tokens` tokens. The only difference
between the two settings is the policy's `batch_size` (1: serial). Settings alternate, `--repeats` runs
each, in one process, so their ratio holds on a loaded machine. Each episode samples the same tokens in
both settings (its turns are seeded by episode and turn), which the script checks: equal work.

    python benchmarks/grpo_generation.py [--group 8] [--turns 3] [--max-new-tokens 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.agent.rollout import RolloutConfig, run_episodes  # noqa: E402
from spacetools.agent.types import Task  # noqa: E402
from spacetools.kit.loading import load_processor, load_vlm  # noqa: E402
from spacetools.tools.diagnostics import EchoTool  # noqa: E402
from spacetools.toolshed.deployment import ToolDeployment  # noqa: E402
from spacetools.toolshed.shed import Toolshed  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402

PROMPT = "Call a tool as <tool_call>{...}</tool_call>, answer as <answer>...</answer>.\nTools: {tools}"
QUESTION = "Is the red mug left of the blue bowl? Answer yes or no."


async def group(
    policy: HFPolicy, tools: Toolshed, tasks: list[Task], config: RolloutConfig
) -> dict[str, Any]:
    policy.forget()
    policy.reset_stats()
    started = time.perf_counter()
    trajectories = await run_episodes(policy, tools, tasks, config=config)
    wall = time.perf_counter() - started
    await policy.aclose()
    stats = policy.stats()
    return {
        "wall_s": wall,
        "generate_s": stats["generate_s"],
        "batches": stats["batches"],
        "tokens": stats["new_tokens"],
        "ids": [policy.recorded(t.task_id).trace.ids for t in trajectories],
    }


async def main(group_size: int, turns: int, max_new_tokens: int, repeats: int) -> dict[str, Any]:
    folder = get_base_model("smollm2-135m")
    processor = load_processor(folder)
    model = load_vlm(folder, dtype="float32")
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=f"q#{k}", data_source="robospatial", question=QUESTION, images=[image])
        for k in range(group_size)
    ]
    config = RolloutConfig(
        max_turns=turns, system_prompt=PROMPT, concurrency=group_size, feedback_on_no_answer=True
    )

    def policy(batch_size: int) -> HFPolicy:
        return HFPolicy(
            model,
            processor,
            temperature=1.0,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            record=True,
        )

    policies = {"serial": policy(1), "batched": policy(group_size)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in policies}
    load_before = os.getloadavg()[0]
    async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as tools:
        await group(policies["batched"], tools, tasks[:1], config)  # warm-up
        for _ in range(repeats):
            for name, chosen in policies.items():
                runs[name].append(await group(chosen, tools, tasks, config))
    serial, batched = (
        statistics.median(run["wall_s"] for run in runs[name]) for name in ("serial", "batched")
    )
    return {
        "group_size": group_size,
        "turns": turns,
        "max_new_tokens": max_new_tokens,
        "threads": torch.get_num_threads(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "same_tokens": all(run["ids"] == runs["serial"][0]["ids"] for name in runs for run in runs[name]),
        "tokens_per_group": runs["serial"][0]["tokens"],
        **{
            f"{name}_{key}": [round(run[key], 2) for run in runs[name]]
            for name in runs
            for key in ("wall_s", "generate_s", "batches")
        },
        "speedup_median_wall": round(serial / batched, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.group, args.turns, args.max_new_tokens, args.repeats)), indent=2))
