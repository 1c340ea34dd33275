"""Answer extraction and the format parsers."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.rewards import (
    extract_answer,
    parse_boxes,
    parse_choice,
    parse_grasp,
    parse_point_tokens,
    parse_points,
    parse_yes_no,
)


def test_last_answer_tag_wins() -> None:
    answer = extract_answer("<answer>No</answer> thinking again <answer> Yes </answer>")
    assert (answer.text, answer.source, answer.tagged) == ("Yes", "tag", True)


def test_unclosed_answer_tag_falls_back_to_the_rest() -> None:
    answer = extract_answer("<think>hmm</think><answer>[(0.1, 0.2)")
    assert (answer.text, answer.source) == ("[(0.1, 0.2)", "unclosed_tag")


def test_untagged_output_drops_think_and_tool_blocks() -> None:
    text = '<think>maybe yes</think><tool_call>{"name": "x"}</tool_call>\nNo, it is not.'
    answer = extract_answer(text)
    assert (answer.text, answer.source, answer.tagged) == ("No, it is not.", "untagged", False)


@pytest.mark.parametrize("text", ["", "<think>only thinking", "<answer></answer>", "<answer>", None])
def test_nothing_to_answer(text: str | None) -> None:
    answer = extract_answer(text)  # type: ignore[arg-type]
    assert answer.text == ""
    assert answer.source in ("none", "tag")


def test_points_in_both_bracket_styles_and_number_forms() -> None:
    assert parse_points("[(0.338, 0.934)]") == [(0.338, 0.934)]
    assert parse_points("[[.5, 1], (-0.2,3e-1)]") == [(0.5, 1.0), (-0.2, 0.3)]
    assert parse_points("(0.1, 0.2]") == []  # mismatched brackets are not a point
    assert parse_point_tokens("[(12, 0.5)]") == [("12", "0.5")]


def test_boxes_are_not_points_and_points_are_not_boxes() -> None:
    assert parse_points("[[0.1, 0.2, 0.3, 0.4]]") == []
    assert parse_boxes("[[0.1, 0.2, 0.3, 0.4], (0.9, 0.9, 0.5, 0.6)]") == [
        (0.1, 0.2, 0.3, 0.4),
        (0.5, 0.6, 0.9, 0.9),
    ]
    assert parse_boxes("[(0.1, 0.2)]") == []


def test_grasp_labels_in_any_order_and_case() -> None:
    text = (
        "right finger tip: (0.6, 0.6), Grasp centre: [0.5, 0.5], Left finger base: [0.4, 0.5], "
        "RIGHT FINGER BASE: [0.6, 0.5], Left finger tip: [0.4, 0.6]"
    )
    expected = np.array([[0.5, 0.5], [0.4, 0.5], [0.6, 0.5], [0.4, 0.6], [0.6, 0.6]])
    assert np.array_equal(parse_grasp(text), expected)


def test_grasp_missing_label_or_bare_points() -> None:
    assert parse_grasp("Grasp center: [0.5, 0.5], Left finger base: [0.4, 0.5]") is None
    bare = "[(0.5, 0.5), (0.4, 0.5), (0.6, 0.5), (0.4, 0.6), (0.6, 0.6)]"
    assert parse_grasp(bare).shape == (5, 2)
    assert parse_grasp("[(0.5, 0.5), (0.4, 0.5)]") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Yes", True), ("no", False), ("**No**, because", False), ('"yes"', True), ("Yesterday", None), ("none", None),
     ("I think yes", None)],
)  # fmt: skip
def test_yes_no(text: str, expected: bool | None) -> None:
    assert parse_yes_no(text) is expected


@pytest.mark.parametrize(
    ("text", "choices", "expected"),
    [
        ("(A)", None, "A"),
        ("B", None, "B"),
        ("C. the red cube", None, "C"),
        ("(d)", None, "D"),
        ("a red cube", None, None),  # a lower-case article is not an option
        ("The answer is (B).", None, "B"),
        ("the mug", ["(A) the bowl", "(B) the mug"], "B"),
        ("(C)", ["left", "right"], None),  # beyond the options
        ("", None, None),
    ],
)
def test_choice(text: str, choices: list[str] | None, expected: str | None) -> None:
    assert parse_choice(text, choices) == expected
