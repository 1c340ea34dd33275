"""A tiny, randomly initialised Qwen2.5-VL saved to a folder, for tests of the ``hf`` policy (no downloads).

Shared by the agent tests and the integration tests; torch and transformers are imported only when a
model is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# The shape of Qwen2.5-VL's own processor template: every role rendered alike, images as vision tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "<think>The mug is left of the bowl.</think>",
    '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>',
    "<tool_response>\nDepth range 0.65m to 1.29m\n</tool_response>",
    "<answer>(A)</answer> How far is the red cup from the camera? system user assistant tool",
]


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a few protocol lines, with Qwen's special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE
    )


def build_tiny_qwen25_vl(directory: Path) -> int:
    """Save a random two-layer Qwen2.5-VL with a locally trained tokenizer; return its vocabulary size."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tiny_tokenizer()
    token_id = dict(zip(SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS), strict=True))
    vocab_size = len(tokenizer)

    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 1024,
            # head_dim 8: the three M-RoPE sections (time, height, width) must add up to head_dim / 2.
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
            "bos_token_id": token_id["<|im_start|>"],
            "eos_token_id": token_id["<|im_end|>"],
            "pad_token_id": token_id["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        image_token_id=token_id["<|image_pad|>"],
        video_token_id=token_id["<|video_pad|>"],
        vision_start_token_id=token_id["<|vision_start|>"],
        vision_end_token_id=token_id["<|vision_end|>"],
    )
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    # A 56x56 image becomes 4x4 patches, i.e. 4 image tokens after the 2x2 merge.
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=56 * 56).save_pretrained(directory)
    return vocab_size
