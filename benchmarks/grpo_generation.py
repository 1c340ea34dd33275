"""GRPO group generation: a group's episodes sampled together in batched `generate` calls, against one
episode's turn at a time (what the trainer did before: one `generate` per turn under a lock).

SmolLM2-135M-Instruct (CPU) runs one GRPO group, `--group` episodes of one SpatialSim question with the
live V1 tools in this process, through the recording `hf` policy GRPO samples with; the only difference
between the two settings is the policy's `batch_size` (1: serial). Settings alternate, `--repeats` runs
each, in one process, so their ratio holds on a loaded machine. Each episode samples the same tokens in
both settings (its turns are seeded by episode and turn), which the script checks: equal work.

    python benchmarks/grpo_generation.py [--group 8] [--repeats 2] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.agent.rollout import RolloutConfig, run_episodes  # noqa: E402
from spacetools.bench.evaluate import episode_input, load_samples  # noqa: E402
from spacetools.bench.spatialsim.generator import generate_group, write_families  # noqa: E402
from spacetools.kit.loading import load_processor, load_vlm  # noqa: E402
from spacetools.toolshed.shed import Toolshed  # noqa: E402
from spacetools.toolshed.toolsets import with_profile  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402

PROMPT = (
    'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, answer as <answer>...</answer>.\n'
    'Example: <tool_call>{"name": "roborefer.detect_one", "arguments": {"obj_name": "red mug", '
    '"image_index": 0}}</tool_call>\nTools: {tools}'
)


async def group(
    policy: HFPolicy, tools: Toolshed, inputs: list[Any], config: RolloutConfig
) -> dict[str, Any]:
    policy.forget()
    policy.reset_stats()
    started = time.perf_counter()
    trajectories = await run_episodes(policy, tools, inputs, config=config)
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


async def main(group_size: int, repeats: int, max_new_tokens: int) -> dict[str, Any]:
    folder = get_base_model("smollm2-135m")
    processor = load_processor(folder)
    model = load_vlm(folder, dtype="float32")
    with tempfile.TemporaryDirectory() as data:
        write_families(Path(data), {"reflocation": generate_group(0, "reflocation", 0, 1)})
        (task_id, sample), *_ = load_samples(Path(data)).items()
    inputs = [episode_input(sample, f"{task_id}#{k}") for k in range(group_size)]
    config = RolloutConfig(
        max_turns=3, system_prompt=PROMPT, concurrency=group_size, feedback_on_no_answer=True
    )
    policies = {
        "serial": HFPolicy(
            model, processor, temperature=1.0, max_new_tokens=max_new_tokens, batch_size=1, record=True
        ),
        "batched": HFPolicy(
            model,
            processor,
            temperature=1.0,
            max_new_tokens=max_new_tokens,
            batch_size=group_size,
            record=True,
        ),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in policies}
    load_before = os.getloadavg()[0]
    async with Toolshed(with_profile("v1", "exact"), seed=0) as tools:
        await group(policies["batched"], tools, inputs[:1], config)  # warm-up
        for _ in range(repeats):
            for name, policy in policies.items():
                runs[name].append(await group(policy, tools, inputs, config))
    serial, batched = (
        statistics.median(run["wall_s"] for run in runs[name]) for name in ("serial", "batched")
    )
    return {
        "group_size": group_size,
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
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.group, args.repeats, args.max_new_tokens)), indent=2))
