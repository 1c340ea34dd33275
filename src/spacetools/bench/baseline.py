"""The constant-guess baseline: the best single answer given to every question of a benchmark unseen.

A trained model shows skill on a benchmark only where it beats what a constant answer scores there
(GRPO on the dense pointing reward can learn `[(0.500, 0.500)]`, and a yes/no benchmark gives half its
points to "yes"). The constant is chosen on the training questions, as a model could learn it, and
scored on the held-out ones by the benchmark's own scorer and aggregator, with the same bootstrap
interval as a model's score.

Candidates: every choice label the questions offer, "yes" and "no", and for pointing a grid of points
over the image. Benchmarks whose answers are boxes, corners or grasps have no constant candidate here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from spacetools.bench import bootstrap
from spacetools.bench.dataset import Sample
from spacetools.rewards import BENCHMARKS, aggregate, compute_score
from spacetools.rewards.masks import load_mask

#: Pointing candidates: the points of a 19 × 19 grid, 0.05 to 0.95 of the width and height.
GRID = np.round(np.linspace(0.05, 0.95, 19), 3)


@dataclass(frozen=True)
class ConstantGuess:
    """One benchmark's best constant answer: its mean score on the training questions that chose it, and
    its headline on the held-out questions with the 95% bootstrap interval."""

    benchmark: str
    answer: str
    train_score: float
    headline: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def candidate_answers(benchmark: str, samples: Sequence[Sample]) -> list[str]:
    """The constant answers worth trying on `benchmark` (empty when its answers are not discrete)."""
    kinds = BENCHMARKS[benchmark].answers
    candidates: list[str] = []
    if "points" in kinds:
        candidates += [f"[({x:.3f}, {y:.3f})]" for y in GRID for x in GRID]
    if "choice" in kinds:
        most = max((len(sample.extra_info.get("choices") or []) for sample in samples), default=0)
        candidates += [f"({chr(ord('A') + index)})" for index in range(most)]
    if "yes_no" in kinds:
        candidates += ["yes", "no"]
    return candidates


def _score_dict(sample: Sample, answer: str) -> dict[str, Any]:
    return dict(
        compute_score(
            sample.data_source, f"<answer>{answer}</answer>", sample.ground_truth, sample.extra_info
        )
    )


def _train_scores(benchmark: str, samples: Sequence[Sample], candidates: list[str]) -> np.ndarray:
    """The mean training score of each candidate. Mask truths are decoded once and the grid read from each
    mask (the scorer's own rule: a point at (x, y) hits pixel (int(x·W), int(y·H))); the rest are scored."""
    if BENCHMARKS[benchmark].mask_truth and all(candidate.startswith("[(") for candidate in candidates):
        hits = np.zeros((len(GRID), len(GRID)))
        for sample in samples:
            region = load_mask(sample.ground_truth)
            height, width = region.shape
            rows = np.minimum((GRID * height).astype(int), height - 1)
            columns = np.minimum((GRID * width).astype(int), width - 1)
            hits += region[np.ix_(rows, columns)]
        return (hits / max(len(samples), 1)).ravel()
    return np.array(
        [np.mean([_score_dict(sample, answer)["score"] for sample in samples]) for answer in candidates]
    )


def _headline_interval(benchmark: str, rows: list[dict[str, Any]]) -> tuple[float, float]:
    def headline(indices: np.ndarray) -> dict[str, float]:
        return aggregate(benchmark, [rows[i] for i in indices])

    return bootstrap.statistic_intervals(len(rows), headline)["headline"]


def constant_guesses(train: Sequence[Sample], held_out: Sequence[Sample]) -> dict[str, ConstantGuess]:
    """The best constant answer per benchmark of `held_out`, chosen on `train`'s questions of that benchmark."""
    by_benchmark: dict[str, list[Sample]] = defaultdict(list)
    for sample in train:
        by_benchmark[sample.data_source].append(sample)
    held: dict[str, list[Sample]] = defaultdict(list)
    for sample in held_out:
        held[sample.data_source].append(sample)
    guesses = {}
    for benchmark, questions in sorted(held.items()):
        chosen_from = by_benchmark.get(benchmark, [])
        candidates = candidate_answers(benchmark, [*chosen_from, *questions])
        if not chosen_from or not candidates:
            continue
        scores = _train_scores(benchmark, chosen_from, candidates)
        best = int(np.argmax(scores))  # the first of equals: the grid's order, then the choices'
        answer = candidates[best]
        rows = [_score_dict(sample, answer) for sample in questions]
        headline = float(aggregate(benchmark, rows)["headline"])
        low, high = _headline_interval(benchmark, rows)
        guesses[benchmark] = ConstantGuess(
            benchmark, answer, float(scores[best]), headline, float(low), float(high), len(questions)
        )
    return guesses
