"""A generated question before it becomes a `Sample`, and the ground-truth string formats."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Question:
    """What a family generator produces for one scene.

    `image` is the picture shown with the question (the render, or with markers drawn in); `answer` is a
    reference answer a model could write (for mask ground truth, one point inside the mask).
    """

    text: str
    ground_truth: str
    answer: str
    qa_type: str
    image: np.ndarray
    choices: list[str] = field(default_factory=list)
    marked_points: list[list[float]] | None = None


def format_points(points: Iterable[Sequence[float]], decimals: int = 3) -> str:
    """`[(0.383, 0.873), (0.390, 0.990)]`: the point-list format of RoboSpatial and BOP-ASK."""
    return "[" + ", ".join(f"({x:.{decimals}f}, {y:.{decimals}f})" for x, y in points) + "]"


def format_boxes(boxes: Iterable[Sequence[float]], decimals: int = 3) -> str:
    """`[[x1, y1, x2, y2], ...]` normalized 2D boxes."""
    return "[" + ", ".join("[" + ", ".join(f"{c:.{decimals}f}" for c in box) + "]" for box in boxes) + "]"


GRASP_LABELS = (
    "Grasp center",
    "Left finger base",
    "Right finger base",
    "Left finger tip",
    "Right finger tip",
)


def format_grasp(points: np.ndarray, decimals: int = 3) -> str:
    """The five labelled gripper points of BOP-ASK grasp questions."""
    return ", ".join(
        f"{label}: [{x:.{decimals}f}, {y:.{decimals}f}]"
        for label, (x, y) in zip(GRASP_LABELS, points, strict=True)
    )


def letter(k: int) -> str:
    """`(A)` for 0, `(B)` for 1, ..."""
    return f"({chr(ord('A') + k)})"
