"""Pointing models' answers read as normalized points, whatever their syntax."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.kit.definition import ToolError
from spacetools.tools.models.points import parse_points, prompt_for


@pytest.mark.parametrize(
    ("answer", "point_format", "expected"),
    [
        ("[(0.41, 0.62), (0.45, 0.6)]", "normalized", [[0.41, 0.62], [0.45, 0.6]]),
        ('<point x="25.0" y="50.0" alt="mug">mug</point>', "molmo", [[0.25, 0.5]]),
        (
            '<points x1="10" y1="20" x2="30.5" y2="40" alt="cups">cups</points>',
            "molmo",
            [[0.1, 0.2], [0.305, 0.4]],
        ),
        ('```json\n[{"point_2d": [50, 25], "label": "mug"}]\n```', "pixels", [[0.25, 0.125]]),
        ("[(100, 50)]", "pixels", [[0.5, 0.25]]),
        # auto tells the syntaxes apart
        ('<point x="25.0" y="50.0">a</point>', "auto", [[0.25, 0.5]]),
        ('[{"point_2d": [50, 25]}]', "auto", [[0.25, 0.125]]),
        ("The mug is at [(0.2, 0.3)].", "auto", [[0.2, 0.3]]),
        ("[(100, 50)]", "auto", [[0.5, 0.25]]),
    ],
)
def test_each_point_syntax_gives_normalized_points(answer: str, point_format, expected) -> None:
    points = parse_points(answer, point_format, width=200, height=200)
    np.testing.assert_allclose(points, expected)


def test_an_explicit_empty_list_means_nothing_found_and_outside_points_are_dropped() -> None:
    assert parse_points("[]", "normalized", 10, 10).shape == (0, 2)
    np.testing.assert_allclose(parse_points("[(0.5, 0.5), (1.4, 0.2)]", "normalized", 10, 10), [[0.5, 0.5]])


@pytest.mark.parametrize("point_format", ["auto", "normalized", "molmo", "pixels"])
def test_an_answer_without_points_is_an_error_that_quotes_it(point_format) -> None:
    with pytest.raises(ToolError, match=r"has no \w+ points: 'I cannot see a mug here\.'"):
        parse_points("I cannot see a mug here.", point_format, 10, 10)


def test_prompts_name_the_object_and_a_template_overrides_them() -> None:
    assert "red mug" in prompt_for("red mug", "normalized") and "between 0 and 1" in prompt_for(
        "x", "normalized"
    )
    assert prompt_for("red mug", "molmo") == "Point to red mug"
    assert "point_2d" in prompt_for("red mug", "pixels")
    assert prompt_for("cup", "auto", "Where is the {obj_name}?") == "Where is the cup?"
