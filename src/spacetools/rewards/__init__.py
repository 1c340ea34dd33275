"""Rewards and answer parsing that reproduce the original SpaceTools scorers.

``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` is verl's custom reward
signature and can be handed to verl as it is; ``aggregate(benchmark_key, rows)`` gives the paper's
benchmark metrics. This package imports nothing else from spacetools.
"""

from spacetools.rewards.aggregate import BENCHMARK_KEYS, REFSPATIAL_SPLITS, aggregate
from spacetools.rewards.dispatch import (
    PAPER_DATA_SOURCES,
    SCORERS,
    SPATIALSIM_FAMILIES,
    SPATIALSIM_PREFIX,
    compute_score,
    scorer_for,
)
from spacetools.rewards.extraction import ExtractedAnswer, extract_answer
from spacetools.rewards.geometry import (
    box_iou,
    convex_hull_iou,
    mean_best_iou,
    nndc,
    point_in_convex_hull,
)
from spacetools.rewards.masks import load_mask
from spacetools.rewards.parsing import (
    GRASP_LABELS,
    normalize_choice_label,
    parse_boxes,
    parse_choice,
    parse_corners,
    parse_grasp,
    parse_point_tokens,
    parse_points,
    parse_yes_no,
)
from spacetools.rewards.scorers import (
    NCE_CAP,
    POSE_CORNERS,
    SR_MACE_THRESHOLD,
    grasp_mace,
    grasp_nce,
    grasp_reward,
    grasp_success,
    mask_centroid,
    score_boxes,
    score_choice,
    score_grasp,
    score_mask_points,
    score_pose,
    score_robospatial,
    score_vacant,
    score_yes_no,
)

__all__ = [
    "BENCHMARK_KEYS",
    "GRASP_LABELS",
    "NCE_CAP",
    "PAPER_DATA_SOURCES",
    "POSE_CORNERS",
    "REFSPATIAL_SPLITS",
    "SCORERS",
    "SPATIALSIM_FAMILIES",
    "SPATIALSIM_PREFIX",
    "SR_MACE_THRESHOLD",
    "ExtractedAnswer",
    "aggregate",
    "box_iou",
    "compute_score",
    "convex_hull_iou",
    "extract_answer",
    "grasp_mace",
    "grasp_nce",
    "grasp_reward",
    "grasp_success",
    "load_mask",
    "mask_centroid",
    "mean_best_iou",
    "nndc",
    "normalize_choice_label",
    "parse_boxes",
    "parse_choice",
    "parse_corners",
    "parse_grasp",
    "parse_point_tokens",
    "parse_points",
    "parse_yes_no",
    "point_in_convex_hull",
    "score_boxes",
    "score_choice",
    "score_grasp",
    "score_mask_points",
    "score_pose",
    "score_robospatial",
    "score_vacant",
    "score_yes_no",
    "scorer_for",
]
