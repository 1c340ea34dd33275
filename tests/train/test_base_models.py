"""The SmolLM2 base model: found in its wheel, converted once into a cached folder, loaded as a chat model."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from typer.testing import CliRunner

from smollm2 import NAME, smollm2_folder
from spacetools.cli.main import app
from spacetools.train.base_models import DONE_FILE, get_base_model, gguf_path

runner = CliRunner()


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return smollm2_folder()


def test_the_wheel_holds_the_gguf_file() -> None:
    try:
        path = gguf_path(NAME)
    except FileNotFoundError as error:
        pytest.skip(str(error))
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


def test_conversion_is_cached_and_the_cli_prints_the_folder(smollm2: Path) -> None:
    weights = smollm2 / "model.safetensors"
    stamp = weights.stat().st_mtime_ns, (smollm2 / DONE_FILE).stat().st_mtime_ns
    result = runner.invoke(app, ["models", "get", NAME])
    assert result.exit_code == 0, result.output
    assert Path(result.output.strip()) == smollm2
    assert get_base_model(NAME) == smollm2
    # Neither call converted again: the weights and the marker are the files of the first conversion.
    assert (weights.stat().st_mtime_ns, (smollm2 / DONE_FILE).stat().st_mtime_ns) == stamp


@pytest.mark.slow
def test_the_converted_model_loads_without_its_quantizer_and_answers(smollm2: Path) -> None:
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    tokenizer = AutoTokenizer.from_pretrained(smollm2, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(smollm2, local_files_only=True).eval()
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 136_000_000
    chat = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    inputs = tokenizer.apply_chat_template(
        chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, inputs["input_ids"].shape[1] :])


def test_an_unknown_model_is_one_clear_line() -> None:
    result = runner.invoke(app, ["models", "get", "gpt-5"])
    assert result.exit_code == 2
    assert "unknown model 'gpt-5'" in result.output
