"""Whatever a model writes, the turn parser, the answer reader, the format readers and every scorer
return a value: no exception, a score in [0, 1], the same keys for every output of a data source.

Under ``make test`` (the ``ci`` profile) hypothesis draws the same examples every run; ``make fuzz``
runs the same tests under the ``fuzz`` profile with many fresh random examples. The corpus of repros
runs in both.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.rewards.test_rewards_dispatch import EXAMPLES

from spacetools.agent.protocol import ParsedTurn, parse_turn
from spacetools.rewards import SCORERS, compute_score, extract_answer, formats
from spacetools.rewards.geometry import box_iou, convex_hull_iou, mean_best_iou, point_in_convex_hull

from .corpus import HOSTILE_TEXTS, TRIED
from .strategies import ANY_FLOAT, MODEL_TEXT

NAMES = ["echo.echo", "vision_ops.index_at"]
# One data source per scorer (the others share them); the fuzz profile varies the source too.
# Under ``make test`` each corpus entry goes to two of them (one in turn, and robospatial); under
# ``make fuzz`` to all.
FUZZING = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
SCORER_SOURCES = ["robospatial", "spatialsim_robospatial", "reflocation", "spatialsim_reflocation",
                  "blinkdepth", "boppose", "bopgrasp", "spatialsim_detect2d"]  # fmt: skip
PARSERS = [
    formats.parse_points,
    formats.parse_corners,
    formats.parse_boxes,
    formats.parse_grasp,
    formats.parse_yes_no,
    formats.parse_choice,
    formats.parse_numbers,
    formats.parse_point_tokens,
    formats.normalize_choice_label,
]


def check_turn(text: str) -> None:
    parsed = parse_turn(text, NAMES)
    assert isinstance(parsed, ParsedTurn)
    assert parsed.answer is None or isinstance(parsed.answer, str)
    assert sorted([c.index for c in parsed.tool_calls] + [e.index for e in parsed.errors]) == list(
        range(parsed.block_count)
    )


def check_score(data_source: str, text: str) -> None:
    truth, _, extra_info = EXAMPLES[data_source]
    result = compute_score(data_source, text, truth, extra_info)
    assert 0.0 <= result["score"] <= 1.0
    assert list(result) == list(compute_score(data_source, "", truth, extra_info))
    for value in result.values():
        assert not (isinstance(value, float) and math.isnan(value))


def check_parsers(text: str) -> None:
    for parse in PARSERS:
        parse(text)
    extract_answer(text)


@pytest.mark.parametrize(("position", "name"), list(enumerate(sorted(HOSTILE_TEXTS))))
def test_corpus(position: int, name: str) -> None:
    text = HOSTILE_TEXTS[name]
    TRIED["corpus"] += 1
    check_turn(text)
    check_parsers(text)
    turn = SCORER_SOURCES[position % len(SCORER_SOURCES)]
    for data_source in SCORER_SOURCES if FUZZING else dict.fromkeys(["robospatial", turn]):
        check_score(data_source, text)


@given(text=MODEL_TEXT)
def test_parse_turn_never_raises(text: str) -> None:
    TRIED["parse_turn"] += 1
    check_turn(text)


@given(text=MODEL_TEXT, data_source=st.sampled_from(sorted(SCORERS)), tagged=st.booleans())
def test_scorers_never_raise(text: str, data_source: str, tagged: bool) -> None:
    TRIED["compute_score"] += 1
    check_score(data_source, f"<answer>{text}</answer>" if tagged else text)


@given(text=MODEL_TEXT)
def test_format_readers_never_raise(text: str) -> None:
    TRIED["format_readers"] += 1
    check_parsers(text)


POINTS = st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT), max_size=10)
BOXES = st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT, ANY_FLOAT, ANY_FLOAT), max_size=4)


def _sorted_box(box: tuple[float, float, float, float]) -> Any:
    x1, y1, x2, y2 = box
    return (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))


@given(first=POINTS, second=POINTS, boxes=BOXES, truth=BOXES)
def test_geometry_never_raises(first: list, second: list, boxes: list, truth: list) -> None:
    TRIED["geometry"] += 1
    assert 0.0 <= convex_hull_iou(first, second) <= 1.0
    if first:
        assert isinstance(point_in_convex_hull(first[0], second), bool)
    boxes, truth = [_sorted_box(b) for b in boxes], [_sorted_box(b) for b in truth]
    for a in boxes:
        for b in truth:
            assert 0.0 <= box_iou(a, b) <= 1.0
    assert 0.0 <= mean_best_iou(boxes, truth) <= 1.0
