"""One scorer per answer format, each returning a score dict with a fixed key set.

Every scorer takes the extracted answer text (see ``extraction``) and the ground truth, never raises
on the answer, and returns plain floats/bools/str: ``score`` in [0, 1], the format's metrics,
``parse_ok`` and ``reason`` (empty when the answer was scored, else why it got 0). A malformed ground
truth is a dataset bug and raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from spacetools.rewards.formats import (
    GRASP_LABELS,
    Box,
    Point,
    normalize_choice_label,
    parse_boxes,
    parse_choice,
    parse_corners,
    parse_grasp,
    parse_point_tokens,
    parse_points,
    parse_yes_no,
)
from spacetools.rewards.geometry import convex_hull_iou, mean_best_iou, nndc, point_in_convex_hull
from spacetools.rewards.masks import load_mask

POSE_CORNERS = 8
NCE_CAP = 10.0  # δmax of the paper: NCE is capped here and the reward is 1 - NCE / NCE_CAP
SR_MACE_THRESHOLD = 0.40  # a grasp counts as a success when MACE > 0.40
_COORDINATE_LIMIT = 1e3  # normalized units; see score_grasp

ScoreDict = dict[str, Any]


def _result(score: float, parse_ok: bool, reason: str = "", **metrics: float | bool) -> ScoreDict:
    """A score dict: ``score`` first, then metrics, ``parse_ok`` and ``reason``."""
    values: ScoreDict = {"score": float(score)}
    for name, value in metrics.items():
        values[name] = value if isinstance(value, bool) else float(value)
    values["parse_ok"] = bool(parse_ok)
    values["reason"] = reason
    return values


def _points_from_truth(ground_truth: Any, what: str) -> list[Point]:
    """Points from a ground truth given as a point-list string or a sequence of pairs."""
    if isinstance(ground_truth, str):
        points = parse_points(ground_truth)
    else:
        try:
            points = [(float(p[0]), float(p[1])) for p in ground_truth]
        except (TypeError, IndexError, ValueError) as error:
            raise ValueError(
                f"{what} ground truth is not a list of (x, y) points: {ground_truth!r}"
            ) from error
    if not points:
        raise ValueError(f"{what} ground truth has no (x, y) points: {str(ground_truth)[:80]!r}")
    return points


def _answer_text(answer: Any) -> str:
    """The answer as a string ('' for None or any other non-string)."""
    return answer if isinstance(answer, str) else ""


# --- binary ---------------------------------------------------------------------------------------


def is_yes_no_truth(ground_truth: Any) -> bool:
    """True when a RoboSpatial ground truth is a yes/no answer rather than a point list."""
    return isinstance(ground_truth, str) and ground_truth.strip().lower() in ("yes", "no")


def score_yes_no(answer: str, ground_truth: str) -> ScoreDict:
    """1 when the answer starts with the ground truth's yes/no (any case), else 0. Keys: acc."""
    if not is_yes_no_truth(ground_truth):
        raise ValueError(f"yes/no ground truth must be 'Yes' or 'No', got {ground_truth!r}")
    truth = ground_truth.strip().lower() == "yes"
    said = parse_yes_no(_answer_text(answer))
    if said is None:
        return _result(0.0, False, "answer does not start with yes or no", acc=0.0)
    correct = said == truth
    return _result(float(correct), True, "" if correct else "wrong yes/no", acc=float(correct))


def score_choice(answer: str, ground_truth: str, choices: Sequence[str] | None = None) -> ScoreDict:
    """1 when the answer picks the ground-truth option letter (``A`` or ``(A)``), else 0. Keys: acc."""
    truth = normalize_choice_label(str(ground_truth))
    if truth is None:
        raise ValueError(f"multiple-choice ground truth must be a letter such as '(A)', got {ground_truth!r}")
    picked = parse_choice(_answer_text(answer), choices)
    if picked is None:
        return _result(0.0, False, "no option letter in the answer", acc=0.0)
    correct = picked == truth
    return _result(float(correct), True, "" if correct else f"picked ({picked})", acc=float(correct))


# --- RoboSpatial ----------------------------------------------------------------------------------


def score_vacant(answer: str, region_points: Any) -> ScoreDict:
    """1 when the FIRST predicted point lies in the convex hull (boundary included) of the ground-truth
    sample points of the free region, else 0. Keys: acc."""
    region = _points_from_truth(region_points, "vacant-region")
    points = parse_points(_answer_text(answer))
    if not points:
        return _result(0.0, False, "no (x, y) point in the answer", acc=0.0)
    inside = point_in_convex_hull(points[0], region)
    return _result(float(inside), True, "" if inside else "point outside the free region", acc=float(inside))


