"""GRPO group generation: batched `generate` calls against one episode's turn at a time, each with and
without the KV cache kept across an episode's turns (and the system prefix shared between episodes).

SmolLM2-135M-Instruct (CPU) runs one GRPO group, `--group` episodes of one question against an echo tool
in this process, through the `hf` policy GRPO samples with; told to go on when a turn has no answer,
every episode runs `--turns` turns of up to `--max-new-tokens` tokens. The settings differ only in the
policy's `batch_size` (1: serial) and `kv_cache`. `--prompt default` uses the project's long default
system prompt (~3,500 tokens, what `eval --policy hf` sends unless told otherwise), `short` a one-line one.
Settings alternate, `--repeats` runs each, in one process, so their ratios hold on a loaded machine.
Each episode's turns are seeded by episode and turn, so every setting samples the same tokens up to float
rounding (`same_tokens` says whether they all did): equal work.

    python benchmarks/grpo_generation.py [--group 8] [--turns 3] [--max-new-tokens 64] [--repeats 2]
        [--prompt short|default]
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
        "ids": [t.tokens.ids if t.tokens else [] for t in trajectories],
        "prompt_tokens": sum(t.stats.get("prompt_tokens", 0) for t in trajectories),
        "cached_tokens": sum(t.stats.get("cached_tokens", 0) for t in trajectories),
    }


async def main(group_size: int, turns: int, max_new_tokens: int, repeats: int, prompt: str) -> dict[str, Any]:
    folder = get_base_model("smollm2-135m")
    processor = load_processor(folder)
    model = load_vlm(folder, dtype="float32")
    image = np.full((56, 56, 3), 120, np.uint8)
    tasks = [
        Task(id=f"q#{k}", data_source="robospatial", question=QUESTION, images=[image])
        for k in range(group_size)
    ]
    config = RolloutConfig(
        max_turns=turns,
        system_prompt=PROMPT if prompt == "short" else None,
        concurrency=group_size,
        feedback_on_no_answer=True,
    )

    def policy(batch_size: int, kv_cache: bool) -> HFPolicy:
        return HFPolicy(
            model,
            processor,
            temperature=1.0,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            record=True,
            kv_cache=kv_cache,
        )

    policies = {
        "serial": policy(1, False),
        "batched": policy(group_size, False),
        "serial_cached": policy(1, True),
        "batched_cached": policy(group_size, True),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in policies}
    load_before = os.getloadavg()[0]
    async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as tools:
        await group(policies["batched"], tools, tasks[:1], config)  # warm-up
        for _ in range(repeats):
            for name, chosen in policies.items():
                runs[name].append(await group(chosen, tools, tasks, config))
    wall = {name: statistics.median(run["wall_s"] for run in runs[name]) for name in runs}
    return {
        "group_size": group_size,
        "prompt": prompt,
        "turns": turns,
        "max_new_tokens": max_new_tokens,
        "threads": torch.get_num_threads(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "same_tokens": all(run["ids"] == runs["serial"][0]["ids"] for name in runs for run in runs[name]),
        "tokens_per_group": runs["serial"][0]["tokens"],
        "prompt_tokens_per_group": runs["serial"][0]["prompt_tokens"],
        "cached_tokens_per_group": runs["batched_cached"][0]["cached_tokens"],
        **{
            f"{name}_{key}": [round(run[key], 2) for run in runs[name]]
            for name in runs
            for key in ("wall_s", "generate_s", "batches")
        },
        **{f"speedup_{name}_vs_serial": round(wall["serial"] / wall[name], 2) for name in runs},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompt", choices=("short", "default"), default="short")
    args = parser.parse_args()
    result = asyncio.run(main(args.group, args.turns, args.max_new_tokens, args.repeats, args.prompt))
    print(json.dumps(result, indent=2))
