"""SFT on a tiny random Qwen2.5-VL: the assistant mask, learning, and a resume that ends like an unbroken run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spacetools.kit import imagecodec
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")

from spacetools.kit.loading import load_processor  # noqa: E402
from spacetools.train.config import SFTConfig  # noqa: E402
from spacetools.train.episodes import encode_episode  # noqa: E402
from spacetools.train.sft import train_sft  # noqa: E402

CALL = '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>'


def _episode(answer: str) -> dict[str, object]:
    return {
        "messages": [
            {"role": "system", "content": "system"},
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
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-qwen")
    build_tiny_qwen25_vl(directory)
    return directory


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "traces.jsonl"
    path.write_text("".join(json.dumps(_episode(a)) + "\n" for a in ("(A)", "(B)", "(A)")), encoding="utf-8")
    return path


def test_mask_covers_the_assistant_turns_and_their_end_tokens(tiny_model: Path) -> None:
    processor = load_processor(tiny_model)
    episode = _episode("(A)")
    images = [imagecodec.decode(url) for url in episode["images"]]  # type: ignore[attr-defined]
    example = encode_episode(processor, episode["messages"], images)  # type: ignore[arg-type]
    tokenizer = processor.tokenizer
    taught = example.ids[example.mask.bool()].tolist()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    expected = [*tokenizer.encode(CALL), end, *tokenizer.encode("<answer>(A)</answer>"), end]
    assert taught == expected
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((example.ids == image_pad).sum()) == 4  # a 56x56 image is 4 merged patches
    assert example.vision["image_grid_thw"].tolist() == [[1, 4, 4]]


def _config(model: Path, data: Path, out: Path) -> SFTConfig:
    return SFTConfig(
        model=model, data=data, out=out, epochs=4, batch_size=2, learning_rate=5e-3, checkpoint_every=1
    )


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_sft_learns_and_a_resumed_run_ends_like_an_unbroken_one(
    tiny_model: Path, traces: Path, tmp_path: Path
) -> None:
    unbroken = tmp_path / "unbroken"
    trained = train_sft(_config(tiny_model, traces, unbroken))
    assert (trained / "config.json").is_file()
    # The trained folder loads as the model's processor again (not as a bare tokenizer): the next stage
    # and `spacetools eval --policy hf` read it.
    reloaded = load_processor(trained)
    assert reloaded.image_processor is not None and reloaded.tokenizer is not None
    losses = _losses(unbroken)
    assert len(losses) == 8  # 2 steps per epoch, 4 epochs
    assert losses[-1] < losses[0]

    class Killed(Exception):
        pass

    def kill_at_step_3(step: int, total: int, row: dict[str, object]) -> None:
        if step == 3:
            raise Killed

    broken = tmp_path / "broken"
    with pytest.raises(Killed):
        train_sft(_config(tiny_model, traces, broken), progress=kill_at_step_3)
    moved = broken.rename(tmp_path / "moved")  # a run folder may be moved between runs
    train_sft(_config(tiny_model, traces, moved))
    assert _losses(moved) == pytest.approx(losses, rel=1e-5)


def test_a_resume_with_other_settings_is_refused(tiny_model: Path, traces: Path, tmp_path: Path) -> None:
    config = _config(tiny_model, traces, tmp_path)
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "config.json").write_text(json.dumps({**json.loads(config.model_dump_json()), "epochs": 9}))
    (config.out / "run.lock").write_text("")  # a run folder's first file
    with pytest.raises(ValueError, match="epochs"):
        train_sft(config)
