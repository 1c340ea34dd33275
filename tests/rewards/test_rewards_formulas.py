"""Every formula against a value computed by hand."""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spacetools.rewards import (
    box_iou,
    convex_hull_iou,
    grasp_mace,
    grasp_nce,
    grasp_reward,
    grasp_success,
    load_mask,
    mean_best_iou,
    nndc,
    score_boxes,
    score_choice,
    score_grasp,
    score_mask_points,
    score_pose,
    score_robospatial,
    score_vacant,
    score_yes_no,
)

# exp(-5·√2) = 0.000849326, the NNDC floor.
NNDC_AT_0_1 = 0.6061961920  # (exp(-0.5) - 0.000849326) / (1 - 0.000849326) = 0.605681 / 0.999151
NNDC_AT_0_5 = 0.0813047271  # (exp(-2.5) - 0.000849326) / (1 - 0.000849326) = 0.081235 / 0.999151

# A grasp 0.2 wide, fingers pointing down the image.
GRASP = np.array([[0.5, 0.5], [0.4, 0.5], [0.6, 0.5], [0.4, 0.6], [0.6, 0.6]])


def grasp_text(points: np.ndarray) -> str:
    labels = ("Grasp center", "Left finger base", "Right finger base", "Left finger tip", "Right finger tip")
    return ", ".join(f"{label}: [{x:.4f}, {y:.4f}]" for label, (x, y) in zip(labels, points, strict=True))


# --- NNDC -----------------------------------------------------------------------------------------


def test_nndc_hand_values() -> None:
    assert nndc(0.0) == pytest.approx(1.0)
    assert nndc(0.1) == pytest.approx(NNDC_AT_0_1, abs=1e-9)
    assert nndc(0.5) == pytest.approx(NNDC_AT_0_5, abs=1e-9)
    assert nndc(math.sqrt(2)) == pytest.approx(0.0, abs=1e-12)
    assert nndc(3.0) == 0.0  # clipped, never negative


# --- boxes ----------------------------------------------------------------------------------------


def test_box_iou_and_miou_hand_values() -> None:
    truth = [(0.5, 0.0, 1.5, 1.0)]
    assert box_iou((0.0, 0.0, 1.0, 1.0), truth[0]) == pytest.approx(1 / 3)  # 0.5 / (1 + 1 - 0.5)
    # Mean over predicted boxes of the best IoU: (1/3 + 0) / 2.
    assert mean_best_iou([(0.0, 0.0, 1.0, 1.0), (2.0, 2.0, 3.0, 3.0)], truth) == pytest.approx(1 / 6)
    result = score_boxes("[[0, 0, 1, 1], [3, 3, 2, 2]]", "[[0.5, 0, 1.5, 1]]")
    assert result["iou"] == pytest.approx(1 / 6)  # the second box is written with its corners swapped
    assert result["score"] == result["iou"]


def test_miou_takes_the_best_true_box_for_each_prediction() -> None:
    truth = "[[0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1]]"
    assert score_boxes("[[0.5, 0.5, 1, 1]]", truth)["score"] == pytest.approx(1.0)


# --- pose -----------------------------------------------------------------------------------------


UNIT_SQUARE_CORNERS = "[(0, 0), (1, 0), (1, 1), (0, 1), (0, 0), (1, 0), (1, 1), (0, 1)]"
SHIFTED_SQUARE_CORNERS = "[(0.5, 0), (1.5, 0), (1.5, 1), (0.5, 1), (0.5, 0), (1.5, 0), (1.5, 1), (0.5, 1)]"


def test_hull_iou_of_unit_squares_offset_by_half() -> None:
    square = [(0, 0), (1, 0), (1, 1), (0, 1)]
    shifted = [(x + 0.5, y) for x, y in square]
    assert convex_hull_iou(square, shifted) == pytest.approx(1 / 3)  # 0.5 / (1 + 1 - 0.5)
    assert score_pose(UNIT_SQUARE_CORNERS, SHIFTED_SQUARE_CORNERS)["iou"] == pytest.approx(1 / 3)


