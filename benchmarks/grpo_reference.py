"""SmolLM2-135M-Instruct on the CPU, `trainable: last_layers:4`: the GRPO update's KL reference pass on one
512-token episode, as a second full model (before issue 31) and as `LastLayersReference` (the starting
weights of the 4 trained layers on the hidden states the policy's own forward passes to them).

Run: `python benchmarks/grpo_reference.py` (converts the model on first use: `spacetools models get`).
Both are measured side by side in one process, alternating, so their ratio holds on a loaded machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from smollm2_steps import synthetic_example  # noqa: E402 (a sibling script: benchmarks/ is on the path)
from spacetools.kit.loading import load_vlm  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402
from spacetools.train.episodes import forward_logprobs, logprobs_from_hidden  # noqa: E402
from spacetools.train.reference import LastLayersReference  # noqa: E402

TOKENS, ROUNDS, TRAINED = 512, 5, 4


def main() -> None:
    folder = get_base_model("smollm2-135m")
    example = synthetic_example(TOKENS)
    policy = load_vlm(folder, dtype=torch.float32, trainable=f"last_layers:{TRAINED}")
    full = load_vlm(folder, dtype=torch.float32)
    shared = LastLayersReference(policy, policy, TRAINED)
    times: dict[str, list[float]] = {"second_model_s": [], "shared_layers_s": []}
    for _ in range(ROUNDS + 1):  # the first round warms up
        with shared.capture():
            forward_logprobs(policy, example, "cpu")  # the policy's own pass, which the update runs anyway
        started = time.perf_counter()
        with torch.no_grad():
            reference = logprobs_from_hidden(shared.hidden(), shared.head, example.ids, example.mask)
        times["shared_layers_s"].append(time.perf_counter() - started)
        started = time.perf_counter()
        with torch.no_grad():
            second = forward_logprobs(full, example, "cpu")
        times["second_model_s"].append(time.perf_counter() - started)
        assert torch.allclose(reference, second, atol=1e-4)  # the same reference
    result = {name: round(min(values[1:]), 4) for name, values in times.items()}
    result["speedup"] = round(result["second_model_s"] / result["shared_layers_s"], 2)
    result["load"] = round(os.getloadavg()[0], 2)
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
