"""The DIRL run's own figures and wiring: the valid-turn rate over all benchmarks' turns, the IRL traces limit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spacetools.bench.summary import BenchmarkSummary, Summary
from spacetools.train import dirl
from spacetools.train.config import DIRLConfig, TracesConfig
from spacetools.train.results import valid_turn_rate


def _bench(key: str, n: int, turns_mean: float, invalid_turns: int) -> BenchmarkSummary:
    return BenchmarkSummary(
        key=key,
        n=n,
        metrics={},
        tool_calls_per_episode={},
        tool_calls_mean=0.0,
        tool_failures=0,
        tool_failure_rate=0.0,
        turns_mean=turns_mean,
        parse_errors=5 * invalid_turns,  # a bad turn may hold many bad calls: turns are what count
        policy_errors=0,
        finish_reasons={},
        wall_s_total=0.0,
        wall_s_mean=0.0,
        invalid_turns=invalid_turns,
    )


def test_valid_turn_rate_weights_each_benchmark_by_its_turns() -> None:
    # 2 episodes x 3 turns with 3 bad, 4 episodes x 1 turn with none bad: 3 of 10 turns failed to parse.
    benches = {"a": _bench("a", 2, 3.0, 3), "b": _bench("b", 4, 1.0, 0)}
    summary = Summary(policy="hf", profile="exact", data="d", n=6, benchmarks=benches)
    assert valid_turn_rate(summary) == pytest.approx(0.7)
    assert valid_turn_rate(Summary(policy="hf", profile="exact", data="d", n=0)) == 0.0


def test_the_irl_teacher_answers_at_most_the_limit_per_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[TracesConfig] = []

    async def collect(config: TracesConfig) -> dict[str, int]:
        seen.append(config)
        return {}

    monkeypatch.setattr(dirl, "collect_traces_async", collect)
    config = DIRLConfig.model_validate(
        {"irl_families": ["reflocation"], "irl_traces_limit": 5, "irl": {"rollout": {"max_turns": 2}}}
    )
    asyncio.run(dirl.DIRLRun(config, tmp_path)._irl_traces(tmp_path))
    assert seen[0].limit == 5 and seen[0].benches == ["spatialsim_reflocation"]
    assert seen[0].rollout.max_turns == 2  # the limits the IRL teacher trained with


def test_each_held_out_set_s_constant_guess_is_scored_on_the_questions_its_models_answer(
    tmp_path: Path,
) -> None:
    config = DIRLConfig.model_validate(
        {
            "data": {
                "train_n": 6,
                "eval_n": 6,
                "eval_seed": 700,
                "second_eval_seed": 1100,
                "families": ["cvb2drelation"],
            },
            "eval_limit": 5,
            "second_eval_limit": 3,
        }
    )
    run = dirl.DIRLRun(config, tmp_path)
    run._data(run.stage_dir("data"), ["cvb2drelation"])
    run._baseline(tmp_path)
    guesses = json.loads((tmp_path / dirl.BASELINE_FILE).read_text())
    assert guesses["eval"]["spatialsim_cvb2drelation"]["n"] == 5
    assert guesses["eval_2"]["spatialsim_cvb2drelation"]["n"] == 3
    assert run.second_eval_limit == 3
    assert (
        dirl.DIRLRun(config.model_copy(update={"second_eval_limit": None}), tmp_path).second_eval_limit == 5
    )