def test_pose_needs_exactly_eight_corners_on_both_sides() -> None:
    seven = "[(0, 0), (1, 0), (1, 1), (0, 1), (0, 0), (1, 0), (1, 1)]"
    assert score_pose(seven, UNIT_SQUARE_CORNERS) == {
        "score": 0.0,
        "iou": 0.0,
        "parse_ok": False,
        "reason": "answer has 7 corners, not 8",
    }
    assert score_pose(UNIT_SQUARE_CORNERS, seven)["score"] == 0.0
    nine = UNIT_SQUARE_CORNERS[:-1] + ", (0.5, 0.5)]"
    assert score_pose(nine, UNIT_SQUARE_CORNERS)["score"] == 0.0


# --- grasp ----------------------------------------------------------------------------------------


def test_shifted_grasp_nce_reward_mace() -> None:
    shifted = GRASP + np.array([0.1, 0.0])
    assert grasp_nce(shifted, GRASP) == pytest.approx(0.5)  # every point 0.1 off, width 0.2
    assert grasp_reward(0.5) == pytest.approx(0.95)  # 1 - 0.5 / 10
    assert grasp_mace(shifted, GRASP) == pytest.approx(0.75)  # 1 - ½·(0.5 + 0), directions unchanged
    result = score_grasp(grasp_text(shifted), grasp_text(GRASP))
    assert {key: result[key] for key in ("score", "nce", "mace", "sr")} == pytest.approx(
        {"score": 0.95, "nce": 0.5, "mace": 0.75, "sr": 1.0}
    )
    assert (result["parse_ok"], result["reason"]) == (True, "")


def test_reversed_fingers_mace_hand_value() -> None:
    # Fingers pointing up instead of down: the two tip directions are opposite (1 - cos = 2, /2 = 1),
    # the base directions agree; NCE = mean(0, 0, 0, 0.2, 0.2) / 0.2 = 0.4.
    flipped = GRASP.copy()
    flipped[3:, 1] = 0.4
    assert grasp_nce(flipped, GRASP) == pytest.approx(0.4)
    assert grasp_mace(flipped, GRASP) == pytest.approx(1 - 0.5 * (0 + 0.25 * 2))  # 0.75


def test_nce_is_capped_and_reward_floors_at_zero() -> None:
    far = GRASP + np.array([5.0, 5.0])
    assert grasp_nce(far, GRASP) == 10.0
    result = score_grasp(grasp_text(far), grasp_text(GRASP))
    assert result["score"] == 0.0
    assert result["mace"] == 0.0  # clamped
    assert result["reason"] == "grasp error at the cap"


def test_success_rate_threshold() -> None:
    assert not grasp_success(0.40)
    assert grasp_success(0.4001)
    # Centre 1.3 widths off, directions right: MACE = 1 - ½·1.3 = 0.35, a failure.
    off = GRASP + np.array([0.26, 0.0])
    assert grasp_mace(off, GRASP) == pytest.approx(0.35)
    assert score_grasp(grasp_text(off), grasp_text(GRASP))["sr"] == 0.0


def test_grasp_with_zero_width_truth_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="zero gripper width"):
        score_grasp(grasp_text(GRASP), grasp_text(np.full((5, 2), 0.5)))


# --- binary ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "score"),
    [("Yes", "Yes", 1.0), ("yes.", "Yes", 1.0), ("No, because it is behind.", "No", 1.0), ("NO", "Yes", 0.0)],
)
def test_yes_no(answer: str, truth: str, score: float) -> None:
    assert score_yes_no(answer, truth)["score"] == score


@pytest.mark.parametrize(
    ("answer", "truth", "score"),
    [
        ("(A)", "(A)", 1.0),
        ("A", "(A)", 1.0),
        ("B. the mug", "(B)", 1.0),
        ("(c)", "(C)", 1.0),
        ("(A)", "(B)", 0.0),
    ],
)
def test_choice(answer: str, truth: str, score: float) -> None:
    assert score_choice(answer, truth)["score"] == score


def test_choice_ground_truth_must_be_a_letter() -> None:
    with pytest.raises(ValueError, match="letter"):
        score_choice("(A)", "left")


