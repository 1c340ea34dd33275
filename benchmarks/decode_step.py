"""The cost of one decoding step of SmolLM2-135M-Instruct on this machine's CPU, by batch size and dtype:
what bounds a rollout once prompts are cached (each step feeds one token per row at a cached context).

Per setting: a prefill of `--context` random tokens per row, then `--steps` single-token steps timed
(median of `--repeats`), in float32 and under bfloat16 autocast. Settings run side by side in one process.

    python benchmarks/decode_step.py [--batches 1,4,16,32] [--context 500] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from spacetools.train.base_models import get_base_model  # noqa: E402


def step_seconds(model: Any, batch: int, context: int, steps: int, dtype: str) -> float:
    from transformers import DynamicCache

    ids = torch.randint(
        0, model.config.vocab_size, (batch, context), generator=torch.Generator().manual_seed(0)
    )
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.inference_mode(), autocast:
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True)
        token = ids[:, -1:]
        started = time.perf_counter()
        for _ in range(steps):
            model(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1)
        return (time.perf_counter() - started) / steps


def main(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(get_base_model("smollm2-135m"), dtype=torch.float32).eval()
    figures: dict[str, dict[str, float]] = {}
    for dtype in ("float32", "bfloat16"):
        for batch in map(int, args.batches.split(",")):
            seconds = statistics.median(
                step_seconds(model, batch, args.context, args.steps, dtype) for _ in range(args.repeats)
            )
            figures.setdefault(dtype, {})[str(batch)] = round(1000 * seconds, 1)
            print(f"{dtype} batch {batch}: {1000 * seconds:.1f} ms a step", file=sys.stderr, flush=True)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python benchmarks/decode_step.py " + " ".join(sys.argv[1:]),
        "threads": torch.get_num_threads(),
        "context": args.context,
        "ms_per_step": figures,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,4,16,32")
    parser.add_argument("--context", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    print(json.dumps(main(parser.parse_args()), indent=2))
