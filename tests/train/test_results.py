"""The DIRL results: the paired GRPO gain on held-out questions, the table beside the constant guess, and
the token-limit check that keeps a perfect imitator's turns whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spacetools.agent.rollout import RolloutConfig
from spacetools.train.config import DIRLConfig
from spacetools.train.limits import check_token_limits, longest_teacher_turn
from spacetools.train.results import paired_headline_gain, pooled_gain, results_table

KEY = "spatialsim_cvb2drelation"


def _rows(correct: list[bool]) -> list[dict]:
    return [
        {
            "id": f"{KEY}/{i}",
            "data_source": KEY,
            "score": {"score": float(ok), "acc": float(ok), "parse_ok": True},
        }
        for i, ok in enumerate(correct)
    ]


def test_the_gain_pairs_questions_by_id() -> None:
    before = _rows([True] * 10 + [False] * 30)
    after = _rows([True] * 30 + [False] * 10)
    gain = paired_headline_gain(before, after)[KEY]
    assert gain["gain"] == pytest.approx(50.0) and gain["n"] == 40
    assert 0 < gain["low"] <= 50.0 <= gain["high"]
    # The same answers in another order: no gain, and an interval of exactly zero (pairs, not groups).
    same = paired_headline_gain(before, list(reversed(before)))[KEY]
    assert same == {"gain": 0.0, "low": 0.0, "high": 0.0, "n": 40}


def test_only_questions_both_runs_scored_are_paired() -> None:
    gain = paired_headline_gain(_rows([True, False]), _rows([True, True, True])[1:])[KEY]
    assert gain["n"] == 1 and gain["gain"] == 100.0


def test_the_table_puts_the_constant_guess_beside_each_model() -> None:
    results = {
        "held_out": {
            "eval": {
                "seed": 7,
                "constant_guess": {
                    KEY: {"answer": "(A)", "headline": 52.0, "low": 42.0, "high": 62.0, "n": 100}
                },
                "evaluations": {
                    "SFT only": {
                        "valid_turn_rate": 0.98,
                        "benchmarks": {KEY: {"headline": 71.0, "interval": [62.0, 80.0]}},
                    },
                    "full DIRL": {
                        "valid_turn_rate": 0.99,
                        "benchmarks": {KEY: {"headline": 75.0, "interval": [66.0, 83.0]}},
                    },
                },
                "grpo_gain": {KEY: {"gain": 4.0, "low": -1.0, "high": 9.0, "n": 100}},
            }
        }
    }
    table = results_table(results)
    assert "seed 7" in table
    assert (
        f"| {KEY} | 100 | 52.0 [42.0, 62.0] `(A)` | 71.0 [62.0, 80.0] | 75.0 [66.0, 83.0] | +4.0 [-1.0, +9.0] |"
        in table
    )
    assert "| valid turn rate | | | 0.98 | 0.99 | |" in table


class WordTokenizer:
    """Counts words: enough to test the limit arithmetic (the real tokenizers are tested with the models)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}


def _traces(tmp_path: Path) -> Path:
    row = {
        "family": "cvb2drelation",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a b c d e f g h"}]},
            {
                "role": "assistant",
                "content": "<think>one two three four five</think> <tool_call>x y</tool_call>",
            },
            {"role": "tool", "content": "a b c d e f g h i j"},
            {"role": "assistant", "content": "<answer>(A)</answer>"},
        ],
    }
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def test_the_longest_turn_counts_what_the_student_is_trained_on(tmp_path: Path) -> None:
    traces = _traces(tmp_path)
    assert longest_teacher_turn(traces, WordTokenizer(), "full") == {"cvb2drelation": 7}
    assert longest_teacher_turn(traces, WordTokenizer(), "empty") == {"cvb2drelation": 3}


def test_a_limit_that_cuts_a_teacher_turn_is_refused(tmp_path: Path) -> None:
    traces = _traces(tmp_path)
    config = DIRLConfig.model_validate(
        {
            "rollout": {"max_new_tokens": 6},
            "grpo": {"rollout": {"max_new_tokens": 7}},
            "teacher_thoughts": "full",
        }
    )
    with pytest.raises(
        ValueError,
        match=r"cvb2drelation: a teacher turn takes 7 tokens, more than rollout\.max_new_tokens 6$",
    ):
        check_token_limits(config, traces, WordTokenizer())
    check_token_limits(
        config.model_copy(update={"rollout": RolloutConfig(max_new_tokens=7)}), traces, WordTokenizer()
    )
    # Without a per-turn limit, the episode's budget bounds a turn.
    budget = DIRLConfig.model_validate({"rollout": {"max_episode_tokens": 5}, "teacher_thoughts": "full"})
    with pytest.raises(
        ValueError, match=r"rollout\.max_episode_tokens 5; .*grpo\.rollout\.max_episode_tokens 5"
    ):
        check_token_limits(budget, traces, WordTokenizer())


def test_the_controls_get_their_own_columns_and_paired_gains() -> None:
    block = {
        "seed": 7,
        "constant_guess": {KEY: {"answer": "(A)", "headline": 52.0, "low": 42.0, "high": 62.0, "n": 100}},
        "evaluations": {
            name: {"valid_turn_rate": 1.0, "benchmarks": {KEY: {"headline": value, "interval": None}}}
            for name, value in (("SFT only", 71.0), ("full DIRL", 75.0), ("placebo", 70.0))
        },
        "grpo_gain": {KEY: {"gain": 4.0, "low": -1.0, "high": 9.0, "n": 100}},
        "gains": {"placebo": {KEY: {"gain": -1.0, "low": -3.0, "high": 1.0, "n": 100}}},
    }
    table = results_table({"held_out": {"eval": block}})
    assert "| GRPO gain over SFT (paired) | gain, placebo (paired) |" in table
    assert "| 71.0 | 75.0 | 70.0 | +4.0 [-1.0, +9.0] | -1.0 [-3.0, +1.0] |" in table
    assert "| valid turn rate | | | 1.00 | 1.00 | 1.00 | | |" in table


def test_the_pooled_gain_pairs_every_trained_familys_questions() -> None:
    other = "spatialsim_reflocation"
    before = _rows([False] * 20) + [
        {**row, "id": f"{other}/{i}", "data_source": other} for i, row in enumerate(_rows([True] * 20))
    ]
    after = _rows([True] * 20) + [
        {**row, "id": f"{other}/{i}", "data_source": other}
        for i, row in enumerate(_rows([True] * 10 + [False] * 10))
    ]
    gain = pooled_gain(before, after, [KEY, other])
    assert gain is not None and gain["n"] == 40
    assert gain["gain"] == pytest.approx((20 * 100 - 10 * 100) / 40)  # +20 on one family, -10 on the other
    assert gain["low"] < gain["gain"] < gain["high"]
    assert pooled_gain(before, after, [KEY])["gain"] == pytest.approx(100.0)  # type: ignore[index]
    assert pooled_gain(before, after, ["spatialsim_nothing"]) is None