# --- RoboSpatial vacant ---------------------------------------------------------------------------

SQUARE_REGION = "[(0.2, 0.2), (0.4, 0.2), (0.4, 0.4), (0.2, 0.4), (0.3, 0.3)]"


def test_vacant_uses_only_the_first_point() -> None:
    assert score_vacant("[(0.3, 0.25)]", SQUARE_REGION)["score"] == 1.0
    assert score_vacant("[(0.9, 0.9), (0.3, 0.3)]", SQUARE_REGION)["score"] == 0.0
    assert score_vacant("[(0.4, 0.3)]", SQUARE_REGION)["score"] == 1.0  # on the hull boundary


def test_robospatial_tells_rows_apart_by_ground_truth() -> None:
    assert score_robospatial("[(0.3, 0.3)]", SQUARE_REGION)["vacant"] is True
    assert score_robospatial("yes", "Yes")["vacant"] is False


# --- RefSpatial masks -----------------------------------------------------------------------------


@pytest.fixture
def left_half_mask() -> np.ndarray:
    """10x10, the five left columns inside: centroid at u = (2 + 0.5) / 10 = 0.25, v = 0.5."""
    mask = np.zeros((10, 10), dtype=bool)
    mask[:, :5] = True
    return mask


def test_fraction_of_points_inside(left_half_mask: np.ndarray) -> None:
    result = score_mask_points("[(0.2, 0.5), (0.75, 0.5)]", left_half_mask)
    assert result["acc"] == 0.5
    assert result["score"] == 0.5
    assert result["nndc"] == pytest.approx((1.0 + NNDC_AT_0_5) / 2)  # inside counts 1; 0.5 from centroid


def test_integer_points_are_pixels(left_half_mask: np.ndarray) -> None:
    assert score_mask_points("[(3, 5)]", left_half_mask)["acc"] == 1.0  # pixel column 3
    assert score_mask_points("[(7, 5)]", left_half_mask)["acc"] == 0.0
    assert score_mask_points("[(12, 5)]", left_half_mask)["acc"] == 0.0  # beyond the image width


def test_points_outside_the_image_are_misses(left_half_mask: np.ndarray) -> None:
    assert score_mask_points("[(-0.1, 0.5), (0.2, 1.2), (0.2, 0.5)]", left_half_mask)["acc"] == pytest.approx(
        1 / 3
    )


def test_nndc_reward_mode(left_half_mask: np.ndarray) -> None:
    result = score_mask_points("[(0.75, 0.5)]", left_half_mask, reward="nndc")  # outside, d = 0.5
    assert result["acc"] == 0.0
    assert result["score"] == pytest.approx(NNDC_AT_0_5, abs=1e-9)


def test_mask_from_every_form(tmp_path: Path, left_half_mask: np.ndarray) -> None:
    buffer = io.BytesIO()
    Image.fromarray(left_half_mask.astype(np.uint8) * 255).save(buffer, format="PNG")
    png = buffer.getvalue()
    path = tmp_path / "mask.png"
    path.write_bytes(png)
    data_uri = "data:image/png;base64," + base64.b64encode(png).decode()
    for form in (left_half_mask, png, str(path), path, data_uri, base64.b64encode(png).decode()):
        assert np.array_equal(load_mask(form), left_half_mask)
        assert score_mask_points("[(0.2, 0.5)]", form)["score"] == 1.0


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ("not a mask", "neither a data URI"),
        (b"\x00\x01", "not a readable image"),
        (np.zeros(3), "2D"),
        (3, "type"),
    ],
)
def test_bad_mask_is_a_clear_error(mask: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_mask(mask)


def test_score_dicts_are_json_plain(left_half_mask: np.ndarray) -> None:
    for result in (
        score_mask_points("[(0.2, 0.5)]", left_half_mask),
        score_grasp(grasp_text(GRASP), grasp_text(GRASP)),
        score_pose(UNIT_SQUARE_CORNERS, SHIFTED_SQUARE_CORNERS),
    ):
        assert json.loads(json.dumps(result)) == result
