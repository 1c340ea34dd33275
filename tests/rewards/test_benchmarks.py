"""The benchmark registry: one entry per data source, each with its answer format, scorer,
aggregator, family and drawing."""

from __future__ import annotations

import typing

import pytest

from spacetools.rewards import BENCHMARK_KEYS, BENCHMARKS, aggregate, benchmark, compute_score
from spacetools.rewards.benchmarks import AnswerKind, DrawingKind

from .test_rewards_dispatch import EXAMPLES


def test_the_nine_paper_keys_and_the_spatialsim_families() -> None:
    paper = [key for key, entry in BENCHMARKS.items() if not entry.spatialsim]
    assert paper == ["robospatial", "reflocation", "refplacement", "refunseen", "blinkdepth",
                     "cvb2drelation", "cvb3ddepth", "boppose", "bopgrasp"]  # fmt: skip
    for key, entry in BENCHMARKS.items():
        assert entry.key == key and key.endswith(entry.family)
        assert set(entry.answers) <= set(typing.get_args(AnswerKind))
    assert set(BENCHMARK_KEYS) == {*BENCHMARKS, "refspatial"}


@pytest.mark.parametrize("key", sorted(BENCHMARKS))
def test_each_entry_scores_and_aggregates_its_own_answers(key: str) -> None:
    entry = benchmark(key)
    truth, answer, extra_info = EXAMPLES[key]
    row = compute_score(key, f"<answer>{answer}</answer>", truth, extra_info)
    assert row == {**entry.scorer(answer, truth, extra_info), "answer_tagged": True}
    assert aggregate(key, [row])["headline"] == pytest.approx(100.0)
    assert entry.drawing(truth) in typing.get_args(DrawingKind)


def test_robospatial_asks_yes_no_or_points_by_its_ground_truth() -> None:
    entry = benchmark(" RoboSpatial ")
    assert entry.answer_kind("Yes") == entry.drawing("no") == "yes_no"
    assert entry.answer_kind("[(0.1, 0.2)]") == "points"
    assert benchmark("refunseen").drawing("data:image/png;base64,") == "mask"
    assert benchmark("spatialsim_boppose").drawing("[]") == "corners"
    with pytest.raises(ValueError, match="unknown data_source 'geoqa'"):
        benchmark("geoqa")
