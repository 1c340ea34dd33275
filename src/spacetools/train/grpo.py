"""Stage 2 of DIRL: multi-turn GRPO with live tools, readable top to bottom.

Per step: take `prompts_per_step` questions, run `group_size` episodes of each through the project's own
rollout against a Toolshed (tools live, in-process or a remote server), reward each episode with
`compute_score`, normalise rewards within each group, and take one clipped policy-gradient step on the
model's own tokens, with a KL penalty to the starting (SFT) model. The trainer never sees tool internals
and touches only what the rollout returns: each trajectory's token-exact episode (`Trajectory.tokens`:
ids, mask, sampling log-probabilities, pixels; a step's episodes generated together, in batches), its
score and its sampling figures. A step's sampling seed goes in with the rollout call.

Shapes: `B = prompts_per_step * group_size` episodes per step, each `(1, T_i)` tokens (processed one at a
time, so no padding); `rewards (B,)`, `advantages (B,)`; `logp`, `old_logp`, `ref_logp`, `mask (1, T_i)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spacetools.agent.policies.hf import HFPolicy
from spacetools.agent.rollout import run_episodes
from spacetools.agent.types import Trajectory
from spacetools.bench.dataset import episode_input, load_samples
from spacetools.bench.runlock import run_folder_lock
from spacetools.kit.loading import load_processor, load_vlm
from spacetools.kit.trainable import trainable_parameters
from spacetools.toolshed import ToolProvider, connect
from spacetools.train.checkpoint import (
    METRICS_FILE,
    MODEL_DIR,
    load_checkpoint,
    publish_model,
    save_checkpoint,
    step_batches,
    truncate_metrics,
)
from spacetools.train.config import GRPOConfig, record_config
from spacetools.train.episodes import forward_logprobs, sampled_example
from spacetools.train.objectives import group_advantages, grpo_loss

CHECKPOINT_DIR = "checkpoint"
Progress = Callable[[int, int, dict[str, Any]], None]


def load_policy_model(path: Path, config: GRPOConfig, *, resume: bool) -> Any:
    """The model GRPO trains, with the weights `config.trainable` names requiring gradients.

    `resume`: `path` is the run's own checkpoint, whose adapter (with `lora`) keeps training.
    """
    return load_vlm(
        path,
        device=config.device,
        dtype=config.dtype,
        trainable=config.trainable,
        lora=None if resume else config.lora,
        gradient_checkpointing=config.gradient_checkpointing,
    )


def load_reference(config: GRPOConfig) -> Any:
    """The frozen starting model of the KL penalty (an adapter merged into its base)."""
    return load_vlm(config.model, device=config.device, dtype=config.dtype)


def step_metrics(trajectories: list[Trajectory], rewards: torch.Tensor, group_size: int) -> dict[str, Any]:
    """What a researcher watches per step: reward mean and spread, tool use, and how episodes ended."""
    calls = [len(t.tool_calls) for t in trajectories]
    invalid = sum(int(t.stats.get("invalid_turns", 0)) for t in trajectories)
    turns = sum(t.turns for t in trajectories)
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "reward_group_std": float(rewards.view(-1, group_size).std(dim=1).mean()),
        "rewards": [float(reward) for reward in rewards],  # per episode, grouped by prompt
        "group_size": group_size,
        "calls_per_episode": float(np.mean(calls)),
        "valid_turn_rate": 1.0 - invalid / max(turns, 1),
        "answered_rate": float(np.mean([t.answer is not None for t in trajectories])),
        "tool_time_s": float(sum(c.latency_s for t in trajectories for c in t.tool_calls)),
    }


def sampling_stats(trajectories: list[Trajectory]) -> dict[str, float]:
    """The model's share of a step's rollout and the mean entropy per sampled token, from the episodes."""
    tokens = sum(int(t.stats.get("model_tokens", 0)) for t in trajectories)
    entropy = sum(float(t.stats.get("sampled_entropy", 0.0)) for t in trajectories)
    return {
        "generate_s": sum(float(t.stats.get("generate_s", 0.0)) for t in trajectories),
        "entropy": entropy / tokens if tokens else 0.0,
    }


def throughput(
    episodes: int, tokens: int, generation_s: float, step_s: float, busy_s: float
) -> dict[str, float]:
    """Episodes and model tokens per second of a step, and the share of the step the model sat waiting
    on tools (generation time in which the model was not generating: episodes run concurrently)."""
    return {
        "episodes_per_s": episodes / step_s if step_s > 0 else 0.0,
        "tokens_per_s": tokens / generation_s if generation_s > 0 else 0.0,
        "tool_wait_fraction": min(max(generation_s - busy_s, 0.0) / step_s, 1.0) if step_s > 0 else 0.0,
    }


async def train_grpo_async(
    config: GRPOConfig,
    *,
    resume: bool = True,
    progress: Progress | None = None,
    tools: ToolProvider | None = None,
) -> Path:
    """Run (or continue) GRPO; returns the folder of the trained model (`<out>/model`).

    `tools`: a started Toolshed (or client) to call instead of the one the config describes.
    """
    with run_folder_lock(config.out):  # one writer per run folder
        return await _train_grpo(config, resume=resume, progress=progress, tools=tools)


async def _train_grpo(
    config: GRPOConfig, *, resume: bool, progress: Progress | None, tools: ToolProvider | None
) -> Path:
    record_config(config, config.out, resume=resume)
    torch.manual_seed(config.seed)
    samples = list(load_samples(config.data, config.benches, config.limit).items())
    processor = load_processor(config.model)
    checkpoint = config.out / CHECKPOINT_DIR
    state = load_checkpoint(checkpoint, config.steps) if resume else None
    model = load_policy_model(checkpoint / MODEL_DIR if state else config.model, config, resume=bool(state))
    reference = load_reference(config) if config.kl_coef > 0 else None
    trainable = trainable_parameters(model)
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=0.0)
    start_step = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        start_step = state["step"]
    metrics_path = config.out / METRICS_FILE
    truncate_metrics(metrics_path, start_step)
    # The turn and episode token limits reach the policy through the rollout (`EpisodeState.max_new_tokens`).
    policy = HFPolicy(
        model,
        processor,
        name=f"hf:{config.model.name}",
        temperature=config.temperature,
        batch_size=config.generation_batch_size,
        record=True,
    )
    n = config.group_size

    async with contextlib.AsyncExitStack() as stack:
        provider = tools if tools is not None else await stack.enter_async_context(connect(config.tools))
        stack.push_async_callback(policy.aclose)  # its batching task ends with this event loop's work
        with metrics_path.open("a", encoding="utf-8") as metrics:
            batches = step_batches(
                config.seed, len(samples), config.prompts_per_step, start_step, config.steps
            )
            for step, indices in enumerate(batches, start_step):
                # 1. Generate: n episodes per prompt with live tools (the sampling RNG is part of the checkpoint).
                started = time.perf_counter()
                inputs = [
                    episode_input(samples[i][1], f"{samples[i][0]}#{k}") for i in indices for k in range(n)
                ]
                model.eval()
                trajectories = await run_episodes(
                    policy,
                    provider,
                    inputs,
                    config=config.rollout,
                    sampling_seed=config.seed * 1_000_003 + step,
                )
                sampling = sampling_stats(trajectories)
                generated = time.perf_counter()

                # 2. Reward and advantages: rewards (B,) -> advantages (B,), normalised within each group.
                rewards = torch.tensor([float((t.score or {}).get("score", 0.0)) for t in trajectories])
                advantages = group_advantages(rewards, n, scale=config.scale_rewards)

                # 3. One policy-gradient step, token-mean over the batch, one episode at a time.
                model.train()
                examples = [sampled_example(t) for t in trajectories]
                blocked = [list(t.tokens.blocked) if t.tokens else [] for t in trajectories]
                tokens = sum(int(e.mask.sum()) for e in examples)
                kl = clip = policy_loss = drift = 0.0
                for example, advantage, suppressed in zip(examples, advantages, blocked, strict=True):
                    mask = example.mask.unsqueeze(0).to(config.device)  # (1, T)
                    logp = forward_logprobs(
                        model, example, config.device, suppressed, temperature=config.temperature
                    )  # (1, T)
                    assert example.logprobs is not None
                    old_logp = example.logprobs.unsqueeze(0).to(config.device)  # (1, T)
                    ref_logp = None
                    if reference is not None:
                        with torch.no_grad():
                            ref_logp = forward_logprobs(
                                reference,
                                example,
                                config.device,
                                suppressed,
                                temperature=config.temperature,
                            )  # (1, T)
                    out = grpo_loss(
                        logp,
                        old_logp,
                        ref_logp,
                        advantage.view(1),
                        mask,
                        clip_eps=config.clip_eps,
                        kl_coef=config.kl_coef,
                    )
                    # Every episode is scored before the update: the ratio must be 1 (sampled and scored alike).
                    drift = max(drift, float(((logp.detach() - old_logp).abs() * mask).max()))
                    weight = int(mask.sum()) / max(tokens, 1)
                    (out.loss * weight).backward()
                    kl += out.kl * weight
                    clip += out.clip_fraction * weight
                    policy_loss += out.policy_loss * weight
                grad_norm = torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                policy.refresh()  # the engine drops what the old weights computed
                updated = time.perf_counter()

                row = {
                    "stage": "grpo",
                    "step": step + 1,
                    **step_metrics(trajectories, rewards, n),
                    "policy_loss": policy_loss,
                    "kl": kl,
                    "entropy": sampling["entropy"],
                    "clip_fraction": clip,
                    "ratio_drift": drift,  # max |log ratio| before the update (0 when on-policy)
                    "grad_norm": float(grad_norm),
                    "model_tokens": tokens,
                    "generation_s": generated - started,
                    "update_s": updated - generated,
                    **throughput(
                        len(trajectories),
                        tokens,
                        generated - started,
                        updated - started,
                        sampling["generate_s"],
                    ),
                }
                metrics.write(json.dumps(row) + "\n")
                metrics.flush()
                if progress is not None:
                    progress(step + 1, config.steps, row)
                if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
                    save_checkpoint(
                        checkpoint, model, processor, {"optimizer": optimizer.state_dict(), "step": step + 1}
                    )
    return publish_model(checkpoint, config.out)


def train_grpo(config: GRPOConfig, *, resume: bool = True, progress: Progress | None = None) -> Path:
    """`train_grpo_async` with the Toolshed the config describes."""
    return asyncio.run(train_grpo_async(config, resume=resume, progress=progress))
