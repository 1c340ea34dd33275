"""The benchmark registry: what each data source asks for, how it is scored, aggregated and drawn.

One :class:`Benchmark` per data source: the 9 keys of the paper's evaluation script and SpatialSim's
``spatialsim_<family>`` training families. ``compute_score`` dispatches here, ``aggregate`` and the
run summary take their metrics from here, the SpatialSim generator names its families' benchmarks
from here, and the report draws answers by the kind given here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from spacetools.rewards import metrics
from spacetools.rewards.scorers import (
    ScoreDict,
    is_yes_no_truth,
    score_boxes,
    score_choice,
    score_grasp,
    score_mask_points,
    score_pose,
    score_robospatial,
)

#: Takes the extracted answer text, the ground truth and ``extra_info``.
Scorer = Callable[[str, Any, Mapping[str, Any]], ScoreDict]
#: The answer formats of :mod:`spacetools.rewards.formats`.
AnswerKind = Literal["yes_no", "choice", "points", "corners", "grasp", "boxes"]
#: How the report draws a sample: an answer kind, or ``mask`` (points against a region mask).
DrawingKind = Literal["yes_no", "choice", "points", "corners", "grasp", "boxes", "mask"]

SPATIALSIM_PREFIX = "spatialsim_"


@dataclass(frozen=True)
class Benchmark:
    """One data source.

    ``family`` is the question family (the key without the SpatialSim prefix), ``suite`` the
    original benchmark it is or imitates. ``answers`` are the answer kinds its questions ask for:
    RoboSpatial asks yes/no questions and vacant-point questions, told apart by the ground truth.
    ``mask_truth`` marks ground truth given as a region mask (pointing scored inside it).
    ``headline_key`` is the per-sample figure whose mean is the headline (``acc``, ``iou``, ``mace``):
    a sample passes or fails by it, not by ``score``, which for SpatialSim pointing is the dense NNDC.
    """

    key: str
    family: str
    suite: str
    answers: tuple[AnswerKind, ...]
    scorer: Scorer
    aggregator: metrics.Aggregator
    mask_truth: bool = False
    headline_key: str = "acc"

    @property
    def spatialsim(self) -> bool:
        """True for SpatialSim's generated training families."""
        return self.key.startswith(SPATIALSIM_PREFIX)

    def answer_kind(self, ground_truth: Any) -> AnswerKind:
        """The answer format a sample with this ground truth asks for."""
        if len(self.answers) > 1:
            return "yes_no" if is_yes_no_truth(ground_truth) else "points"
        return self.answers[0]

    def drawing(self, ground_truth: Any) -> DrawingKind:
        """How to draw a sample with this ground truth: its answer kind, or ``mask``."""
        return "mask" if self.mask_truth else self.answer_kind(ground_truth)


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


def _paper(key: str, suite: str, answers: tuple[AnswerKind, ...], scorer: Scorer,
           aggregator: metrics.Aggregator, mask_truth: bool = False, headline_key: str = "acc") -> Benchmark:  # fmt: skip
    return Benchmark(key, key, suite, answers, scorer, aggregator, mask_truth, headline_key)


# The paper's keys give the official scorer's number as ``score``.
_PAPER = [
    _paper("robospatial", "RoboSpatial", ("yes_no", "points"), _robospatial, metrics.robospatial_metrics),
    *(
        _paper(key, "RefSpatial", ("points",), _mask_fraction, metrics.accuracy_metrics, mask_truth=True)
        for key in metrics.REFSPATIAL_SPLITS
    ),
    _paper("blinkdepth", "BLINK", ("choice",), _choice, metrics.accuracy_metrics),
    _paper("cvb2drelation", "CV-Bench", ("choice",), _choice, metrics.accuracy_metrics),
    _paper("cvb3ddepth", "CV-Bench", ("choice",), _choice, metrics.accuracy_metrics),
    _paper("boppose", "BOP-ASK", ("corners",), _pose, metrics.pose_metrics, headline_key="iou"),
    _paper("bopgrasp", "BOP-ASK", ("grasp",), _grasp, metrics.grasp_metrics, headline_key="mace"),
]
# SpatialSim families are training data: pointing is scored by the dense NNDC reward (``acc`` keeps
# the fraction inside), there is no unseen split, and there is a 2D detection family.
_SPATIALSIM = [
    *(
        replace(
            entry, key=SPATIALSIM_PREFIX + entry.key, scorer=_mask_nndc, aggregator=metrics.pointing_metrics
        )
        if entry.mask_truth
        else replace(entry, key=SPATIALSIM_PREFIX + entry.key)
        for entry in _PAPER
        if entry.key != "refunseen"
    ),
    Benchmark(
        "spatialsim_detect2d",
        "detect2d",
        "detection",
        ("boxes",),
        _boxes,
        metrics.box_metrics,
        headline_key="iou",
    ),
]

BENCHMARKS: dict[str, Benchmark] = {entry.key: entry for entry in (*_PAPER, *_SPATIALSIM)}
PAPER_DATA_SOURCES: tuple[str, ...] = tuple(key for key, b in BENCHMARKS.items() if not b.spatialsim)
SPATIALSIM_FAMILIES: tuple[str, ...] = tuple(b.family for b in BENCHMARKS.values() if b.spatialsim)
#: Benchmarks reported over several data sources together, with the data sources they take.
BENCHMARK_GROUPS: dict[str, tuple[tuple[str, ...], metrics.Aggregator]] = {
    "refspatial": (metrics.REFSPATIAL_SPLITS, metrics.refspatial_metrics),
}


def benchmark(data_source: str) -> Benchmark:
    """The registry entry of a data source (case and surrounding spaces ignored); ValueError naming
    the known keys when there is none."""
    key = data_source.strip().lower() if isinstance(data_source, str) else data_source
    found = BENCHMARKS.get(key) if isinstance(key, str) else None
    if found is None:
        raise ValueError(f"unknown data_source {data_source!r}; known: {', '.join(sorted(BENCHMARKS))}")
    return found


#: A sample passes when its headline figure is at least this (a correct answer where it is 0 or 1).
PASS_MARK = 0.5


def headline_value(data_source: str, score: Mapping[str, Any]) -> tuple[str, float]:
    """The sample's own headline figure and its name (``acc`` 0 or 1, ``iou``, ``mace``): what the
    benchmark's headline averages. ``score`` stands in where the data source or the key is unknown (a
    scorer failure's row holds ``score`` 0 only)."""
    benchmark = BENCHMARKS.get(data_source)
    key = benchmark.headline_key if benchmark is not None else "score"
    try:
        value = float(score[key])
    except (KeyError, TypeError, ValueError):
        key = "score"
        try:
            value = float(score.get("score", 0.0))
        except (TypeError, ValueError):
            value = 0.0
    return key, value if np.isfinite(value) else 0.0


def passed(data_source: str, score: Mapping[str, Any]) -> bool:
    """Whether a sample passes by its headline figure (:data:`PASS_MARK`)."""
    return headline_value(data_source, score)[1] >= PASS_MARK