def score_robospatial(answer: str, ground_truth: Any) -> ScoreDict:
    """RoboSpatial: yes/no rows and vacant-point rows, told apart by the ground truth itself.

    Keys: acc, vacant (True for a point row).
    """
    if is_yes_no_truth(ground_truth):
        return {**score_yes_no(answer, ground_truth), "vacant": False}
    return {**score_vacant(answer, ground_truth), "vacant": True}


# --- pointing into a mask (RefSpatial) ------------------------------------------------------------


def _token_is_pixel(token: str) -> bool:
    """An integer-written coordinate (no decimal point, no exponent) is a pixel index."""
    return not any(mark in token for mark in ".eE")


def _points_in_mask_frame(answer: str, width: int, height: int) -> list[Point]:
    """Predicted points as normalized (u, v); integer coordinates are pixels and map to pixel centres."""
    points = []
    for x_token, y_token in parse_point_tokens(answer):
        x, y = float(x_token), float(y_token)
        u = (x + 0.5) / width if _token_is_pixel(x_token) else x
        v = (y + 0.5) / height if _token_is_pixel(y_token) else y
        if math.isfinite(u) and math.isfinite(v):
            points.append((u, v))
    return points


def _inside_mask(mask: np.ndarray, u: float, v: float) -> bool:
    """Whether normalized (u, v) falls on a mask pixel; outside [0, 1] is a miss."""
    height, width = mask.shape
    if not (0.0 <= u <= 1.0 and 0.0 <= v <= 1.0):
        return False
    return bool(mask[min(int(v * height), height - 1), min(int(u * width), width - 1)])


def mask_centroid(mask: np.ndarray) -> Point:
    """Centroid of the mask's pixel centres in normalized coordinates."""
    rows, cols = np.nonzero(mask)
    height, width = mask.shape
    return (float((cols.mean() + 0.5) / width), float((rows.mean() + 0.5) / height))


def score_mask_points(answer: str, mask: Any, *, reward: str = "fraction") -> ScoreDict:
    """Points against a region mask (RefSpatial and pointing training data).

    ``acc``: the fraction of predicted points inside the mask (floats are normalized and scaled by the
    mask size, integers are pixels, outside the image is a miss) — the official RefSpatial score.
    ``nndc``: the mean over points of max(NNDC(distance to the mask centroid), 1 if inside) — the
    dense pointing training reward. ``reward`` picks which one is ``score``: "fraction" or "nndc".
    """
    if reward not in ("fraction", "nndc"):
        raise ValueError(f"reward must be 'fraction' or 'nndc', got {reward!r}")
    region = load_mask(mask)
    if not region.any():
        raise ValueError("mask ground truth is empty (no pixel inside)")
    height, width = region.shape
    points = _points_in_mask_frame(_answer_text(answer), width, height)
    if not points:
        return _result(0.0, False, "no (x, y) point in the answer", acc=0.0, nndc=0.0)
    centre = mask_centroid(region)
    inside = [_inside_mask(region, u, v) for u, v in points]
    dense = [
        1.0 if hit else nndc(math.dist((u, v), centre)) for (u, v), hit in zip(points, inside, strict=True)
    ]
    fraction, mean_dense = float(np.mean(inside)), float(np.mean(dense))
    score = fraction if reward == "fraction" else mean_dense
    reason = "" if all(inside) else f"{len(inside) - sum(inside)} of {len(inside)} points outside the mask"
    return _result(score, True, reason, acc=fraction, nndc=mean_dense)


# --- boxes and poses ------------------------------------------------------------------------------


def _boxes_from_truth(ground_truth: Any) -> list[Box]:
    """Boxes from a ground truth given as a string or a sequence of 4-number sequences."""
    if isinstance(ground_truth, str):
        boxes = parse_boxes(ground_truth)
    else:
        try:
            boxes = parse_boxes(str([[float(v) for v in box] for box in ground_truth]))
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"box ground truth is not a list of [x1, y1, x2, y2]: {ground_truth!r}"
            ) from error
    if not boxes:
        raise ValueError(f"box ground truth has no [x1, y1, x2, y2] box: {str(ground_truth)[:80]!r}")
    return boxes


def score_boxes(answer: str, ground_truth: Any) -> ScoreDict:
    """MIoU: the mean over predicted boxes of the best IoU with any true box. Keys: iou."""
    truth = _boxes_from_truth(ground_truth)
    predicted = parse_boxes(_answer_text(answer))
    if not predicted:
        return _result(0.0, False, "no [x1, y1, x2, y2] box in the answer", iou=0.0)
    iou = mean_best_iou(predicted, truth)
    return _result(iou, True, "" if iou > 0 else "no overlap with any true box", iou=iou)


