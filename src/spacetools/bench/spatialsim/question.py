"""A generated question before it becomes a `Sample` (its answers are written by `spacetools.rewards.formats`)."""

from __future__ import annotations

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
