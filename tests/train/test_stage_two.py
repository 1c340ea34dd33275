"""Stage 2's choices: the families it trains (SFT above the constant guess on validation questions), and
the recipe settings that keep every question in one role."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spacetools.bench.summary import summarize
from spacetools.train.config import DIRLConfig
from spacetools.train.stage_two import families_beating_constant

LOCATION, RELATION = "spatialsim_reflocation", "spatialsim_cvb2drelation"


def _row(key: str, i: int, correct: bool) -> dict:
    trajectory = {"tool_calls": [], "wall_s": 1.0, "turns": 2, "parse_errors": 0}
    score = {"score": float(correct), "acc": float(correct), "nndc": float(correct), "parse_ok": True}
    return {"id": f"{key}/{i}", "data_source": key, "score": score, "trajectory": trajectory}


def test_stage_2_trains_the_families_whose_interval_is_above_the_constant_guess() -> None:
    rows = [_row(LOCATION, i, i < 30) for i in range(40)]  # 75 %, interval well above 5
    rows += [_row(RELATION, i, i < 22) for i in range(40)]  # 55 %: its interval holds the guess's 50
    summary = summarize(rows, policy="hf", profile="exact", data="validation", resamples=200)
    guesses = {LOCATION: {"headline": 5.0}, RELATION: {"headline": 50.0}}
    chosen = families_beating_constant(summary, guesses)
    assert chosen["chosen"] == [LOCATION]
    assert (
        chosen["benchmarks"][RELATION]["interval"][0] < 50.0 < chosen["benchmarks"][RELATION]["interval"][1]
    )
    assert chosen["benchmarks"][LOCATION]["beats"] and not chosen["benchmarks"][RELATION]["beats"]
    # A family without a guess is never chosen.
    assert families_beating_constant(summary, {})["chosen"] == []


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"grpo_families": "beats_constant"}, "validation_seed"),
        ({"data": {"validation_seed": 200}}, "must all differ"),  # the eval seed's questions
        ({"data": {"grpo_seed": 100}}, "must all differ"),  # SFT's questions
        ({"cold_start": {"seed": 200}}, "must all differ"),
        ({"seed": 1, "grpo_seeds": [1, 2]}, "grpo_seeds"),
    ],
)
def test_a_recipe_that_reuses_questions_or_seeds_is_refused(settings: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        DIRLConfig.model_validate(settings)


def test_a_recipe_with_every_role_on_its_own_seed_is_accepted() -> None:
    config = DIRLConfig.model_validate(
        {
            "data": {"train_seed": 100, "eval_seed": 200, "validation_seed": 300, "grpo_seed": 400},
            "cold_start": {"seed": 500, "questions": 24},
            "grpo_families": "beats_constant",
            "grpo_seeds": [1],
        }
    )
    assert config.data.seeds() == [100, 200, 300, 400] and config.cold_start is not None
