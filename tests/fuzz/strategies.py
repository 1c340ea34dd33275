"""Hypothesis strategies for hostile model output: any unicode (lone surrogates too), protocol
fragments, runaway repetition and tool calls with arbitrary JSON."""

from __future__ import annotations

import json

from hypothesis import strategies as st

ANY_CHARACTER = st.characters(exclude_categories=())  # surrogates included
FRAGMENTS = st.sampled_from(
    [
        "<answer>", "</answer>", "<ANSWER>", "<think>", "</think>", "<tool_call>", "</tool_call>",
        "<tool_response>", "</tool_response>", "```json", "```", "(", ")", "[", "]", "{", "}", ",", ":",
        '"', " ", "\n", "\t", "yes", "No", "(A)", "B", "Grasp center:", "Left finger base:",
        "Right finger tip", "grasp  centre =", "-", ".", "e", "1e308", "-1e308", "1e999", "5e-324",
        "nan", "NaN", "Infinity", "inf", "0", "0.5", "12", "-3", ".25", "1.", "[(0.5, 0.5)]",
        "[[0,0,1,1]]", '"name": "echo.echo"', '"arguments": ', "\ud800", "\udfff", "\u202e", "\x00",
    ]
)  # fmt: skip
REPEATED = st.tuples(FRAGMENTS, st.integers(1, 3000)).map(lambda pair: pair[0] * pair[1])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHARACTER, max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
TOOL_CALLS = st.builds(
    lambda name, arguments, as_string: (
        "<tool_call>"
        + json.dumps({"name": name, "arguments": json.dumps(arguments) if as_string else arguments})
        + "</tool_call>"
    ),
    st.sampled_from(["echo.echo", "vision_ops.index_at", "", "x" * 300]),
    JSON_VALUES,
    st.booleans(),
)
MODEL_TEXT = st.one_of(
    st.text(ANY_CHARACTER, max_size=400),
    st.lists(st.one_of(FRAGMENTS, REPEATED, TOOL_CALLS), max_size=40).map("".join),
)
#: Any float a model can write, and a few it cannot (NaN and infinities reach the geometry directly).
ANY_FLOAT = st.one_of(st.floats(), st.sampled_from([5e-324, -5e-324, 1e308, -1e308, 0.0, -0.0, 1.0]))