def score_pose(answer: str, ground_truth: Any) -> ScoreDict:
    """IoU of the convex hulls of predicted and true box corners; 0 unless both have exactly 8.

    Corner order does not matter. Keys: iou.
    """
    truth = _points_from_truth(ground_truth, "pose")
    if len(truth) != POSE_CORNERS:
        return _result(0.0, True, f"ground truth has {len(truth)} corners, not {POSE_CORNERS}", iou=0.0)
    corners = parse_corners(_answer_text(answer))
    if len(corners) != POSE_CORNERS:
        return _result(0.0, False, f"answer has {len(corners)} corners, not {POSE_CORNERS}", iou=0.0)
    iou = convex_hull_iou(corners, truth)
    return _result(iou, True, "" if iou > 0 else "hull IoU is 0", iou=iou)


# --- grasps ---------------------------------------------------------------------------------------


def _grasp_from_truth(ground_truth: Any) -> np.ndarray:
    """The true five grasp points ``(5, 2)`` from the labelled string or an array-like."""
    if isinstance(ground_truth, str):
        points = parse_grasp(ground_truth)
    else:
        points = np.asarray(ground_truth, dtype=float) if ground_truth is not None else None
    if points is None or points.shape != (len(GRASP_LABELS), 2) or not np.isfinite(points).all():
        raise ValueError(f"grasp ground truth must name the five points {GRASP_LABELS}: {ground_truth!r}")
    return points


def gripper_width(points: np.ndarray) -> float:
    """Distance between the left and right finger bases."""
    return float(np.linalg.norm(points[2] - points[1]))


def grasp_nce(predicted: np.ndarray, truth: np.ndarray) -> float:
    """Normalized contact error: mean point distance over the TRUE gripper width, capped at NCE_CAP."""
    width = gripper_width(truth)
    if width <= 0:
        raise ValueError("grasp ground truth has coincident finger bases (zero gripper width)")
    distance = float(np.linalg.norm(predicted - truth, axis=1).mean())
    return min(distance / width, NCE_CAP)


def grasp_reward(nce: float) -> float:
    """Training reward NNCE = 1 - min(NCE, cap) / cap, in [0, 1]."""
    return 1.0 - min(max(nce, 0.0), NCE_CAP) / NCE_CAP


def _grasp_directions(points: np.ndarray) -> np.ndarray:
    """The four gripper direction vectors: centre→left base, centre→right base, left base→left tip,
    right base→right tip."""
    centre, left_base, right_base, left_tip, right_tip = points
    return np.array([left_base - centre, right_base - centre, left_tip - left_base, right_tip - right_base])


def _cosine(first: np.ndarray, second: np.ndarray) -> float:
    """Cosine of the angle between two vectors; 1 when both have zero length (they agree), 0
    (orthogonal) when only one has."""
    first_norm, second_norm = float(np.linalg.norm(first)), float(np.linalg.norm(second))
    if first_norm == 0.0 and second_norm == 0.0:
        return 1.0
    if first_norm == 0.0 or second_norm == 0.0:
        return 0.0
    return float(np.clip(np.dot(first, second) / (first_norm * second_norm), -1.0, 1.0))


def grasp_mace(predicted: np.ndarray, truth: np.ndarray) -> float:
    """MACE = 1 - ½·(‖ĉ - c‖ / w + ¼·Σₖ (1 - cos(r̂ₖ, rₖ)) / 2), clamped at 0.

    The clamp keeps a wildly wrong centre from scoring below an unparsable answer (which gets 0).
    """
    width = gripper_width(truth)
    if width <= 0:
        raise ValueError("grasp ground truth has coincident finger bases (zero gripper width)")
    centre_error = float(np.linalg.norm(predicted[0] - truth[0])) / width
    angle_error = np.mean(
        [
            (1.0 - _cosine(p, t)) / 2.0
            for p, t in zip(_grasp_directions(predicted), _grasp_directions(truth), strict=True)
        ]
    )
    return max(0.0, 1.0 - 0.5 * (centre_error + float(angle_error)))


def grasp_success(mace: float) -> bool:
    """SR criterion: MACE above SR_MACE_THRESHOLD."""
    return mace > SR_MACE_THRESHOLD


def score_grasp(answer: str, ground_truth: Any) -> ScoreDict:
    """Five-point grasp: score = 1 - NCE/10 (NCE capped at 10); metrics nce, mace, sr (1.0 or 0.0)."""
    truth = _grasp_from_truth(ground_truth)
    predicted = parse_grasp(_answer_text(answer))
    if predicted is None:
        reason = "answer does not give the five labelled grasp points"
        return _result(0.0, False, reason, nce=NCE_CAP, mace=0.0, sr=0.0)
    # Points a thousand image widths away already score 0; clipping them keeps the vector maths finite.
    predicted = np.clip(predicted, -_COORDINATE_LIMIT, _COORDINATE_LIMIT)
    nce = grasp_nce(predicted, truth)
    mace = grasp_mace(predicted, truth)
    reason = "grasp error at the cap" if nce >= NCE_CAP else ""
    return _result(grasp_reward(nce), True, reason, nce=nce, mace=mace, sr=float(grasp_success(mace)))
