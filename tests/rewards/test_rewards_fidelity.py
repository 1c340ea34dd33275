"""Re-score the official per-sample results of the released SpaceTools checkpoint.

The rows (tests/data/official_scores, see its README for the source) hold the ground truth, the
model's raw final answer and the score the original reward code gave it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shapely

from spacetools.rewards import aggregate, compute_score, parse_points
from spacetools.rewards.geometry import convex_hull
from spacetools.rewards.scorers import is_yes_no_truth

OFFICIAL = Path(__file__).resolve().parents[1] / "data" / "official_scores"


def _rows(name: str) -> list[dict]:
    with (OFFICIAL / f"{name}.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


ROBOSPATIAL = _rows("robospatial")
BOPPOSE = _rows("boppose")


def _as_model_output(raw_answer: str) -> str:
    """The raw answer as the last turn of a model would carry it."""
    return f"<think>Reading the tool results.</think>\n<answer>{raw_answer}</answer>"


def test_row_counts_match_the_readme() -> None:
    assert len(ROBOSPATIAL) == 350
    assert len(BOPPOSE) == 60
    assert sum(not is_yes_no_truth(row["gt"]) for row in ROBOSPATIAL) == 122


@pytest.mark.parametrize("row", ROBOSPATIAL, ids=lambda row: f"robospatial-{row['sample_id']}")
def test_robospatial_official_score_reproduced(row: dict) -> None:
    result = compute_score("robospatial", _as_model_output(row["raw_answer"]), row["gt"])
    assert result["score"] == pytest.approx(row["score"], abs=1e-6)
    assert result["parse_ok"] == row["parse_ok"]
    assert result["vacant"] == (not is_yes_no_truth(row["gt"]))


@pytest.mark.parametrize("row", BOPPOSE, ids=lambda row: f"boppose-{row['sample_id']}")
def test_boppose_official_score_reproduced(row: dict) -> None:
    result = compute_score("boppose", _as_model_output(row["raw_answer"]), row["gt"])
    assert result["score"] == pytest.approx(row["score"], abs=1e-6)
    assert result["parse_ok"] == row["parse_ok"]


def test_vacant_needs_the_convex_hull_not_the_listed_polygon() -> None:
    """The reference notes the listed-order polygon disagrees with the hull on 23 of 122 rows."""
    differing = 0
    for row in ROBOSPATIAL:
        if is_yes_no_truth(row["gt"]):
            continue
        region, point = parse_points(row["gt"]), shapely.Point(parse_points(row["raw_answer"])[0])
        in_hull = convex_hull(region).covers(point)
        in_polygon = shapely.make_valid(shapely.Polygon(region)).covers(point)
        differing += in_hull != in_polygon
        assert in_hull == bool(row["score"])
    assert differing == 23


def test_official_benchmark_figures_reproduced() -> None:
    robospatial = aggregate(
        "robospatial",
        [compute_score("robospatial", _as_model_output(r["raw_answer"]), r["gt"]) for r in ROBOSPATIAL],
    )
    expected_overall = 100 * sum(r["score"] for r in ROBOSPATIAL) / len(ROBOSPATIAL)
    assert robospatial["overall"] == pytest.approx(expected_overall)
    assert robospatial["n"] == 350
    pose = aggregate(
        "boppose", [compute_score("boppose", _as_model_output(r["raw_answer"]), r["gt"]) for r in BOPPOSE]
    )
    assert pose["mean_iou"] == pytest.approx(100 * sum(r["score"] for r in BOPPOSE) / len(BOPPOSE), abs=1e-6)
