"""The reward entry point verl calls, and the table from data source to scorer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

if not __package__:
    # Loaded as a file (verl's `reward.custom_reward_function.path`), perhaps from a checkout that is not
    # installed: import the rest of the package from the tree this file lies in.
    _SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
    if _SOURCE_ROOT not in sys.path:
        sys.path.insert(0, _SOURCE_ROOT)

from spacetools.rewards.extraction import extract_answer
from spacetools.rewards.scorers import (
    ScoreDict,
    score_boxes,
    score_choice,
    score_grasp,
    score_mask_points,
    score_pose,
    score_robospatial,
)

Scorer = Callable[[str, Any, Mapping[str, Any]], ScoreDict]

SPATIALSIM_PREFIX = "spatialsim_"


def _choices(extra_info: Mapping[str, Any]) -> list[str] | None:
    """The option texts from ``extra_info["choices"]`` (a list, tuple or numpy array), or None."""
    choices = extra_info.get("choices")
    if isinstance(choices, list | tuple | np.ndarray):
        return [str(choice) for choice in choices]
    return None


def _robospatial(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_robospatial(answer, truth)


def _choice(answer: str, truth: Any, info: Mapping[str, Any]) -> ScoreDict:
    return score_choice(answer, truth, _choices(info))


def _mask_fraction(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_mask_points(answer, truth, reward="fraction")


def _mask_nndc(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_mask_points(answer, truth, reward="nndc")


def _pose(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_pose(answer, truth)


def _grasp(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_grasp(answer, truth)


def _boxes(answer: str, truth: Any, _info: Mapping[str, Any]) -> ScoreDict:
    return score_boxes(answer, truth)


# The paper's benchmark keys give the official scorer's number as ``score``.
_PAPER_SCORERS: dict[str, Scorer] = {
    "robospatial": _robospatial,
    "reflocation": _mask_fraction,
    "refplacement": _mask_fraction,
    "refunseen": _mask_fraction,
    "blinkdepth": _choice,
    "cvb2drelation": _choice,
    "cvb3ddepth": _choice,
    "boppose": _pose,
    "bopgrasp": _grasp,
}
# SpatialSim families are training data: pointing is scored by the dense NNDC reward (``acc`` keeps
# the fraction inside), and there is a 2D detection family.
_SPATIALSIM_SCORERS: dict[str, Scorer] = {
    "robospatial": _robospatial,
    "reflocation": _mask_nndc,
    "refplacement": _mask_nndc,
    "blinkdepth": _choice,
    "cvb2drelation": _choice,
    "cvb3ddepth": _choice,
    "boppose": _pose,
    "bopgrasp": _grasp,
    "detect2d": _boxes,
}
PAPER_DATA_SOURCES: tuple[str, ...] = tuple(_PAPER_SCORERS)
SPATIALSIM_FAMILIES: tuple[str, ...] = tuple(_SPATIALSIM_SCORERS)
SCORERS: dict[str, Scorer] = {
    **_PAPER_SCORERS,
    **{SPATIALSIM_PREFIX + family: scorer for family, scorer in _SPATIALSIM_SCORERS.items()},
}


def scorer_for(data_source: str) -> Scorer:
    """The scorer of a data source; ValueError naming the known keys when there is none."""
    key = data_source.strip().lower() if isinstance(data_source, str) else data_source
    scorer = SCORERS.get(key) if isinstance(key, str) else None
    if scorer is None:
        raise ValueError(f"unknown data_source {data_source!r}; known: {', '.join(sorted(SCORERS))}")
    return scorer


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **_verl_extras: Any,
) -> ScoreDict:
    """Score one model output; verl's custom reward function signature.

    Returns ``score`` (the training reward, a float in [0, 1]) and the data source's metrics, with
    ``parse_ok``, ``reason`` (why the score is 0 when it is) and ``answer_tagged`` (the answer came
    from a complete ``<answer>`` tag rather than a fallback). One data source always gives the same
    keys. Never raises on ``solution_str``; raises ValueError for an unknown ``data_source`` or a
    malformed ground truth. Extra keyword arguments that some verl versions pass are ignored.
    """
    scorer = scorer_for(data_source)
    answer = extract_answer(solution_str)
    result = scorer(answer.text, ground_truth, extra_info or {})
    if answer.source == "none":
        result["reason"] = "no answer found in the output"
    result["answer_tagged"] = answer.tagged
    return result
