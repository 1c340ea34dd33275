"""Token-exact trajectories: a two-turn conversation built by hand, its mask checked token by token."""

from __future__ import annotations

import pytest

from spacetools.agent.tokens import ChatTrace, TokenTrace
from tiny_qwen import build_tiny_tokenizer

TOOL_CALL = (
    '<tool_call>{"name": "depth_estimator.estimate_depth", "arguments": {"image_index": 0}}</tool_call>'
)
ANSWER = "<think>The mug is left of the bowl.</think><answer>(A)</answer>"


def _conversation() -> tuple[ChatTrace, list[int], list[int]]:
    tokenizer = build_tiny_tokenizer()
    chat = ChatTrace(
        tokenizer,
        [{"role": "system", "content": "system"}, {"role": "user", "content": "How far is the red cup?"}],
    )
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    first = [*tokenizer.encode(TOOL_CALL, add_special_tokens=False), end]
    chat.add_generation(first, [-0.5] * len(first))
    chat.add_messages([{"role": "tool", "content": "<tool_response>\nDepth range 0.65m\n</tool_response>"}])
    second = [*tokenizer.encode(ANSWER, add_special_tokens=False), end]
    chat.add_generation(second, [-0.25] * len(second))
    return chat, first, second


def test_mask_is_one_exactly_on_the_sampled_tokens() -> None:
    chat, first, second = _conversation()
    trace = chat.trace
    tokenizer = chat.tokenizer
    prompt = tokenizer.encode(
        "<|im_start|>system\nsystem<|im_end|>\n<|im_start|>user\nHow far is the red cup?<|im_end|>\n"
        "<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    between = tokenizer.encode(
        "\n<|im_start|>tool\n<tool_response>\nDepth range 0.65m\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    assert trace.ids == prompt + first + between + second
    assert trace.mask == [0] * len(prompt) + [1] * len(first) + [0] * len(between) + [1] * len(second)
    assert trace.logprobs == [0.0] * len(prompt) + [-0.5] * len(first) + [0.0] * len(between) + [-0.25] * len(
        second
    )


def test_the_trace_is_the_template_rendering_of_the_whole_chat() -> None:
    chat, _, _ = _conversation()
    full = chat.tokenizer.apply_chat_template(chat.messages, tokenize=False)
    # The template closes the last turn with a newline the model never writes.
    assert chat.tokenizer.decode(chat.trace.ids) + "\n" == full
    assert chat.messages[-1] == {"role": "assistant", "content": ANSWER}


def test_a_turn_cut_at_the_length_limit_is_closed_as_context() -> None:
    tokenizer = build_tiny_tokenizer()
    chat = ChatTrace(tokenizer, [{"role": "user", "content": "user"}])
    cut = tokenizer.encode("<think>The mug", add_special_tokens=False)
    chat.add_generation(cut, [-1.0] * len(cut))
    chat.add_messages([{"role": "user", "content": "go on"}])
    tail = tokenizer.encode("<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")
    assert chat.trace.ids[-len(tail) :] == tail
    assert chat.trace.mask[-len(tail) :] == [0] * len(tail)


def test_trace_round_trips_and_checks_lengths() -> None:
    trace = TokenTrace()
    trace.add_context([1, 2])
    trace.add_generated([3], [-0.1])
    assert TokenTrace.from_dict(trace.to_dict()) == trace
    with pytest.raises(ValueError, match="log-probabilities"):
        trace.add_generated([4, 5], [-0.1])
    with pytest.raises(ValueError, match="same length"):
        TokenTrace.from_dict({"ids": [1], "mask": [], "logprobs": []})
