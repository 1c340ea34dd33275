"""Evaluation generation with the `hf` policy: 16 first turns answered concurrently, greedy, two checkouts.

`measure` loads the hf policy from one checkout's sources (`--src`, first on sys.path; this checkout's
`src` by default) on a model folder, builds `--episodes` first-turn episode states (the SmolLM2 recipe's
system prompt and one question each, from a parquet file or folder of the evaluation data, else built-in
questions) and times `act` on all of them at once for each batch size, after a two-episode warm-up: wall
and CPU seconds (the process's, all threads), new tokens (the returned texts re-tokenised, so both
checkouts count alike) and tokens per second, as JSON with the texts. It works with the policy's API
before and after the policy moved to `generation.py` (`HFPolicy(model_path=...)` then,
`load_hf_policy(path)` now).

`compare` runs `measure` in subprocesses, alternating the old checkout's sources and this one's (old, new,
old, new…), so both see the same load; it reports the median of the rounds' new/old ratios of wall and
of CPU seconds per batch size, and whether both wrote the same texts (each run is also written to stderr
as one JSON line when it ends). On a shared machine `--threads 1` keeps torch's threads from spinning at
their barriers while the other thread waits for a core.

    python benchmarks/hf_policy_speed.py measure MODEL [--src SRC] [--data PARQUET] [--batch-sizes 8 16]
    python benchmarks/hf_policy_speed.py compare MODEL --old-src OLD_SRC [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
RECIPE = CHECKOUT / "configs" / "dirl-smollm2.yaml"
QUESTIONS = [
    f"Is the {a} {relation} the {b}? Answer yes or no."
    for a, b in [("red mug", "blue bowl"), ("green box", "yellow ball"), ("white cup", "black plate")]
    for relation in ("left of", "right of", "in front of", "behind", "closer to the camera than")
] + ["Please point out the large blue ball left of the red box."]


def questions_from(data: Path | None, count: int) -> list[str]:
    """`count` questions (cycled) of the parquet file or folder, taking its files in turn so every family
    is asked, or the built-in ones."""
    if data is None:
        found = QUESTIONS
    else:
        import pyarrow.parquet as pq

        files = [data] if data.is_file() else sorted(data.glob("*.parquet"))
        per_file = []
        for file in files:
            prompts = pq.read_table(file, columns=["prompt"]).column("prompt").to_pylist()
            users = [[m["content"] for m in prompt if m["role"] == "user"][-1] for prompt in prompts]
            per_file.append([text.replace("<image>", "").strip() for text in users])
        found = [question for row in itertools.zip_longest(*per_file) for question in row if question]
        if not found:
            raise SystemExit(f"no questions in {data}")
    return [found[k % len(found)] for k in range(count)]


def system_prompt() -> str:
    import yaml

    return str(yaml.safe_load(RECIPE.read_text())["rollout"]["system_prompt"])


def load_policy(model: Path, max_new_tokens: int, batch_size: int) -> Any:
    """The hf policy through whichever API this checkout has, greedy (both default to temperature 0)."""
    from spacetools.agent.policies import hf

    if hasattr(hf, "load_hf_policy"):
        return hf.load_hf_policy(str(model), max_new_tokens=max_new_tokens, batch_size=batch_size)
    loads_itself: Any = hf.HFPolicy  # before the move, the policy took a model folder itself
    return loads_itself(model_path=str(model), max_new_tokens=max_new_tokens, batch_size=batch_size)


async def answer_all(policy: Any, states: list[Any]) -> list[str]:
    try:
        return list(await asyncio.gather(*(policy.act(state) for state in states)))
    finally:
        await policy.aclose()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sys.path[:0] = [str(args.src)]
    import numpy as np
    import torch

    import spacetools
    from spacetools.agent.protocol import build_system_prompt, build_user_message
    from spacetools.agent.types import EpisodeState, Task

    image = np.full((56, 56, 3), 120, np.uint8)  # a text-only model reads "[image 0]"; only tools see pixels
    prompt = build_system_prompt([], system_prompt())
    questions = questions_from(args.data, args.episodes)

    def first_turns() -> list[Any]:
        states = []
        for k, question in enumerate(questions):
            task = Task(id=f"q#{k}", data_source="spatialsim_reflocation", question=question, images=[image])
            messages = [{"role": "system", "content": prompt}, build_user_message(question, 1)]
            states.append(EpisodeState(task=task, messages=messages, images=[image], turn=0, tool_specs=[]))
        return states

    result: dict[str, Any] = {
        "spacetools": str(Path(spacetools.__file__).parent),
        "load_before": os.getloadavg()[0],
    }
    if args.threads:
        torch.set_num_threads(args.threads)
    for batch_size in args.batch_sizes:
        policy = load_policy(args.model, args.max_new_tokens, batch_size)
        tokenizer = policy.tokenizer
        asyncio.run(answer_all(policy, first_turns()[:2]))  # warm-up: the first generate's one-time costs
        started, started_cpu = time.perf_counter(), time.process_time()
        texts = asyncio.run(answer_all(policy, first_turns()))
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
        tokens = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)
        result[f"batch_{batch_size}"] = {
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "new_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1),
            "texts": texts,
        }
    result["threads"] = torch.get_num_threads()
    result["load_after"] = os.getloadavg()[0]
    return result


def compare(args: argparse.Namespace) -> dict[str, Any]:
    sources = {"old": args.old_src.resolve(), "new": (CHECKOUT / "src").resolve()}
    shared = [str(args.model), "--episodes", str(args.episodes), "--max-new-tokens", str(args.max_new_tokens)]
    shared += ["--batch-sizes", *map(str, args.batch_sizes), "--threads", str(args.threads)]
    shared += ["--data", str(args.data)] if args.data else []
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, src in sources.items():
            command = [sys.executable, __file__, "measure", *shared, "--src", str(src)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{name}: measure failed:\n{done.stderr[-4000:]}")
            run = json.loads(done.stdout)
            if Path(run["spacetools"]) != src / "spacetools":
                raise SystemExit(f"{name}: imported spacetools from {run['spacetools']}, not {src}")
            runs[name].append(run)
            # Each run as it ends, whole: what a comparison stopped on a busy machine has measured.
            print(json.dumps({"checkout": name, **run}), file=sys.stderr, flush=True)
    report: dict[str, Any] = {
        "model": str(args.model),
        "episodes": args.episodes,
        "max_new_tokens": args.max_new_tokens,
        "threads": runs["new"][0]["threads"],
        "rounds": args.rounds,
        "loads_old_new": [
            [round(run["load_before"], 2) for run in pair] for pair in zip(*runs.values(), strict=True)
        ],
    }
    for batch_size in args.batch_sizes:
        key = f"batch_{batch_size}"
        old, new = ([run[key] for run in runs[name]] for name in ("old", "new"))
        differing = [
            k for k, (a, b) in enumerate(zip(old[0]["texts"], new[0]["texts"], strict=True)) if a != b
        ]
        report[key] = {
            "new_tokens_old_new": [old[0]["new_tokens"], new[0]["new_tokens"]],
            **{
                f"{name}_{measure}": [run[measure] for run in timed]
                for name, timed in (("old", old), ("new", new))
                for measure in ("seconds", "cpu_seconds")
            },
            **{
                f"median_ratio_new_old_{measure}": round(
                    statistics.median(n[measure] / o[measure] for o, n in zip(old, new, strict=True)), 3
                )
                for measure in ("seconds", "cpu_seconds")
            },
            "same_texts_old_new": not differing,
            "differing": {k: [old[0]["texts"][k], new[0]["texts"][k]] for k in differing},
            "texts_stable_over_rounds": all(r["texts"] == old[0]["texts"] for r in old)
            and all(r["texts"] == new[0]["texts"] for r in new),
        }
    batches = [f"batch_{b}" for b in args.batch_sizes]
    report["same_texts_across_batch_sizes"] = {
        name: all(runs[name][0][k]["texts"] == runs[name][0][batches[0]]["texts"] for k in batches)
        for name in runs
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("measure", "compare"):
        command = commands.add_parser(name)
        command.add_argument("model", type=Path, help="a model folder the hf policy loads")
        command.add_argument("--data", type=Path, help="a parquet file or folder of evaluation data")
        command.add_argument("--episodes", type=int, default=16)
        command.add_argument("--max-new-tokens", type=int, default=64)
        command.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16])
        command.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    commands.choices["measure"].add_argument("--src", type=Path, default=CHECKOUT / "src")
    commands.choices["compare"].add_argument("--old-src", type=Path, required=True)
    commands.choices["compare"].add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args) if args.command == "measure" else compare(args), indent=2))


if __name__ == "__main__":
    main()
