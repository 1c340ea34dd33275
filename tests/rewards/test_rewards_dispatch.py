"""compute_score's dispatch, fixed key sets, verl loading, and benchmark aggregation."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import spacetools.rewards.dispatch as dispatch_module
from spacetools.rewards import (
    PAPER_DATA_SOURCES,
    SCORERS,
    SPATIALSIM_FAMILIES,
    aggregate,
    compute_score,
)

MASK = np.zeros((8, 8), dtype=bool)
MASK[2:6, 2:6] = True
GRASP = (
    "Grasp center: [0.5, 0.5], Left finger base: [0.4, 0.5], Right finger base: [0.6, 0.5], "
    "Left finger tip: [0.4, 0.6], Right finger tip: [0.6, 0.6]"
)
CORNERS = "[(0, 0), (1, 0), (1, 1), (0, 1), (0, 0), (1, 0), (1, 1), (0, 1)]"

# (ground truth, a correct answer, extra_info) per data source.
EXAMPLES: dict[str, tuple[object, str, dict]] = {
    "robospatial": ("Yes", "Yes", {}),
    "reflocation": (MASK, "[(0.5, 0.5)]", {}),
    "refplacement": (MASK, "[(0.4, 0.6)]", {}),
    "refunseen": (MASK, "[(4, 4)]", {}),
    "blinkdepth": ("(A)", "(A)", {"choices": ["A", "B"]}),
    "cvb2drelation": ("(B)", "B", {"choices": np.array(["left", "right"])}),
    "cvb3ddepth": ("(A)", "A", {}),
    "boppose": (CORNERS, CORNERS, {}),
    "bopgrasp": (GRASP, GRASP, {}),
    "spatialsim_robospatial": ("[(0.2, 0.2), (0.4, 0.2), (0.3, 0.4)]", "[(0.3, 0.3)]", {}),
    "spatialsim_reflocation": (MASK, "[(0.5, 0.5)]", {}),
    "spatialsim_refplacement": (MASK, "[(0.5, 0.5)]", {}),
    "spatialsim_blinkdepth": ("(B)", "(B)", {}),
    "spatialsim_cvb2drelation": ("(A)", "(A)", {}),
    "spatialsim_cvb3ddepth": ("(B)", "(B)", {}),
    "spatialsim_boppose": (CORNERS, CORNERS, {}),
    "spatialsim_bopgrasp": (GRASP, GRASP, {}),
    "spatialsim_detect2d": ("[[0.1, 0.1, 0.4, 0.4]]", "[[0.1, 0.1, 0.4, 0.4]]", {}),
}


def test_every_key_is_covered() -> None:
    assert set(PAPER_DATA_SOURCES) | {f"spatialsim_{family}" for family in SPATIALSIM_FAMILIES} == set(
        SCORERS
    )
    assert set(EXAMPLES) == set(SCORERS)
    assert len(PAPER_DATA_SOURCES) == 9


@pytest.mark.parametrize("data_source", sorted(EXAMPLES))
def test_correct_answer_scores_one_and_keys_are_fixed(data_source: str) -> None:
    truth, answer, extra_info = EXAMPLES[data_source]
    good = compute_score(data_source, f"<think>done</think><answer>{answer}</answer>", truth, extra_info)
    assert good["score"] == pytest.approx(1.0)
    assert good["parse_ok"] is True and good["answer_tagged"] is True and good["reason"] == ""
    bad = compute_score(data_source, "I cannot tell.", truth, extra_info)
    assert bad["score"] == 0.0 and bad["reason"]
    missing = compute_score(data_source, "<think>no answer at all", truth, extra_info)
    assert missing["score"] == 0.0 and missing["reason"] == "no answer found in the output"
    assert list(good) == list(bad) == list(missing)


def test_unknown_data_source_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown data_source 'geoqa'.*robospatial"):
        compute_score("geoqa", "<answer>1</answer>", "1")


def test_pointing_training_reward_is_dense_but_benchmark_score_is_official() -> None:
    near_miss = "<answer>[(0.8, 0.5)]</answer>"  # outside the square, 0.3 from its centre
    benchmark = compute_score("reflocation", near_miss, MASK)
    training = compute_score("spatialsim_reflocation", near_miss, MASK)
    assert benchmark["score"] == benchmark["acc"] == 0.0
    assert 0.0 < training["score"] == training["nndc"] < 1.0


def test_verl_can_load_compute_score_from_its_file() -> None:
    """verl loads ``custom_reward_function.path`` as a module by file path and calls the named function
    with keyword arguments."""
    path = Path(dispatch_module.__file__)
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.compute_score(
        data_source="robospatial",
        solution_str="<answer>No</answer>",
        ground_truth="No",
        extra_info={"index": 3},
    )
    assert result["score"] == 1.0


# --- aggregation ----------------------------------------------------------------------------------


def _rows(data_source: str, answers: list[str], truth: object) -> list[dict]:
    return [
        compute_score(data_source, f"<answer>{a}</answer>", truth) | {"data_source": data_source}
        for a in answers
    ]


def test_robospatial_overall_is_row_weighted() -> None:
    region = "[(0.2, 0.2), (0.4, 0.2), (0.3, 0.4)]"
    rows = _rows("robospatial", ["Yes", "Yes", "No"], "Yes") + _rows("robospatial", ["[(0.3, 0.3)]"], region)
    figures = aggregate("robospatial", rows)
    assert figures["vqa"] == pytest.approx(200 / 3)
    assert figures["vacant"] == 100.0
    assert figures["overall"] == figures["headline"] == 75.0  # (2 + 1) of 4 rows
    assert figures["n"] == 4


def test_paper_robospatial_numbers_are_consistent_with_row_weighting() -> None:
    """228 yes/no rows at 79.38 and 122 vacant rows at 52.46 give the paper's 70.00 overall."""
    overall = (228 * 79.38 + 122 * 52.46) / 350
    assert overall == pytest.approx(70.00, abs=0.01)


