"""Stage 2 of DIRL: multi-turn GRPO with live tools, readable top to bottom.

Per step: take `prompts_per_step` questions, run `group_size` episodes of each through the project's own
rollout against a Toolshed (tools live, in-process or a remote server), reward each episode with what the
evaluation measures (`train.sampling.measured_reward`), optionally drop groups of equal rewards for fresh
prompts (DAPO's dynamic sampling), centre rewards within each group (Dr. GRPO; `scale_rewards` divides by
the std), and take one clipped policy-gradient step on the model's own tokens, with a KL penalty to the
starting (SFT) model. The trainer never sees tool internals and touches only what the rollout returns:
each trajectory's token-exact episode (`Trajectory.tokens`: ids, mask, sampling log-probabilities, pixels;
a step's episodes generated together, in batches), its score and its sampling figures. A step's sampling
seed goes in with the rollout call.

Shapes: `B = prompts_per_step * group_size` episodes per step, each `(1, T_i)` tokens (processed one at a
time, so no padding); `rewards (B,)`, `advantages (B,)`; `logp`, `old_logp`, `ref_logp`, `mask (1, T_i)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    CHECKPOINT_DIR,
    METRICS_FILE,
    MODEL_DIR,
    load_checkpoint,
    publish_model,
    save_checkpoint,
    step_batches,
    truncate_metrics,
)
from spacetools.train.config import GRPOConfig, record_config
from spacetools.train.episodes import Example, forward_logprobs, logprobs_from_hidden, sampled_example
from spacetools.train.objectives import group_advantages, grpo_loss
from spacetools.train.reference import LastLayersReference
from spacetools.train.sampling import (
    ZeroRewardWatch,
    cut_turns,
    gather_useful_groups,
    measured_reward,
    placebo_rewards,
)

logger = logging.getLogger(__name__)
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


def load_reference(config: GRPOConfig, policy: Any, *, resumed: bool) -> Any:
    """The frozen starting model of the KL penalty, as little of it as needs holding: None with LoRA (the
    reference is the policy with its adapter disabled, as TRL does); with `last_layers:k` the starting
    weights of those layers alone, run on the policy's own frozen hidden states (`LastLayersReference`);
    else the whole starting model (an adapter merged into its base)."""
    if config.trainable == "lora":
        return None
    if config.trainable.startswith("last_layers:"):
        count = int(config.trainable.partition(":")[2])
        source = load_vlm(config.model, device=config.device, dtype=config.dtype) if resumed else policy
        return LastLayersReference(policy, source, count)
    return load_vlm(config.model, device=config.device, dtype=config.dtype)


def reference_logprobs(
    model: Any, reference: Any, example: Example, config: GRPOConfig, blocked: list[int] | None
) -> torch.Tensor | None:
    """`(1, T)` log-probabilities of the episode under the KL reference, or None without a KL term.
    A `LastLayersReference` reads the policy forward that `policy_logprobs` just ran."""
    if config.kl_coef <= 0:
        return None
    if isinstance(reference, LastLayersReference):
        ids = example.ids.to(config.device)
        with torch.no_grad():
            return logprobs_from_hidden(
                reference.hidden(), reference.head, ids, example.mask, blocked, temperature=config.temperature
            )
    adapter_off = model.disable_adapter() if reference is None else contextlib.nullcontext()
    with torch.no_grad(), adapter_off:
        return forward_logprobs(
            model if reference is None else reference,
            example,
            config.device,
            blocked,
            temperature=config.temperature,
        )


def policy_logprobs(
    model: Any, reference: Any, example: Example, config: GRPOConfig, blocked: list[int] | None
) -> torch.Tensor:
    """`(1, T)` log-probabilities of the episode under the policy (with gradients); a `LastLayersReference`
    keeps the hidden states entering the trained layers, for the reference's own last layers."""
    capture = reference.capture() if isinstance(reference, LastLayersReference) else contextlib.nullcontext()
    with capture:
        return forward_logprobs(model, example, config.device, blocked, temperature=config.temperature)


