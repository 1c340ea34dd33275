"""Hostile model output that once broke the parser or a scorer (issues 8 and 9), and the fuzz tally.

Each entry is a repro of a class: giant numbers, deep nesting, odd unicode, lone surrogates, runaway
repetition and megabyte strings. ``make fuzz`` and ``make test`` both run every entry.
"""

from __future__ import annotations

from collections import Counter

MEGABYTE = 1 << 20

#: Inputs each fuzz test tried in this session, by test (printed at the end of a run; see conftest).
TRIED: Counter[str] = Counter()


def _call(arguments: str) -> str:
    return '<tool_call>{"name": "echo.echo", "arguments": ' + arguments + "}</tool_call>"


HOSTILE_TEXTS: dict[str, str] = {
    "int_4301_digits": _call('{"text": ' + "1" * 4301 + "}"),
    "int_1mb": _call('{"text": ' + "9" * MEGABYTE + "}"),
    "float_1e999": _call('{"x": 1e999}'),
    "nan_and_infinity": _call('{"x": NaN, "y": -Infinity}'),
    "nesting_1000_deep": _call('{"a": ' + "[" * 1000 + "]" * 1000 + "}"),
    "nesting_100k_deep": _call('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "arguments_string_nested": _call('"' + "[" * 5000 + "]" * 5000 + '"'),
    "arguments_string_big_int": _call('"' + "7" * 5000 + '"'),
    "lone_surrogate_escaped": _call('{"text": "\\ud800"}'),
    "lone_surrogate_raw": _call('{"text": "\ud800"}') + "<answer>\udfff</answer>",
    "odd_unicode": "<think>\u202e\u200b\ufeff\U0001f600\x00</think><answer>\u0130\u0131 Yes \U000e0001</answer>",
    "answer_tags_32000": "<answer>" * 32000,
    "closing_tags_32000": "</answer>" * 32000,
    "mixed_tags_1mb": ("<think><answer><tool_call></think>" * (MEGABYTE // 34)),
    "spaces_1mb": " " * MEGABYTE,
    "grasp_label_then_spaces": "<answer>Grasp center:" + " " * MEGABYTE + "</answer>",
    "grasp_labels_repeated": "<answer>" + "Left finger base " * 60_000 + "</answer>",
    "code_fence_spaces": "<tool_call>```json" + " " * 200_000 + "x</tool_call>",
    "open_parens_1mb": "<answer>" + "(" * MEGABYTE + "</answer>",
    "open_brackets_digits": "<answer>" + "[1, 2, 3, " * 100_000 + "</answer>",
    "long_number_in_point": "<answer>(" + "1" * MEGABYTE + ", 0.5)</answer>",
    "digits_no_comma": "<answer>(" + "1" * MEGABYTE + "</answer>",
    "points_100k": "<answer>[" + "(0.5, 0.5), " * 100_000 + "]</answer>",
    "denormal_corners": "<answer>[(0.9, 0.9), (0.9, -5e-324), (0.9, 0.9), (1.0, 0.0), (0.9, 0.9), (0.1, 0.1), "
    "(0.5, 5e-324), (0.9, 0.8)]</answer>",
    "huge_corners": "<answer>[" + ", ".join(["(1e308, 1e308)", "(-1e308, 1e308)"] * 4) + "]</answer>",
    "degenerate_corners": "<answer>[(0, 0), (0, 0), (0, 1), (0, 1), (0, 5e-324), (1, 0), (0.5, 0), (0, 0)]</answer>",
    "nan_corners": "<answer>[" + ", ".join(["(nan, 0.5)"] * 8) + "]</answer>",
    "huge_boxes": "<answer>[[-1e308, -1e308, 1e308, 1e308], [1e308, 0, -1e308, 1]]</answer>",
    "yes_after_1mb_punctuation": "<answer>" + "*" * MEGABYTE + "Yes</answer>",
    "choice_after_1mb_punctuation": "<answer>" + "(" * MEGABYTE + "A)</answer>",
}