def test_refspatial_is_the_mean_of_its_splits() -> None:
    rows = (
        _rows("reflocation", ["[(0.5, 0.5)]", "[(0.9, 0.9)]"], MASK)
        + _rows("refplacement", ["[(0.5, 0.5)]"], MASK)
        + _rows("refunseen", ["[(0.9, 0.9)]"], MASK)
    )
    figures = aggregate("refspatial", rows)
    assert figures["reflocation"] == 50.0 and figures["refplacement"] == 100.0 and figures["refunseen"] == 0.0
    assert figures["refspatial"] == figures["headline"] == 50.0
    assert figures["row_weighted"] == 50.0


def test_pose_and_grasp_figures() -> None:
    shifted = "[(0.5, 0), (1.5, 0), (1.5, 1), (0.5, 1), (0.5, 0), (1.5, 0), (1.5, 1), (0.5, 1)]"
    pose = aggregate("boppose", _rows("boppose", [CORNERS, shifted, "nothing"], CORNERS))
    assert pose["mean_iou"] == pytest.approx(100 * (1 + 1 / 3 + 0) / 3)
    assert pose["parse_rate"] == pytest.approx(200 / 3)
    far = GRASP.replace("0.5, 0.5]", "0.9, 0.9]")  # only the centre moves: 0.4·√2 = 0.566 off, w = 0.2
    grasp = aggregate("bopgrasp", _rows("bopgrasp", [GRASP, far], GRASP))
    assert grasp["sr"] == 50.0
    assert grasp["mace"] == grasp["headline"] == pytest.approx(50.0)  # 1 - ½·2.83 - … clamps to 0
    assert grasp["nce"] == pytest.approx((0 + 0.4 * 2**0.5 / 0.2 / 5) / 2)  # 1 of 5 points 2.83 widths off


def test_aggregate_errors() -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        aggregate("nope", [{"score": 1.0}])
    with pytest.raises(ValueError, match="no rows"):
        aggregate("boppose", [])
    with pytest.raises(ValueError, match="'iou'"):
        aggregate("boppose", [{"score": 1.0, "parse_ok": True}])


def test_rewards_imports_nothing_else_from_spacetools() -> None:
    """verl loads the reward as a plain function: importing it must not pull in sim, tools or agents."""
    code = (
        "import sys, spacetools.rewards; "
        "print(sorted(m for m in sys.modules if m.startswith('spacetools.') and not m.startswith('spacetools.rewards')))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_headline_comes_first() -> None:
    figures = aggregate("cvb3ddepth", _rows("cvb3ddepth", ["(A)", "(B)"], "(A)"))
    assert list(figures) == ["headline", "accuracy", "n", "parse_rate"]
    assert figures["headline"] == figures["accuracy"] == 50.0


def test_robospatial_without_vacant_rows_leaves_vacant_out() -> None:
    rows = [compute_score("robospatial", "<answer>Yes</answer>", "Yes")] * 3
    figures = aggregate("robospatial", rows)
    assert "vacant" not in figures
    assert figures["vqa"] == figures["overall"] == 100.0
    json.dumps(figures, allow_nan=False)  # strict JSON: no NaN anywhere
