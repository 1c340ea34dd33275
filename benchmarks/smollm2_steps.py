"""SmolLM2-135M-Instruct on the CPU: one SFT step (forward + backward of one 512-token episode) per
`trainable` setting, and one GRPO scoring pass (chunked log-probabilities on the model's tokens).

Run: `python benchmarks/smollm2_steps.py` (converts the model on first use: `spacetools models get`).
Settings are measured side by side in one process, so their ratios hold on a loaded machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from spacetools.kit.loading import load_vlm  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402
from spacetools.train.config import LoraSettings  # noqa: E402
from spacetools.train.episodes import Example, forward_logprobs  # noqa: E402

TOKENS = 512


def synthetic_example(tokens: int) -> Example:
    """`tokens` random ids (seed 0), the second half marked as the model's own turns."""
    torch.manual_seed(0)
    ids = torch.randint(100, 40000, (tokens,))
    mask = torch.zeros(tokens, dtype=torch.long)
    mask[tokens // 2 :] = 1
    return Example(ids, mask)


def main() -> None:
    folder = get_base_model("smollm2-135m")
    example = synthetic_example(TOKENS)
    results: dict[str, float] = {"threads": torch.get_num_threads(), "load": os.getloadavg()[0]}
    for trainable in ("full", "last_layers:4", "lora"):
        model = load_vlm(folder, dtype=torch.float32, trainable=trainable, lora=LoraSettings())
        model.train()
        forward_logprobs(model, example, "cpu").sum().backward()  # warm-up
        started = time.perf_counter()
        (-(forward_logprobs(model, example, "cpu") * example.mask).sum()).backward()
        results[f"sft_step_{trainable}_s"] = round(time.perf_counter() - started, 2)
        if trainable == "full":
            with torch.no_grad():
                started = time.perf_counter()
                forward_logprobs(model, example, "cpu", temperature=0.7)
                results["grpo_scoring_no_grad_s"] = round(time.perf_counter() - started, 2)
        del model
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