def stop_token_ids(model: Any, processor: Any) -> list[int]:
    """The token ids that end a turn: the tokenizer's end token and the model's generation end tokens."""
    ids = {processor.tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return sorted(i for i in ids if i is not None)


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


@dataclass
class Update:
    """What one policy-gradient step did, token-weighted over the batch."""

    policy_loss: float = 0.0
    kl: float = 0.0
    clip_fraction: float = 0.0
    ratio_drift: float = 0.0  # max |log ratio| before the update (0 when on-policy)
    grad_norm: float = 0.0
    tokens: int = 0


def policy_update(
    model: Any,
    reference: Any,
    optimizer: torch.optim.Optimizer,
    trainable: list[torch.nn.Parameter],
    examples: list[Example],
    advantages: torch.Tensor,
    config: GRPOConfig,
    blocked: list[int] | None,
) -> Update:
    """One clipped policy-gradient step, token-mean over the batch, one episode `(1, T)` at a time."""
    model.train()
    done = Update(tokens=sum(int(e.mask.sum()) for e in examples))
    for example, advantage in zip(examples, advantages, strict=True):
        mask = example.mask.unsqueeze(0).to(config.device)  # (1, T)
        logp = policy_logprobs(model, reference, example, config, blocked)
        assert example.logprobs is not None
        old_logp = example.logprobs.unsqueeze(0).to(config.device)  # (1, T)
        ref_logp = reference_logprobs(model, reference, example, config, blocked)
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
        done.ratio_drift = max(done.ratio_drift, float(((logp.detach() - old_logp).abs() * mask).max()))
        weight = int(mask.sum()) / max(done.tokens, 1)
        (out.loss * weight).backward()
        done.kl += out.kl * weight
        done.clip_fraction += out.clip_fraction * weight
        done.policy_loss += out.policy_loss * weight
    done.grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return done


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
    reference = load_reference(config, model, resumed=bool(state)) if config.kl_coef > 0 else None
    trainable = trainable_parameters(model)
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=0.0)
    start_step, stopped = 0, None
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        start_step, stopped = state["step"], state.get("stopped")
    metrics_path = config.out / METRICS_FILE
    kept_rows = truncate_metrics(metrics_path, start_step)
    watch = ZeroRewardWatch(config.zero_reward_patience)
    watch.streak = int(kept_rows[-1].get("zero_reward_streak", 0)) if kept_rows else 0
    stops = stop_token_ids(model, processor)
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

        async def collect(indices: list[int], round_: int) -> tuple[list[Trajectory], list[float]]:
            """n episodes of each prompt with live tools, and their measured rewards."""
            tag = "" if round_ == 0 else f"{round_}."  # a prompt drawn again in a later round is a new task
            inputs = [
                episode_input(
                    samples[i][1], f"{samples[i][0]}#{tag}{g}.{k}" if tag else f"{samples[i][0]}#{k}"
                )
                for g, i in enumerate(indices)
                for k in range(n)
            ]
            trajectories = await run_episodes(
                policy, provider, inputs, config=config.rollout, sampling_seed=step_seed
            )
            return trajectories, [measured_reward(t.score, config.nndc_weight) for t in trajectories]

        with metrics_path.open("a", encoding="utf-8") as metrics:
            total = start_step if stopped else config.steps
            batches = step_batches(config.seed, len(samples), config.prompts_per_step, start_step, total)
            for step, indices in enumerate(batches, start_step):
                # 1. Generate: n episodes per prompt with live tools (the sampling RNG is part of the checkpoint);
                # with dynamic sampling, groups of equal rewards are replaced by fresh prompts.
                started = time.perf_counter()
                model.eval()
                step_seed = config.seed * 1_000_003 + step
                gathered = await gather_useful_groups(
                    collect,
                    indices,
                    len(samples),
                    n,
                    rng=np.random.default_rng([config.seed, step]),
                    dynamic=config.dynamic_sampling,
                    max_rounds=config.max_sampling_rounds,
                )
                trajectories = gathered.episodes
                sampling = sampling_stats(gathered.seen_episodes)
                generated = time.perf_counter()

                # 2. Reward and advantages: rewards (B,) -> advantages (B,), centred within each group.
                rewards = torch.tensor(gathered.rewards, dtype=torch.float32)
                trained_on = rewards
                if config.placebo:
                    placebo = torch.Generator().manual_seed(step_seed)
                    trained_on = placebo_rewards(rewards, placebo)
                advantages = group_advantages(trained_on, n, scale=config.scale_rewards)

                # 3. One policy-gradient step on the model's own tokens.
                examples = [sampled_example(t) for t in trajectories]
                blocked = next((list(t.tokens.blocked) for t in trajectories if t.tokens), [])
                update = policy_update(
                    model, reference, optimizer, trainable, examples, advantages, config, blocked
                )
                policy.refresh()  # the engine drops what the old weights computed
                updated = time.perf_counter()
                if watch.update(gathered.seen_rewards) and step + 1 < config.steps:
                    stopped = f"only zero rewards for {watch.streak} steps: stopped after step {step + 1}"
                    logger.warning("[%s] %s", config.out.name, stopped)

                row = {
                    "stage": "grpo",
                    "step": step + 1,
                    # Reward and episode figures over every sampled episode (the kept groups are biased).
                    **step_metrics(gathered.seen_episodes, torch.tensor(gathered.seen_rewards), n),
                    "trained_reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
                    "zero_variance_fraction": gathered.dropped_fraction,
                    "sampling_rounds": gathered.rounds,
                    "groups_trained": len(trajectories) // n,
                    "zero_reward_streak": watch.streak,
                    "response_tokens": update.tokens / max(len(examples), 1),
                    "turns_cut": sum(cut_turns(e.ids, e.mask, stops) for e in examples),
                    "policy_loss": update.policy_loss,
                    "kl": update.kl,
                    "entropy": sampling["entropy"],
                    "clip_fraction": update.clip_fraction,
                    "ratio_drift": update.ratio_drift,
                    "grad_norm": update.grad_norm,
                    "model_tokens": update.tokens,
                    "generation_s": generated - started,
                    "update_s": updated - generated,
                    **throughput(
                        len(trajectories),
                        update.tokens,
                        generated - started,
                        updated - started,
                        sampling["generate_s"],
                    ),
                    **({"stopped": stopped} if stopped else {}),
                }
                metrics.write(json.dumps(row) + "\n")
                metrics.flush()
                if progress is not None:
                    progress(step + 1, config.steps, row)
                if stopped or (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
                    trainer_state = {"optimizer": optimizer.state_dict(), "step": step + 1}
                    save_checkpoint(
                        checkpoint,
                        model,
                        processor,
                        {**trainer_state, **({"stopped": stopped} if stopped else {})},
                    )
                if stopped:
                    break
    return publish_model(checkpoint, config.out)


def train_grpo(config: GRPOConfig, *, resume: bool = True, progress: Progress | None = None) -> Path:
    """`train_grpo_async` with the Toolshed the config describes."""
    return asyncio.run(train_grpo_async(config, resume=resume, progress=progress))
