"""The GPU paths, run once on one GPU (`make gpu-check`, about 10 minutes): figures go to RESULTS.md.

1. The 3B config's first SFT step and first GRPO step at the model's real shapes (Qwen2.5-VL-3B sizes,
   bf16, gradient checkpointing), on teacher traces and live tools; random weights unless
   `--model` names a local Qwen2.5-VL-3B-Instruct folder. The GRPO step is shortened (2 prompts x 5
   episodes, 256 tokens per turn, 2 turns) so it fits the time; the model and its vocabulary are real size.
2. The SmolLM2 recipe (configs/dirl-smollm2.yaml) with every stage cut to a step, on `cuda:0`.
3. The real-perception benchmark on `cuda:0`.

Run: `python benchmarks/gpu_check.py [--model /models/Qwen2.5-VL-3B-Instruct] [--out /tmp/gpu-check]`.
On a machine without CUDA it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
CONFIGS = ROOT / "configs"
DEVICE = "cuda:0"


def build_random_3b(folder: Path) -> None:
    """A Qwen2.5-VL with the 3B model's sizes and random bf16 weights, with a small trained tokenizer."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from spacetools.train.tiny import SPECIAL_TOKENS, build_tokenizer
    from tiny_qwen import CORPUS

    tokenizer: Any = build_tokenizer(CORPUS * 50, 1024)
    token_id = dict(zip(SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS), strict=True))
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": 151936,  # the real vocabulary: the logits' size is what the check is about
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "max_position_embeddings": 128000,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": True,
            "bos_token_id": token_id["<|im_start|>"],
            "eos_token_id": token_id["<|im_end|>"],
            "pad_token_id": token_id["<|endoftext|>"],
        },
        vision_config={"hidden_size": 1280, "out_hidden_size": 2048},  # the 3B vision tower (depth 32)
        image_token_id=token_id["<|image_pad|>"],
        video_token_id=token_id["<|video_pad|>"],
        vision_start_token_id=token_id["<|vision_start|>"],
        vision_end_token_id=token_id["<|vision_end|>"],
    )
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    Qwen2VLImageProcessorPil().save_pretrained(folder)


def timed(figures: dict[str, Any], name: str, work: Any) -> Any:
    import torch

    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = work()
    figures[name] = {
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }
    print(name, figures[name], flush=True)
    return result


def check_3b(model: Path | None, out: Path, figures: dict[str, Any]) -> None:
    from spacetools.bench.spatialsim.generator import export
    from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, TracesConfig, load_config
    from spacetools.train.grpo import train_grpo
    from spacetools.train.sft import train_sft
    from spacetools.train.traces import collect_traces

    recipe = load_config(DIRLConfig, CONFIGS / "dirl-qwen2.5-vl-3b.yaml")
    if model is None:
        model = out / "random-3b"
        timed(figures, "3b_random_init_and_save", lambda: build_random_3b(model))
    data = out / "data"
    export(data, 2, 100, recipe.data.families)
    traces = out / "traces.jsonl"
    collect_traces(
        TracesConfig.model_validate(
            {"data": data, "out": traces, **recipe.stage_settings(recipe.universal_teacher)}
        )
    )
    rows = traces.read_text().splitlines()[:8]
    traces.write_text("".join(row + "\n" for row in rows))
    sft = SFTConfig.model_validate(
        {
            **recipe.stage_settings(recipe.sft),
            "model": model,
            "data": traces,
            "out": out / "sft",
            "device": DEVICE,
            "epochs": 1,
        }
    )
    timed(figures, f"3b_sft_first_step ({len(rows)} episodes)", lambda: train_sft(sft, resume=False))
    shutil.rmtree(out / "sft")  # 30 GB of checkpoint (bf16 weights and AdamW state): the disk has 64
    settings = recipe.stage_settings(recipe.grpo)
    grpo = GRPOConfig.model_validate(
        {
            **settings,
            "model": model,
            "data": data,
            "out": out / "grpo",
            "device": DEVICE,
            "steps": 1,
            "prompts_per_step": 2,
            "rollout": {**settings["rollout"], "max_new_tokens": 256, "max_turns": 2},
        }
    )
    timed(
        figures, "3b_grpo_first_step (2 prompts x 5, 256 tokens/turn)", lambda: train_grpo(grpo, resume=False)
    )
    metrics = (out / "grpo" / "metrics.jsonl").read_text().splitlines()
    figures["3b_grpo_ratio_drift"] = json.loads(metrics[-1])["ratio_drift"]
    shutil.rmtree(out / "grpo")


def check_smollm2(out: Path, figures: dict[str, Any]) -> None:
    from spacetools.train.config import DIRLConfig
    from spacetools.train.dirl import run_dirl

    values = yaml.safe_load((CONFIGS / "dirl-smollm2.yaml").read_text())
    values.update(device=DEVICE, eval_limit=2, ablation=False)
    values["data"] = {**values["data"], "train_n": 4, "eval_n": 2}
    for stage in ("irl", "grpo"):
        values[stage] = {**values[stage], "steps": 1, "checkpoint_every": 1}
    values["sft"] = {**values["sft"], "epochs": 1}
    config = DIRLConfig.model_validate(values)
    timed(figures, "smollm2_recipe_one_step_per_stage", lambda: run_dirl(config, out / "smollm2"))


def check_perception(figures: dict[str, Any]) -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "real_perception.py"), "--device", DEVICE]
    result = subprocess.run(
        [*command, "--json", "--repeats", "5"], capture_output=True, text=True, check=True
    )
    figures["real_perception_cuda"] = json.loads(result.stdout)["tools"]


def write_results(figures: dict[str, Any], device_name: str) -> None:
    day = datetime.date.today().isoformat()
    lines = [
        f"\n## GPU check on {device_name} ({day})\n",
        "`make gpu-check` (benchmarks/gpu_check.py): wall time and peak GPU memory per stage.\n",
        "```json",
        json.dumps(figures, indent=2),
        "```\n",
    ]
    with (ROOT / "benchmarks" / "RESULTS.md").open("a", encoding="utf-8") as handle:
        handle.write("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a local Qwen2.5-VL-3B-Instruct folder")
    parser.add_argument("--out", type=Path, default=Path("/tmp/spacetools-gpu-check"))
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA device on this machine (torch.cuda.is_available() is False)", file=sys.stderr
        )
        sys.exit(2)
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    failures = []
    for name, check in (
        ("3b", lambda: check_3b(args.model, args.out, figures)),
        ("smollm2", lambda: check_smollm2(args.out, figures)),
        ("perception", lambda: check_perception(figures)),
    ):
        try:
            check()
        except Exception as error:  # one failing path must not hide the figures of the others
            failures.append(f"{name}: {type(error).__name__}: {error}")
            print(f"gpu-check {name} FAILED: {error}", file=sys.stderr, flush=True)
    figures["failures"] = failures
    write_results(figures, torch.cuda.get_device_name(0))
    print(json.dumps(figures, indent=2))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
