"""The reward entry point verl calls: ``compute_score`` dispatches on the benchmark registry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spacetools.rewards.benchmarks import BENCHMARKS, Scorer, benchmark
from spacetools.rewards.extraction import extract_answer
from spacetools.rewards.scorers import ScoreDict

#: Data source → scorer, as registered in :data:`spacetools.rewards.benchmarks.BENCHMARKS`.
SCORERS: dict[str, Scorer] = {key: entry.scorer for key, entry in BENCHMARKS.items()}


def scorer_for(data_source: str) -> Scorer:
    """The scorer of a data source; ValueError naming the known keys when there is none."""
    return benchmark(data_source).scorer


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
    keys. Never raises on ``solution_str`` and takes time linear in its length; raises ValueError
    for an unknown ``data_source`` or a malformed ground truth. Extra keyword arguments that some
    verl versions pass are ignored.
    """
    scorer = scorer_for(data_source)
    answer = extract_answer(solution_str)
    result = scorer(answer.text, ground_truth, extra_info or {})
    if answer.source == "none":
        result["reason"] = "no answer found in the output"
    result["answer_tagged"] = answer.tagged
    return result
