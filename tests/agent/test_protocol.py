"""The tag protocol: system prompt, turn parsing, tool responses, truncation; the parser is fuzzed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacetools.agent.protocol import (
    DEFAULT_SYSTEM_PROMPT,
    ParsedTurn,
    build_system_prompt,
    build_user_message,
    format_tool_response,
    parse_turn,
    tool_message,
    truncate_middle,
    without_thoughts,
)
from spacetools.kit.definition import ToolResult, ToolSpec, hermes_tools_block

SPECS = [
    ToolSpec(
        name="sam2.segment_from_point",
        description="Segment the object at a normalized point.",
        parameters={
            "type": "object",
            "properties": {
                "x": {"type": "number"},
                "y": {"type": "number"},
                "image_index": {"type": "integer"},
            },
            "required": ["x", "y", "image_index"],
        },
    ),
    ToolSpec(name="echo.echo", description="Do nothing.", parameters={"type": "object", "properties": {}}),
]
NAMES = {spec.name for spec in SPECS}


def call(name: str, **arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_default_system_prompt_states_the_rules_and_lists_every_tool() -> None:
    prompt = build_system_prompt(SPECS)
    for rule in ("<think>", "<tool_call>", "<answer>", "image_index 0", "$point_cloud"):
        assert rule in prompt
    assert hermes_tools_block(SPECS) in prompt
    assert "{tools}" not in prompt
    assert "{tools}" in DEFAULT_SYSTEM_PROMPT


def test_template_from_a_file_replaces_the_default(tmp_path: Path) -> None:
    template = tmp_path / "prompt.txt"
    template.write_text('Trained prompt. JSON like {"name": x} stays.\n{tools}\nEnd.')
    prompt = build_system_prompt(SPECS, template)
    assert prompt.startswith('Trained prompt. JSON like {"name": x} stays.\n<tools>\n')
    assert prompt.endswith("</tools>\nEnd.")
    assert build_system_prompt(SPECS, "verbatim, no tools block") == "verbatim, no tools block"
    with pytest.raises(ValueError, match="cannot read the system prompt template"):
        build_system_prompt(SPECS, tmp_path / "missing.txt")


def test_user_message_puts_images_before_the_question() -> None:
    message = build_user_message("How far?", image_count=2)
    assert message == {
        "role": "user",
        "content": [
            {"type": "image", "index": 0},
            {"type": "image", "index": 1},
            {"type": "text", "text": "How far?"},
        ],
    }


def test_several_calls_in_one_turn_keep_their_order_and_arguments() -> None:
    text = (
        "<think>Find it, then segment.</think>\n"
        + call("echo.echo")
        + "\n"
        + call("sam2.segment_from_point", x=0.25, y=0.5, image_index=0)
    )
    parsed = parse_turn(text, NAMES)
    assert parsed.think == "Find it, then segment."
    assert [(c.index, c.name, c.arguments) for c in parsed.tool_calls] == [
        (0, "echo.echo", {}),
        (1, "sam2.segment_from_point", {"x": 0.25, "y": 0.5, "image_index": 0}),
    ]
    assert parsed.answer is None and parsed.errors == []


@pytest.mark.parametrize(
    ("block", "kind", "fragment"),
    [
        ("<tool_call>{bad json</tool_call>", "bad_json", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "not_object", "got list"),
        ('<tool_call>{"arguments": {}}</tool_call>', "missing_name", 'no "name"'),
        (
            '<tool_call>{"name": "echo.echo", "arguments": [1]}</tool_call>',
            "bad_arguments",
            "must be a JSON object",
        ),
        (
            '<tool_call>{"name": "nope.tool", "arguments": {}}</tool_call>',
            "unknown_tool",
            "unknown tool 'nope.tool'",
        ),
        ("<tool_call>   </tool_call>", "empty", "empty <tool_call>"),
    ],
)
def test_malformed_blocks_become_error_messages_in_place(block: str, kind: str, fragment: str) -> None:
    parsed = parse_turn(call("echo.echo") + block + call("echo.echo"), NAMES)
    assert [c.index for c in parsed.tool_calls] == [0, 2]
    assert len(parsed.errors) == 1
    error = parsed.errors[0]
    assert (error.index, error.kind) == (1, kind)
    assert error.message.startswith("Error: ") and fragment in error.message


def test_lenient_forms_models_actually_write_are_accepted() -> None:
    fenced = '<tool_call>\n```json\n{"name": "echo.echo", "arguments": {}}\n```\n</tool_call>'
    stringified = '<tool_call>{"name": "echo.echo", "arguments": "{\\"a\\": 1}"}</tool_call>'
    no_arguments = '<tool_call>{"name": "echo.echo"}</tool_call>'
    parsed = parse_turn(fenced + stringified + no_arguments, NAMES)
    assert [c.arguments for c in parsed.tool_calls] == [{}, {"a": 1}, {}]


def test_unclosed_tags_run_to_the_next_tag_or_the_end() -> None:
    cut_call = parse_turn('<think>go</think><tool_call>{"name": "echo.echo", "arguments": {}}', NAMES)
    assert [c.name for c in cut_call.tool_calls] == ["echo.echo"]
    cut_think = parse_turn("<think>still thinking " + call("echo.echo"), NAMES)
    assert cut_think.think == "still thinking"
    assert len(cut_think.tool_calls) == 1
    broken_then_good = parse_turn('<tool_call>{"name": <tool_call>{"name": "echo.echo"}</tool_call>', NAMES)
    assert [e.kind for e in broken_then_good.errors] == ["bad_json"]
    assert [c.index for c in broken_then_good.tool_calls] == [1]


def test_answer_rules_match_the_reward_extraction() -> None:
    assert parse_turn("<answer>(A)</answer> text <answer> (B) </answer>").answer == "(B)"
    assert parse_turn("<answer>(A)</answer><answer>cut off").answer == "(A)"
    assert parse_turn("<think>x</think><answer>[(0.1, 0.2)]").answer == "[(0.1, 0.2)]"
    assert parse_turn("Plain text, no tags.") == ParsedTurn(think=None)
    both = parse_turn(call("echo.echo") + "<answer>Yes</answer>", NAMES)
    assert both.answer == "Yes" and both.block_count == 1


def test_tags_mentioned_inside_thinking_are_not_calls() -> None:
    parsed = parse_turn(
        "<think>I could write <tool_call> here, or <answer>.</think>" + call("echo.echo"), NAMES
    )
    assert len(parsed.tool_calls) == 1 and parsed.answer is None and parsed.errors == []


def test_truncate_middle_keeps_head_and_tail_within_the_limit() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    cut = truncate_middle(text, 2048)
    assert len(cut) <= 2048 and len(cut) >= 2000
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    marker = re.search(r"…\[truncated (\d+) chars\]…", cut)
    assert marker is not None
    assert int(marker.group(1)) == len(text) - (len(cut) - len(marker.group(0)))
    assert truncate_middle("short", 2048) == "short"
    with pytest.raises(ValueError, match="at least 1"):
        truncate_middle("x", 0)


def test_tool_response_is_wrapped_truncated_and_names_new_images() -> None:
    result = ToolResult(text="Depth " + "9" * 3000)
    rendered = format_tool_response(result, max_chars=100)
    assert rendered.startswith("<tool_response>\nDepth ") and rendered.endswith("\n</tool_response>")
    assert "truncated" in rendered and len(rendered) <= 100 + len("<tool_response>\n\n</tool_response>")
    assert format_tool_response("Error: boom") == "<tool_response>\nError: boom\n</tool_response>"
    message = tool_message(ToolResult(text="captured"), image_indices=[1])
    assert message["role"] == "tool"
    assert message["content"][0]["text"].endswith("now image_index 1.]\n</tool_response>")
    assert message["content"][1] == {"type": "image", "index": 1}
    assert tool_message("plain") == {"role": "tool", "content": "<tool_response>\nplain\n</tool_response>"}


def test_a_100_kb_turn_parses_quickly_into_bounded_messages() -> None:
    flood = "<tool_call>{" * 5000 + "x" * 100_000
    parsed = parse_turn(flood, NAMES)
    assert len(parsed.errors) == 5000
    assert all(len(e.message) < 400 for e in parsed.errors)


TAGS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<answer>",
        "</answer>",
        "<TOOL_CALL>",
        "{",
        "}",
        '"',
    ]
)
CALLS = st.builds(
    lambda name, args: json.dumps({"name": name, "arguments": args}),
    st.sampled_from([*NAMES, "unknown.tool", ""]),
    st.dictionaries(
        st.text(max_size=5), st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5))
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TAGS, CALLS, st.text(max_size=20)), max_size=30))
def test_parser_never_raises_and_accounts_for_every_block(pieces: list[str]) -> None:
    text = "".join(pieces)
    parsed = parse_turn(text, NAMES)
    indices = sorted([c.index for c in parsed.tool_calls] + [e.index for e in parsed.errors])
    assert indices == list(range(parsed.block_count))
    assert all(c.name in NAMES and isinstance(c.arguments, dict) for c in parsed.tool_calls)
    assert all(e.message.startswith("Error: ") for e in parsed.errors)


@given(st.text(), st.integers(min_value=1, max_value=3000))
def test_truncation_bound_holds_for_any_text(text: str, limit: int) -> None:
    cut = truncate_middle(text, limit)
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text
    else:
        assert text.startswith(cut[: max(0, min(limit, 20) // 4)])


@pytest.mark.parametrize(
    ("arguments", "kind", "detail"),
    [
        ('{"text": ' + "1" * 4301 + "}", "bad_json", "digits"),
        ('{"a": ' + "[" * 1000 + "]" * 1000 + "}", "bad_json", "nested too deeply"),
        ('{"x": NaN}', "bad_json", "NaN is not a JSON number"),
        ('{"x": 1e999}', "bad_json", "out of range"),
        ('"' + "[" * 1000 + "]" * 1000 + '"', "bad_arguments", "must be a JSON object"),
        ('"' + "7" * 5000 + '"', "bad_arguments", "must be a JSON object"),
    ],
)
def test_hostile_json_is_an_error_for_the_model_not_an_exception(
    arguments: str, kind: str, detail: str
) -> None:
    """Issue 9, item 1: integers over Python's digit limit and deep nesting used to raise."""
    parsed = parse_turn('<tool_call>{"name": "echo.echo", "arguments": ' + arguments + "}</tool_call>", NAMES)
    assert parsed.tool_calls == [] and [e.kind for e in parsed.errors] == [kind]
    assert detail in parsed.errors[0].message and len(parsed.errors[0].message) < 400


def test_a_code_fence_is_unwrapped_and_a_lone_surrogate_passes_through() -> None:
    fenced = parse_turn(
        '<tool_call>```json\n{"name": "echo.echo", "arguments": {"text": "\\ud800"}}\n```</tool_call>'
    )
    assert fenced.tool_calls[0].arguments == {"text": "\ud800"}


def test_without_thoughts_empties_every_think_block_and_keeps_calls_and_answer() -> None:
    call = '<tool_call>{"name": "echo.echo", "arguments": {"note": "at (0.41, 0.52)"}}</tool_call>'
    turn = (
        f"<think>The mug is at (0.41, 0.52).\nNext</think>\n{call}\n<THINK>more</THINK><answer>(A)</answer>"
    )
    stripped = without_thoughts(turn)
    assert stripped == f"<think></think>\n{call}\n<think></think><answer>(A)</answer>"
    parsed, original = parse_turn(stripped), parse_turn(turn)
    assert (parsed.answer, parsed.tool_calls) == (original.answer, original.tool_calls)
    assert parsed.think is not None and not parsed.think.strip()
    assert without_thoughts("no tags here") == "no tags here"
