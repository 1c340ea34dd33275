"""Question wordings per family, in the style of the original benchmarks, with their answer-format lines."""

from __future__ import annotations

import numpy as np

YES_NO_INSTRUCTION = "Answer yes or no."

POINTS_INSTRUCTION = (
    "Your answer should be formatted as a list of tuples, i.e. [(x1, y1)], where each tuple contains the x "
    "and y coordinates of a point satisfying the conditions above. The coordinates should be between 0 "
    "and 1, "
    "indicating the normalized pixel locations of the points in the image."
)

REF_POINTS_INSTRUCTION = (
    "Your answer should be formatted as a list of tuples, i.e. [(x1, y1), (x2, y2), ...], where each tuple "
    "contains the x and y coordinates of a point satisfying the conditions above. The coordinates should be "
    "between 0 and 1, indicating the normalized pixel locations of the points in the image."
)

CORNERS_INSTRUCTION = (
    "Give the 8 corners of the box projected into the image in BOP order: the 4 bottom corners first, then "
    "the 4 top corners, each face counter-clockwise when seen from above, corner i+4 above corner i. Your "
    "answer should be formatted as a list of tuples, i.e. [(x1, y1), (x2, y2), ..., (x8, y8)], with "
    "coordinates between 0 and 1 (normalized pixel locations in the image)."
)

GRASP_INSTRUCTION = (
    "Your answer should be formatted as: Grasp center: [x, y], Left finger base: [x, y], Right finger base: "
    "[x, y], Left finger tip: [x, y], Right finger tip: [x, y], with coordinates between 0 and 1 "
    "(normalized pixel locations in the image)."
)

BOXES_INSTRUCTION = (
    "Your answer should be formatted as a list of boxes, i.e. [[x1, y1, x2, y2], ...], one box per instance, "
    "where (x1, y1) is the top-left and (x2, y2) the bottom-right corner, with coordinates between 0 and 1 "
    "(normalized pixel locations in the image)."
)

CHOICE_INSTRUCTION = "Select from the following choices."

CONFIGURATION = (
    "Is the {a} {relation} the {b}?",
    "From the camera's viewpoint, is the {a} {relation} the {b}?",
    "In the image, is the {a} {relation} the {b}?",
)

COMPATIBILITY = (
    "Can the {a} fit {side} the {b}?",
    "Is there enough room for the {a} {side} the {b}?",
    "Could the {a} be placed {side} the {b} on the table?",
)

VACANT = (
    "In the image, there is a {b}. Pinpoint one point within the vacant space suitable for placing an object "
    "close to and {side} the {b}.",
    "Point to a free spot on the table {side} the {b} where an object could be put down.",
    "There is a {b} in the image. Find one point in the empty space close to and {side} the {b}.",
)

LOCATION = (
    "Please point out the {a} {relation} the {b}.",
    "Locate the {a} that is {relation} the {b} in the image.",
    "Where is the {a} {relation} the {b}? Point to it.",
)

PLACEMENT = (
    "Please point out the free space {side} the {b} where the {a} could be placed.",
    "Point to the vacant area on the table {side} the {b} suitable for placing the {a}.",
    "Identify free table space {side} the {b} to put the {a} down.",
)

BLINK_DEPTH = (
    "Two points are circled on the image, labeled by A and B beside each circle. Which point is closer to "
    "the camera?",
    "Two points in the image are marked with circles labelled A and B. Which of them is closer to the "
    "camera?",
    "Points A and B are circled in the image. Which point is nearer to the camera?",
)

CVB_2D_RELATION = (
    "Considering the relative positions of the {a} and the {b} in the image provided, where is the {a} "
    "located with respect to the {b}?",
    "Where is the {a} located with respect to the {b} in the image?",
    "In the image, what is the position of the {a} relative to the {b}?",
)

CVB_3D_DEPTH = (
    "Which object is closer to the camera taking this photo, the {a} (highlighted by a red box) or the {b} "
    "(highlighted by a blue box)?",
    "Which of these two objects is nearer to the camera, the {a} (red box) or the {b} (blue box)?",
    "Looking at the {a} (highlighted by a red box) and the {b} (highlighted by a blue box), which one is "
    "closer to the camera?",
)

POSE = (
    "Estimate the 3D bounding box of the {a}.",
    "What is the 3D oriented bounding box of the {a} in the image?",
    "Predict the 3D bounding box that tightly encloses the {a}.",
)

GRASP = (
    "Predict a parallel-jaw grasp for picking up the {a}.",
    "Where should a two-finger gripper grasp the {a}? Give the gripper's key points.",
    "Propose a grasp of the {a} with a parallel gripper.",
)

DETECT = (
    "Detect every {a} in the image and output its 2D bounding box.",
    "Find all instances of {a} in the image and give their bounding boxes.",
    "Output the 2D bounding boxes of all {a} objects in the image.",
)


def pick(templates: tuple[str, ...], rng: np.random.Generator, **names: str) -> str:
    """One wording of a template family, filled in."""
    return templates[int(rng.integers(len(templates)))].format(**names)


def with_choices(question: str, options: list[str]) -> str:
    """A question followed by the instruction line and `(A) …` / `(B) …` option lines."""
    lines = [question, CHOICE_INSTRUCTION]
    lines += [f"({chr(ord('A') + k)}) {option}" for k, option in enumerate(options)]
    return "\n".join(lines)
