"""Rollout speed of the generation engines, side by side: episodes per second of a GRPO step's generation
and of a greedy evaluation, SmolLM2-135M-Instruct on SpatialSim questions with the DIRL recipe's settings.

The recipe (`configs/dirl-smollm2.yaml`): its short system prompt, 3 turns of up to 128 tokens, 16
episodes in flight sampled in one batch, exact tools in this process. A GRPO step is `--prompts` questions
x `--group` episodes sampled at the recipe's GRPO temperature through the recording policy the trainer
uses; an evaluation is `--eval-questions` questions decoded greedily. Engines (`--engines`):

- ``hf``: `HFPolicy` with each episode's KV cache kept across its turns, the shared system prefix
  encoded once, and each row dropped from its batch as soon as it ends (our decode loop), the reference;
- ``hf:whole``: the same, every batch through transformers' `generate`, kept whole to its longest row;
- ``hf:before``: `generate` encoding every turn's whole context again (no cache: the path when issue 31
  was filed);
- ``ct2`` / ``ct2:<compute type>``: `CT2Engine` (CTranslate2, `agent/policies/ct2.py`) behind the same
  policy, through a subclass overriding its private `_generate` (benchmark only); ``ct2:<compute
  type>:noprefix`` encodes every row whole (no shared prefix as CTranslate2's ``static_prompt``).

Engines alternate within each of `--repeats` rounds, in one process, so their ratios hold on a loaded
machine; ratios are medians against the first engine listed. Also measured for each CTranslate2 engine: the cost of a
weight refresh (what the trainer pays after each update) and the drift between the log-probabilities the
engine sampled with and those transformers recomputes on the same tokens (what the trainer recomputes and
logs): mean |Δ| and the spread of the ratio exp(Δ), Δ = recomputed − sampled, over every sampled token.

    python benchmarks/rollout_speed.py [--engines hf,ct2] [--repeats 2] [--prompts 4] [--group 4]
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

from spacetools.agent.policies.ct2 import DEFAULT_COMPUTE_TYPE, CT2Engine  # noqa: E402
from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.agent.rollout import run_episodes  # noqa: E402
from spacetools.bench.dataset import episode_input, load_samples  # noqa: E402
from spacetools.bench.spatialsim.generator import export  # noqa: E402
from spacetools.kit.loading import load_processor, load_vlm  # noqa: E402
from spacetools.toolshed import connect  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402
from spacetools.train.config import DIRLConfig, load_config  # noqa: E402
from spacetools.train.episodes import forward_logprobs, sampled_example  # noqa: E402

RECIPE = Path(__file__).parents[1] / "configs" / "dirl-smollm2.yaml"


def make_policy(engine: str, model: Any, processor: Any, *, temperature: float, batch: int) -> HFPolicy:
    settings: dict[str, Any] = {
        "temperature": temperature,
        "batch_size": batch,
        "record": temperature > 0,
        "name": engine,
    }
    if engine in ("hf", "hf:whole", "hf:before"):
        policy = HFPolicy(model, processor, kv_cache=engine != "hf:before", **settings)
        policy.engine.drop_finished_rows = engine == "hf"  # type: ignore[attr-defined]
        return policy
    kind, _, rest = engine.partition(":")
    compute_type, _, variant = rest.partition(":")
    if kind != "ct2" or variant not in ("", "noprefix"):
        raise SystemExit(
            f"unknown engine {engine!r} (hf, hf:whole, hf:before, ct2, ct2:<compute type>[:noprefix])"
        )
    reference = HFPolicy(model, processor, **settings)
    engine = CT2Engine(
        model,
        reference.tokenizer,
        temperature=temperature,
        ends=reference.engine.ends,  # type: ignore[attr-defined]
        blocked=reference.blocked,
        compute_type=compute_type or DEFAULT_COMPUTE_TYPE,
        threads=torch.get_num_threads(),
        **({} if variant != "noprefix" else {"min_static_prompt": sys.maxsize}),
    )
    return HFPolicy(model, processor, engine=engine, **settings)


async def timed_rollout(policy: HFPolicy, tools: Any, inputs: list[Any], config: Any) -> dict[str, Any]:
    policy.reset_stats()
    started = time.perf_counter()
    trajectories = await run_episodes(policy, tools, inputs, config=config)
    wall = time.perf_counter() - started
    await policy.aclose()
    stats = policy.stats()
    return {
        "episodes_per_s": len(inputs) / wall,
        "wall_s": wall,
        "generate_s": stats["generate_s"],
        "tokens": stats["new_tokens"],
        "mean_score": statistics.mean(float((t.score or {}).get("score", 0.0)) for t in trajectories),
        "trajectories": trajectories,
    }


def logprob_drift(policy: HFPolicy, trajectories: list[Any], temperature: float) -> dict[str, float]:
    """Recomputed − sampled log-probabilities of every sampled token of the returned episodes."""
    deltas = []
    with torch.no_grad():
        for trajectory in trajectories:
            example = sampled_example(trajectory)
            assert example.logprobs is not None
            recomputed = forward_logprobs(
                policy.model, example, "cpu", trajectory.tokens.blocked, temperature=temperature
            )
            mask = example.mask.bool()
            deltas.append((recomputed[0] - example.logprobs)[mask])
    delta = torch.cat(deltas).double()
    ratio = delta.exp()
    return {
        "tokens": len(delta),
        "mean_abs_delta": float(delta.abs().mean()),
        "max_abs_delta": float(delta.abs().max()),
        "ratio_std": float(ratio.std()),
        "ratio_p01": float(ratio.quantile(0.01)),
        "ratio_p99": float(ratio.quantile(0.99)),
        "ratio_min": float(ratio.min()),
        "ratio_max": float(ratio.max()),
    }


def refresh_seconds(policy: HFPolicy, times: int) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        policy.engine.refresh(policy.model)
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    recipe = load_config(DIRLConfig, RECIPE)
    rollout = recipe.rollout
    temperature = recipe.grpo.temperature
    folder = get_base_model(recipe.base_model)
    processor = load_processor(folder)
    model = load_vlm(folder, dtype="float32").eval()
    engines = args.engines.split(",")
    with tempfile.TemporaryDirectory() as data:
        export(data, args.prompts + args.eval_questions, args.seed, recipe.data.families)
        by_family: dict[str, list[tuple[str, Any]]] = {}
        for sid, sample in load_samples(data).items():
            by_family.setdefault(sample.data_source, []).append((sid, sample))
    # Families interleaved, so a step's questions and the evaluation's spread over them.
    samples = [pair for group in zip(*by_family.values(), strict=True) for pair in group]
    step_samples, eval_samples = samples[: args.prompts], samples[args.prompts :][: args.eval_questions]
    step_inputs = [
        episode_input(sample, f"{sid}#{k}") for sid, sample in step_samples for k in range(args.group)
    ]
    eval_inputs = [episode_input(sample, sid) for sid, sample in eval_samples]
    batch = rollout.concurrency
    samplers = {
        name: make_policy(name, model, processor, temperature=temperature, batch=batch) for name in engines
    }
    greedy = {name: make_policy(name, model, processor, temperature=0.0, batch=batch) for name in engines}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {"grpo": [], "eval": []} for name in engines}
    drift: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    started = time.time()
    async with connect(recipe.tools) as tools:
        for repeat in range(args.repeats):
            for name in engines:
                seeded = rollout.with_options(sampling_seed=1_000_003 * args.seed + repeat)
                step = await timed_rollout(samplers[name], tools, step_inputs, seeded)
                sampled = step.pop("trajectories")
                if repeat == 0:
                    drift[name] = logprob_drift(samplers[name], sampled, temperature)
                    print(f"drift {name}: {json.dumps(drift[name])}", file=sys.stderr, flush=True)
                runs[name]["grpo"].append(step)
                evaluated = await timed_rollout(greedy[name], tools, eval_inputs, rollout)
                evaluated.pop("trajectories")
                runs[name]["eval"].append(evaluated)
                print(
                    f"round {repeat} {name}: grpo {step['episodes_per_s']:.3f} ep/s, eval "
                    f"{runs[name]['eval'][-1]['episodes_per_s']:.3f} ep/s",
                    file=sys.stderr,
                    flush=True,
                )
    refresh = {
        name: refresh_seconds(samplers[name], args.refreshes) for name in engines if name.startswith("ct2")
    }

    def median(name: str, kind: str) -> float:
        return statistics.median(run["episodes_per_s"] for run in runs[name][kind])

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "command": "python benchmarks/rollout_speed.py " + " ".join(sys.argv[1:]),
        "threads": torch.get_num_threads(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "grpo_step": f"{args.prompts} questions x {args.group} episodes, T={temperature}",
        "evaluation": f"{len(eval_inputs)} questions, greedy",
        "rollout": {"max_turns": rollout.max_turns, "max_new_tokens": rollout.max_new_tokens, "batch": batch},
        "episodes_per_s": {
            name: {
                kind: [round(run["episodes_per_s"], 4) for run in runs[name][kind]]
                for kind in ("grpo", "eval")
            }
            for name in engines
        },
        "tokens": {
            name: {kind: [run["tokens"] for run in runs[name][kind]] for kind in ("grpo", "eval")}
            for name in engines
        },
        "mean_score": {
            name: {
                kind: [round(run["mean_score"], 3) for run in runs[name][kind]] for kind in ("grpo", "eval")
            }
            for name in engines
        },
        f"ratio_to_{engines[0]}": {
            name: {kind: round(median(name, kind) / median(engines[0], kind), 2) for kind in ("grpo", "eval")}
            for name in engines
        },
        "refresh_s": {name: round(seconds, 2) for name, seconds in refresh.items()},
        "logprob_drift": {
            name: {key: round(value, 6) for key, value in figures.items()} for name, figures in drift.items()
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines",
        default="hf:before,hf:whole,hf",
        help="comma-separated: hf, hf:nocache, ct2, ct2:<compute type>[:noprefix]",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4, help="GRPO questions per step")
    parser.add_argument("--group", type=int, default=4, help="episodes per GRPO question")
    parser.add_argument("--eval-questions", type=int, default=16)
    parser.add_argument(
        "--refreshes", type=int, default=3, help="weight refreshes timed per CTranslate2 engine"
    )
    parser.add_argument("--seed", type=int, default=900, help="SpatialSim seed of the questions")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
