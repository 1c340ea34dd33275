"""Every answer format: what the writer prints, reads back as what was written (to the printed precision)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spacetools.rewards.formats import (
    BOX_EDGES,
    GRASP_EDGES,
    GRASP_LABELS,
    choice_letter,
    format_boxes,
    format_choice,
    format_corners,
    format_grasp,
    format_point,
    format_points,
    format_yes_no,
    normalize_choice_label,
    parse_boxes,
    parse_choice,
    parse_corners,
    parse_grasp,
    parse_numbers,
    parse_points,
    parse_yes_no,
)

COORDINATE = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)
POINT = st.tuples(COORDINATE, COORDINATE)


def printed(value: float) -> float:
    """A coordinate as the writers print it, read back."""
    return float(f"{value:.3f}")


@given(st.lists(POINT, max_size=20))
def test_points_round_trip(points: list[tuple[float, float]]) -> None:
    assert parse_points(format_points(points)) == [(printed(x), printed(y)) for x, y in points]


@given(st.lists(POINT, min_size=8, max_size=8))
def test_corners_round_trip(corners: list[tuple[float, float]]) -> None:
    assert parse_corners(format_corners(corners)) == [(printed(x), printed(y)) for x, y in corners]


@given(st.lists(st.tuples(COORDINATE, COORDINATE, COORDINATE, COORDINATE), max_size=10))
def test_boxes_round_trip(raw: list[tuple[float, float, float, float]]) -> None:
    boxes = [(min(a, c), min(b, d), max(a, c), max(b, d)) for a, b, c, d in raw]
    assert parse_boxes(format_boxes(boxes)) == [tuple(printed(v) for v in box) for box in boxes]


@given(st.lists(POINT, min_size=5, max_size=5))
def test_grasp_round_trip(points: list[tuple[float, float]]) -> None:
    written = format_grasp(points)
    assert written.startswith("Grasp center: [") and all(label in written for label in GRASP_LABELS)
    parsed = parse_grasp(written)
    assert parsed is not None
    assert parsed.tolist() == [[printed(x), printed(y)] for x, y in points]


@given(st.booleans())
def test_yes_no_round_trip(answer: bool) -> None:
    assert parse_yes_no(format_yes_no(answer)) is answer


@given(st.integers(min_value=0, max_value=25))
def test_choice_round_trip(index: int) -> None:
    written = format_choice(index)
    assert written == f"({choice_letter(index)})"
    assert parse_choice(written) == normalize_choice_label(written) == "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[index]


def test_writers_refuse_what_they_cannot_write() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        format_points([(float("nan"), 0.5)])
    with pytest.raises(ValueError, match="8 corners"):
        format_corners([(0.1, 0.2)] * 7)
    with pytest.raises(ValueError, match="5 points"):
        format_grasp([(0.1, 0.2)] * 4)
    with pytest.raises(ValueError, match="4 numbers"):
        format_boxes([(0.1, 0.2, 0.3)])
    with pytest.raises(ValueError, match=r"0\.\.25"):
        format_choice(26)


def test_written_forms_are_the_benchmarks() -> None:
    assert format_point((0.3814, 0.4276)) == "(0.381, 0.428)"
    assert format_points([(0.1, 0.2), (1, 0)]) == "[(0.100, 0.200), (1.000, 0.000)]"
    assert format_boxes([(0.1, 0.2, 0.3, 0.4)]) == "[[0.100, 0.200, 0.300, 0.400]]"
    assert format_grasp(np.zeros((5, 2))).split(", Left")[0] == "Grasp center: [0.000, 0.000]"
    assert (format_yes_no(True), format_yes_no(False), format_choice(1)) == ("Yes", "No", "(B)")


def test_drawing_edges_index_the_formats() -> None:
    assert len(BOX_EDGES) == 12 and {i for edge in BOX_EDGES for i in edge} == set(range(8))
    assert all(0 <= i < len(GRASP_LABELS) for edge in GRASP_EDGES for i in edge)


def test_numbers_in_any_form() -> None:
    assert parse_numbers("depth 1.5 m at (-.25, 3e-2), id 7") == [1.5, -0.25, 0.03, 7.0]
    assert parse_numbers(None) == []  # type: ignore[arg-type]
    assert parse_numbers("1e999") == [float("inf")]
