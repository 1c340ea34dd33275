"""A tiny, randomly initialised Qwen2.5-VL saved to a folder, for tests of the ``hf`` policy and training.

The model comes from `spacetools.train.tiny` (the base of the `dirl-tiny` configuration), here with a
vocabulary trained on a few protocol lines and 56x56 images (4 vision tokens), so tests stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spacetools.train.tiny import CHAT_TEMPLATE, build_tiny_vlm, build_tokenizer

__all__ = ["CHAT_TEMPLATE", "build_tiny_qwen25_vl", "build_tiny_tokenizer"]

CORPUS = [
    "<think>The mug is left of the bowl.</think>",
    '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>',
    "<tool_response>\nDepth range 0.65m to 1.29m\n</tool_response>",
    "<answer>(A)</answer> How far is the red cup from the camera? system user assistant tool",
]


def build_tiny_tokenizer() -> Any:
    """The tiny model's tokenizer alone."""
    return build_tokenizer(CORPUS, vocab_size=320)


def build_tiny_qwen25_vl(directory: Path) -> int:
    """Save a random two-layer Qwen2.5-VL (hidden 32) with its tokenizer; return its vocabulary size."""
    # A 56x56 image becomes 4x4 patches, i.e. 4 image tokens after the 2x2 merge.
    return build_tiny_vlm(
        directory,
        CORPUS,
        vocab_size=320,
        hidden_size=32,
        layers=2,
        heads=4,
        max_pixels=56 * 56,
        max_positions=1024,
    )
