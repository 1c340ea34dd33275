"""One greedy batch of 16 rows (32 new tokens each) on SmolLM2-135M: the hf path's `generate_rows`
against `CT2Engine` (float32, int8_float32, and float32 without the shared prefix as ``static_prompt``),
with prompts of equal length (a 260-token shared prefix and one token of their own) and ragged ones
(the same prefix and 1 to 151 tokens of their own), one call each, in one process.

    python benchmarks/ct2_prompt_shapes.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).parents[1] / "src")]

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from spacetools.agent.policies.ct2 import CT2Engine  # noqa: E402
from spacetools.agent.policies.generation import Row, generate_rows, generation_config  # noqa: E402
from spacetools.train.base_models import get_base_model  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    folder = get_base_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    base = tokenizer.encode("You answer questions about images with tools. " * 40)[:300]
    shapes = {
        "equal": [Row([*base[:260], 100 + i], [], i, 32) for i in range(16)],
        "ragged": [Row([*base[: 260 + 10 * i], 100 + i], [], i, 32) for i in range(16)],
    }
    config = generation_config(model, tokenizer, 32, neutral=True)
    engines = {
        compute_type: CT2Engine(
            model, tokenizer, temperature=0.0, ends=[], compute_type=compute_type, threads=2
        )
        for compute_type in ("float32", "int8_float32")
    }
    engines["float32-noprefix"] = CT2Engine(
        model, tokenizer, temperature=0.0, ends=[], compute_type="float32", threads=2, min_static_prompt=10**9
    )
    for name, rows in shapes.items():
        started = time.perf_counter()
        generate_rows(model, rows, config, temperature=0.0, blocked=[], ends=set())
        figures = [f"hf {time.perf_counter() - started:.1f}s"]
        for engine_name, engine in engines.items():
            started = time.perf_counter()
            engine.generate(rows)
            figures.append(f"{engine_name} {time.perf_counter() - started:.1f}s")
        print(name, *figures, flush=True)


if __name__ == "__main__":
    main()
