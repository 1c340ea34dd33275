"""Property tests: whatever a model writes, scoring never raises and stays in [0, 1]."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacetools.rewards import compute_score, convex_hull_iou, grasp_reward, nndc, score_grasp, score_pose

from .test_rewards_dispatch import EXAMPLES

# Fragments that steer random text into the parsers' paths: tags, brackets, numbers, labels.
FRAGMENTS = st.sampled_from(
    [
        "<answer>", "</answer>", "<think>", "</think>", "<tool_call>", "(", ")", "[", "]", ",", " ", "\n",
        "yes", "No", "(A)", "B", "Grasp center:", "Left finger base:", "Right finger tip:", "-", ".", "e",
        "1e308", "1e999", "nan", "inf", "0", "0.5", "12", "-3", ".25", "1.", "[(0.5, 0.5)]", "[[0,0,1,1]]",
    ]
)  # fmt: skip
MODEL_TEXT = st.one_of(st.text(max_size=300), st.lists(FRAGMENTS, max_size=60).map("".join))
UNIT = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(text=MODEL_TEXT, data_source=st.sampled_from(sorted(EXAMPLES)))
def test_any_text_scores_in_unit_interval_without_raising(text: str, data_source: str) -> None:
    truth, _, extra_info = EXAMPLES[data_source]
    reference_keys = list(compute_score(data_source, "", truth, extra_info))
    for solution in (text, f"<answer>{text}</answer>"):
        result = compute_score(data_source, solution, truth, extra_info)
        assert 0.0 <= result["score"] <= 1.0
        assert list(result) == reference_keys
        if result["score"] == 0.0:
            assert result["reason"]


CORNERS = st.lists(st.tuples(UNIT, UNIT), min_size=8, max_size=8)


def _corner_text(points: list[tuple[float, float]] | np.ndarray) -> str:
    return "[" + ", ".join(f"({x!r}, {y!r})" for x, y in points) + "]"


@settings(max_examples=40, deadline=None)
@given(predicted=CORNERS, truth=CORNERS, seed=st.integers(0, 2**32 - 1))
def test_pose_score_ignores_corner_order(predicted: list, truth: list, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = score_pose(_corner_text(predicted), _corner_text(truth))["score"]
    shuffled_pred = [predicted[i] for i in rng.permutation(8)]
    shuffled_truth = [truth[i] for i in rng.permutation(8)]
    assert abs(score_pose(_corner_text(shuffled_pred), _corner_text(shuffled_truth))["score"] - base) < 1e-9
    assert 0.0 <= base <= 1.0


@given(st.floats(0.0, 1.4142), st.floats(0.0, 1.4142))
def test_nndc_falls_as_distance_grows(first: float, second: float) -> None:
    near, far = sorted((first, second))
    assert nndc(near) >= nndc(far)
    if far - near > 1e-6:
        assert nndc(near) > nndc(far)


def test_nndc_strictly_decreasing_on_a_grid() -> None:
    values = [nndc(d) for d in np.linspace(0.0, np.sqrt(2.0), 200)]
    assert all(a > b for a, b in itertools.pairwise(values))


GRASP_POINTS = st.lists(st.tuples(UNIT, UNIT), min_size=5, max_size=5).filter(
    lambda points: np.hypot(points[2][0] - points[1][0], points[2][1] - points[1][1]) > 1e-3
)


def _grasp_text(points: list[tuple[float, float]]) -> str:
    labels = ("Grasp center", "Left finger base", "Right finger base", "Left finger tip", "Right finger tip")
    return ", ".join(f"{label}: [{x!r}, {y!r}]" for label, (x, y) in zip(labels, points, strict=True))


@settings(max_examples=40, deadline=None)
@given(points=GRASP_POINTS)
def test_a_perfect_grasp_gets_reward_one(points: list[tuple[float, float]]) -> None:
    result = score_grasp(_grasp_text(points), _grasp_text(points))
    assert result["score"] == 1.0
    assert result["nce"] == 0.0
    assert abs(result["mace"] - 1.0) < 1e-9
    assert result["sr"] == 1.0


@given(st.floats(allow_nan=False))
def test_grasp_reward_stays_in_unit_interval(nce: float) -> None:
    assert 0.0 <= grasp_reward(nce) <= 1.0


HUGE_ANSWERS = {
    "bopgrasp": "Grasp center: [1e308, 1e308], Left finger base: [-1e308, 0.5], Right finger base: "
    "[1e308, 0.5], Left finger tip: [0.4, 1e308], Right finger tip: [0.6, -1e308]",
    "boppose": "[(-1e308, -1e308), (1e308, -1e308), (1e308, 1e308), (-1e308, 1e308), (0, 0), (1, 0), (1, 1), (0, 1)]",
    "spatialsim_detect2d": "[[-1e308, -1e308, 1e308, 1e308]]",
    "reflocation": "[(1e308, 1e308), (-1e308, 0.5)]",
    "spatialsim_reflocation": "[(1e999, 0.5), (1e308, 1e308)]",
}


@pytest.mark.parametrize("data_source", sorted(HUGE_ANSWERS))
def test_huge_coordinates_score_zero_without_numeric_warnings(data_source: str) -> None:
    truth, _, extra_info = EXAMPLES[data_source]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compute_score(
            data_source, f"<answer>{HUGE_ANSWERS[data_source]}</answer>", truth, extra_info
        )
    assert result["score"] == 0.0


SQUARE = [(0.25, 0.25), (0.75, 0.25), (0.75, 0.75), (0.25, 0.75)]


def test_denormal_corners_score_instead_of_raising() -> None:
    """Issue 9, item 2: GEOS raised "side location conflict" on these corners."""
    answer = (
        "<answer>[(0.9, 0.9), (0.9, -5e-324), (0.9, 0.9), (1.0, 0.0), (0.9, 0.9), (0.1, 0.1), (0.5, 5e-324),"
        " (0.9, 0.8)]</answer>"
    )
    result = compute_score("boppose", answer, _corner_text(SQUARE * 2))
    assert 0.0 < result["score"] < 1.0 and result["parse_ok"]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        # Issue 8's degenerate set (a segment with a denormal bump) against a unit square: no area.
        ([(0, 0), (0, 0), (0, 5e-324), (1, 0), (0.5, 0)], [(0, 0), (1, 0), (1, 1), (0, 1)], 0.0),
        ([(0, 0), (1, 0), (1, 1), (0, 1), (0, 5e-324), (0.5, 0)], [(0, 0), (1, 0), (1, 1), (0, 1)], 1.0),
        # Near the largest float: areas would overflow to inf.
        ([(1e308, 1e308), (-1e308, 1e308), (-1e308, -1e308), (1e308, -1e308)], SQUARE, 0.0),
        ([(x * 1e308, y * 1e308) for x, y in SQUARE], [(x * 1e308, y * 1e308) for x, y in SQUARE], 1.0),
        ([(float("nan"), 0.5), *SQUARE], SQUARE, 0.0),
        ([(float("inf"), 0.5), *SQUARE], SQUARE, 0.0),
        (SQUARE, [(x + 0.25, y) for x, y in SQUARE], 1 / 3),
    ],
)
def test_hull_iou_of_hostile_corners(first: list, second: list, expected: float) -> None:
    assert convex_hull_iou(first, second) == pytest.approx(expected, abs=1e-9)
