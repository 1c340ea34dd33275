"""LoRA adapters are checked against their base before they are used: an adapter of a VLM and of a
text-only base evaluates (its own processor files included), a relative base path is read from the
adapter's folder, and an adapter on the wrong base, one that is its own base (or a cycle), a model folder
with an empty config and a device the machine lacks are each one line, never a traceback or a silent
score of the base model filed under the adapter's name. Tiny random models are built here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.bench.spatialsim import generator
from spacetools.cli.main import app
from spacetools.kit.loading import ADAPTER_CONFIG, load_processor, load_vlm
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def _adapter(base: Path, out: Path, targets: list[str]) -> Path:
    """A LoRA adapter with random (non-zero) weights on ``base``, saved with peft as training saves it."""
    torch.manual_seed(0)
    model = peft.get_peft_model(
        load_vlm(base), peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    )
    model.save_pretrained(out)
    return out


def _rebase(adapter: Path, base: str) -> None:
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": base}))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny VLM, a wider one, a tiny text-only Llama, an adapter of the VLM and one of the Llama."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("models")
    build_tiny_qwen25_vl(root / "vlm")
    generator.export(root / "data", n=1, seed=0, families=["cvb2drelation"])
    config = LlamaConfig(
        vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(root / "llama")
    LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "hidden_size": 64})).save_pretrained(root / "wide")
    _adapter(root / "vlm", root / "vlm-adapter", ["q_proj", "v_proj"])
    load_processor(root / "vlm").save_pretrained(root / "vlm-adapter")  # as a trained adapter folder has
    _adapter(root / "llama", root / "llama-adapter", ["q_proj", "v_proj"])
    return root


def _one_error_line(arguments: list[str]) -> str:
    result = CliRunner().invoke(app, arguments)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return " ".join(result.output.split())


def test_a_lora_adapter_over_a_vlm_base_evaluates(models: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    arguments = ["eval", "--policy", "hf", "--option", f"model_path={models / 'vlm-adapter'}"]
    result = CliRunner().invoke(
        app, [*arguments, "--option", "max_new_tokens=4", "--data", str(models / "data"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and "score" in rows[0]


def test_the_adapter_changes_the_model_it_is_merged_into(models: Path) -> None:
    for base in ("vlm", "llama"):
        plain, adapted = load_vlm(models / base), load_vlm(models / f"{base}-adapter")
        assert type(plain) is type(adapted)
        differing = [
            name
            for (name, weight), (_, merged) in zip(
                plain.state_dict().items(), adapted.state_dict().items(), strict=True
            )
            if not torch.equal(weight, merged)
        ]
        assert differing and all("q_proj" in name or "v_proj" in name for name in differing)


def test_a_relative_base_path_is_read_from_the_adapters_folder(
    models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    moved = tmp_path / "moved"
    shutil.copytree(models / "llama", moved / "base")
    shutil.copytree(models / "llama-adapter", moved / "adapters" / "a")
    _rebase(moved / "adapters" / "a", "../../base")
    monkeypatch.chdir(tmp_path)  # the working folder has no ../../base
    adapted = load_vlm(moved / "adapters" / "a")
    assert adapted.name_or_path == str((moved / "adapters" / "a").resolve())


@pytest.mark.parametrize(
    ("adapter", "base", "message"),
    [
        (
            "vlm-adapter",
            "llama",
            "the base has no linear layer model.language_model.layers.0.self_attn.q_proj",
        ),
        ("llama-adapter", "vlm", "the base has no linear layer model.layers.0.self_attn.q_proj"),
        ("llama-adapter", "wide", "has 64 features where the adapter has 32"),
    ],
)
def test_an_adapter_on_the_wrong_base_is_one_line(
    models: Path, tmp_path: Path, adapter: str, base: str, message: str
) -> None:
    import shutil

    shutil.copytree(models / adapter, tmp_path / "a")
    _rebase(tmp_path / "a", str(models / base))
    with pytest.raises(ValueError, match="the adapter does not fit its base") as refused:
        load_vlm(tmp_path / "a")
    assert message in str(refused.value)
    if base != "vlm":
        return  # through the command line too, where the processor loads (the base has none of its own)
    line = _one_error_line(
        ["eval", "--policy", "hf", "--option", f"model_path={tmp_path / 'a'}", "--data", str(models / "data"),
         "--out", str(tmp_path / "run")]
    )  # fmt: skip
    assert message in line and not (tmp_path / "run" / "samples.jsonl").exists()


def test_an_adapter_that_is_its_own_base_or_in_a_cycle_is_one_line(models: Path, tmp_path: Path) -> None:
    import shutil

    for name in ("a", "b"):
        shutil.copytree(models / "llama-adapter", tmp_path / name)
    _rebase(tmp_path / "a", ".")
    with pytest.raises(ValueError, match="the adapter's base is itself or an adapter on it"):
        load_vlm(tmp_path / "a")
    _rebase(tmp_path / "a", "../b")
    _rebase(tmp_path / "b", "../a")
    with pytest.raises(ValueError, match=r"a -> .*b -> .*a\)"):
        load_vlm(tmp_path / "a")


def test_an_empty_model_config_and_an_absent_device_are_one_line(models: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("")
    robot = ["robot", "eval", "--policy", "hf", "--tasks-per-category", "1", "--out", str(tmp_path / "run")]
    line = _one_error_line([*robot, "--option", f"model_path={tmp_path / 'empty'}"])
    assert f"{tmp_path / 'empty' / 'config.json'} is not a model config" in line
    if not torch.cuda.is_available():
        line = _one_error_line(
            [*robot, "--option", f"model_path={models / 'vlm'}", "--option", "device=cuda:0"]
        )
        assert "device 'cuda:0' requested but CUDA is not available" in line


def test_peft_warnings_on_loading_an_adapter_go_to_the_run_log(models: Path, tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(models / "vlm-adapter", tmp_path / "a")
    weights = tmp_path / "a" / "adapter_model.safetensors"
    tensors = load_file(weights)
    save_file({key: value for key, value in tensors.items() if ".layers.1." not in key}, weights)
    out = tmp_path / "run"
    arguments = [
        "eval",
        "--policy",
        "hf",
        "--option",
        f"model_path={tmp_path / 'a'}",
        "--option",
        "max_new_tokens=2",
    ]
    result = CliRunner().invoke(app, [*arguments, "--data", str(models / "data"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    log = (out / "run.log").read_text()
    assert f"spacetools.kit.loading: {tmp_path / 'a'}: " in log and "layers.1.self_attn.q_proj" in log
