"""A tiny Qwen2.5-VL built locally (no download): the base model of the `dirl-tiny` configuration and the tests.

Its byte-level BPE tokenizer is trained on the texts the model will meet (the prompt, questions, tool
calls and tool responses of teacher traces), with Qwen's special tokens and chat template, so the real
loading, templating and image-token code paths all run; its weights are random.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN2_PRETOKENIZE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# The shape of Qwen2.5-VL's processor template: every role rendered alike, images as vision tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(corpus: Iterable[str], vocab_size: int) -> object:
    """A byte-level BPE tokenizer trained on `corpus`, with Qwen's special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    # Qwen2's pre-tokenizer: words, single digits and punctuation runs, then bytes. Single digits matter
    # for a small model: a coordinate is then a few confident digit choices, not one of many number tokens.
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE
    )


def build_tiny_vlm(
    directory: Path,
    corpus: Iterable[str],
    *,
    vocab_size: int = 2048,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_pixels: int = 224 * 168,
    max_positions: int = 8192,
    seed: int = 0,
) -> int:
    """Save a random Qwen2.5-VL with its tokenizer and image processor to `directory`; returns the vocab size.

    `max_pixels` bounds the image size the model sees (224x168 is about 48 vision tokens): tools still
    measure the full-size images of the conversation.
    """
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tokenizer(corpus, vocab_size)
    token_id = dict(zip(SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS), strict=True))  # type: ignore[attr-defined]
    head_dim = hidden_size // heads
    # M-RoPE splits half the head dimension into time, height and width sections.
    sections = [head_dim // 4, head_dim // 8, head_dim // 2 - head_dim // 4 - head_dim // 8]
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),  # type: ignore[arg-type]
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 2),
            "max_position_embeddings": max_positions,
            "rope_scaling": {"type": "mrope", "mrope_section": sections},
            "bos_token_id": token_id["<|im_start|>"],
            "eos_token_id": token_id["<|im_end|>"],
            "pad_token_id": token_id["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": hidden_size,
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
    torch.manual_seed(seed)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)  # type: ignore[attr-defined]
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels).save_pretrained(directory)
    return len(tokenizer)  # type: ignore[arg-type]
