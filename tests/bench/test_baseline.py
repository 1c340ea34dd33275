"""The constant-guess baseline: the best single answer is chosen on training questions and scored, by the
benchmark's own scorer, on held-out ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spacetools.bench.baseline import GRID, candidate_answers, constant_guesses
from spacetools.bench.dataset import read_samples
from spacetools.bench.spatialsim import generator
from spacetools.rewards import compute_score
from spacetools.rewards.masks import load_mask


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list]:
    root: Path = tmp_path_factory.mktemp("baseline")
    families = ["reflocation", "cvb2drelation"]
    generator.export(root / "train", n=8, seed=3, families=families)
    generator.export(root / "eval", n=6, seed=4, families=families)
    return read_samples(root / "train"), read_samples(root / "eval")


def test_the_chosen_answer_is_the_best_constant_on_the_training_questions(sets: tuple[list, list]) -> None:
    train, held_out = sets
    guesses = constant_guesses(train, held_out)
    assert set(guesses) == {"spatialsim_reflocation", "spatialsim_cvb2drelation"}
    for key, guess in guesses.items():
        questions = [sample for sample in train if sample.data_source == key]
        scores = {
            answer: np.mean(
                [
                    compute_score(key, f"<answer>{answer}</answer>", s.ground_truth, s.extra_info)["acc"]
                    for s in questions
                ]
            )
            for answer in candidate_answers(key, questions)
        }
        assert guess.train_score == pytest.approx(max(scores.values()))
        assert scores[guess.answer] == pytest.approx(guess.train_score)


def test_the_held_out_figure_is_the_scorers_on_the_held_out_questions(sets: tuple[list, list]) -> None:
    train, held_out = sets
    for key, guess in constant_guesses(train, held_out).items():
        questions = [sample for sample in held_out if sample.data_source == key]
        accuracy = 100 * np.mean(
            [
                compute_score(key, f"<answer>{guess.answer}</answer>", s.ground_truth, s.extra_info)["acc"]
                for s in questions
            ]
        )
        assert guess.n == len(questions) == 6
        assert guess.headline == pytest.approx(accuracy)
        assert guess.low <= guess.headline <= guess.high


def test_the_mask_shortcut_reads_the_mask_where_the_scorer_does(sets: tuple[list, list]) -> None:
    train, _ = sets
    sample = next(s for s in train if s.data_source == "spatialsim_reflocation")
    region = load_mask(sample.ground_truth)
    height, width = region.shape
    for x in GRID[::4]:
        for y in GRID[::4]:
            hit = compute_score(
                sample.data_source, f"<answer>[({x:.3f}, {y:.3f})]</answer>", sample.ground_truth, {}
            )
            assert hit["acc"] == float(region[int(y * height), int(x * width)])


def test_choices_and_yes_no_are_candidates_and_boxes_have_none(sets: tuple[list, list]) -> None:
    train, _ = sets
    relation = [s for s in train if s.data_source == "spatialsim_cvb2drelation"]
    assert candidate_answers("spatialsim_cvb2drelation", relation) == ["(A)", "(B)"]
    assert candidate_answers("spatialsim_detect2d", []) == []
    assert "yes" in candidate_answers("spatialsim_robospatial", [])
