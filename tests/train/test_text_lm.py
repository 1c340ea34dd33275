"""A text-only causal LM (a tiny random Llama with SmolLM2's chat template) through SFT and GRPO.

The images go to the tools only: the prompt shows `[image N]` notes and says so; the trainers train all
weights, the last layers only, or a LoRA adapter, which `eval --policy hf` loads merged into its base.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.kit import imagecodec
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from tiny_qwen import build_tiny_tokenizer

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from spacetools.agent.policies.hf import HFPolicy  # noqa: E402
from spacetools.kit.loading import load_processor  # noqa: E402
from spacetools.kit.textonly import TEXT_ONLY_NOTE  # noqa: E402
from spacetools.train.config import GRPOConfig, SFTConfig  # noqa: E402
from spacetools.train.episodes import encode_episode  # noqa: E402
from spacetools.train.grpo import train_grpo_async  # noqa: E402
from spacetools.train.sft import train_sft  # noqa: E402

# SmolLM2-Instruct's template: contents are concatenated as strings, no image parts, no tool role.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CALL = '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>'


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=end,
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _episode(answer: str) -> dict[str, object]:
    return {
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {
                "role": "user",
                "content": [{"type": "image", "index": 0}, {"type": "text", "text": "How far?"}],
            },
            {"role": "assistant", "content": CALL},
            {"role": "tool", "content": "Depth range 0.65m to 1.29m"},
            {"role": "assistant", "content": f"<answer>{answer}</answer>"},
        ],
        "images": [imagecodec.to_data_url(np.full((56, 56, 3), 90, np.uint8))],
    }


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "traces.jsonl"
    path.write_text("".join(json.dumps(_episode(a)) + "\n" for a in ("(A)", "(B)", "(A)")), encoding="utf-8")
    return path


def test_a_text_model_reads_image_notes_and_is_told_that_the_tools_see_the_images(tiny_llama: Path) -> None:
    processor = load_processor(tiny_llama)
    episode = _episode("(A)")
    images = [imagecodec.decode(url) for url in episode["images"]]  # type: ignore[attr-defined]
    example = encode_episode(processor, episode["messages"], images)  # type: ignore[arg-type]
    text = processor.tokenizer.decode(example.ids.tolist())
    assert "[image 0]How far?" in text
    assert text.startswith(f"<|im_start|>system\nUse the tools.\n\n{TEXT_ONLY_NOTE}<|im_end|>")
    assert example.vision == {}
    taught = processor.tokenizer.decode(example.ids[example.mask.bool()].tolist())
    assert taught == f"{CALL}<|im_end|><answer>(A)</answer><|im_end|>"


def _sft(model: Path, data: Path, out: Path, trainable: str) -> SFTConfig:
    return SFTConfig(
        model=model,
        data=data,
        out=out,
        epochs=3,
        batch_size=2,
        learning_rate=5e-3,
        checkpoint_every=1,
        trainable=trainable,
        lora={"r": 4, "alpha": 8},
    )


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_lora_sft_resumes_exactly_and_its_adapter_loads_in_the_hf_policy(
    tiny_llama: Path, traces: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    trained = train_sft(_sft(tiny_llama, traces, tmp_path / "unbroken", "lora"))
    assert (trained / "adapter_config.json").is_file() and not (trained / "model.safetensors").exists()
    losses = _losses(tmp_path / "unbroken")
    assert losses[-1] < losses[0]

    class Killed(Exception):
        pass

    def kill_at_step_3(step: int, total: int, row: object) -> None:
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        train_sft(_sft(tiny_llama, traces, tmp_path / "broken", "lora"), progress=kill_at_step_3)
    train_sft(_sft(tiny_llama, traces, tmp_path / "broken", "lora"))
    assert _losses(tmp_path / "broken") == pytest.approx(losses, rel=1e-5)

    # `eval --policy hf` on the adapter folder: the base with the trained adapter merged in.
    policy = HFPolicy(str(trained), max_new_tokens=4)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama, local_files_only=True)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert not torch.allclose(policy.model(input_ids=ids).logits, base(input_ids=ids).logits)
    assert not any("lora" in name for name, _ in policy.model.named_parameters())


def test_last_layers_training_changes_only_the_last_layers(
    tiny_llama: Path, traces: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    trained = train_sft(_sft(tiny_llama, traces, tmp_path / "last", "last_layers:1"))
    before = AutoModelForCausalLM.from_pretrained(tiny_llama, local_files_only=True).state_dict()
    after = AutoModelForCausalLM.from_pretrained(trained, local_files_only=True).state_dict()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(name.startswith(("model.layers.2.", "model.norm.")) for name in changed)


def test_grpo_trains_a_lora_adapter_of_a_text_model_with_live_tools(tiny_llama: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_families(data, {"robospatial": generate_group(0, "robospatial", 0, 2)})
    config = GRPOConfig(
        model=tiny_llama,
        data=data,
        out=tmp_path / "grpo",
        steps=2,
        prompts_per_step=1,
        group_size=2,
        learning_rate=1e-2,
        max_new_tokens=8,
        max_turns=2,
        temperature=0.7,
        trainable="lora",
        lora={"r": 4, "alpha": 8},
    )

    async def run() -> Path:
        deployments = [d.model_copy(update={"backend": "inprocess"}) for d in get_toolset("v1")]
        async with Toolshed(deployments) as tools:
            return await train_grpo_async(config, tools=tools)

    trained = asyncio.run(run())
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert all(row["model_tokens"] > 0 and row["ratio_drift"] < 1e-3 for row in rows)
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert json.loads((trained / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
        tiny_llama.resolve()
    )
