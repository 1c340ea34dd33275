"""A sample passes or fails by its benchmark's headline figure, in samples.jsonl, the report and the
end-of-run table: a RefSpatial point just outside the region (acc 0) fails, however high its NNDC."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from scipy import ndimage

from spacetools.agent.types import ToolCallRecord, Trajectory
from spacetools.bench.dataset import Sample, load_samples
from spacetools.bench.evaluate import sample_row
from spacetools.bench.pages import _ENVIRONMENT
from spacetools.bench.report import write_report
from spacetools.bench.report.cards import build_card
from spacetools.bench.spatialsim import generator
from spacetools.bench.summary import summarize, summary_table
from spacetools.rewards import compute_score, format_points, load_mask
from spacetools.rewards.benchmarks import headline_value, passed

CALL = ToolCallRecord(
    "roborefer.detect_one", {"obj_name": "mug", "image_index": 0}, "Detected", False, [], 0.05, 1
)


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Sample]:
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=1, seed=11, families=["reflocation"])
    ((sample_id, sample),) = load_samples(folder).items()
    return sample_id, sample


def near_miss(sample: Sample) -> str:
    """A point two pixels outside the region mask: wrong by the headline, close by NNDC."""
    mask = load_mask(sample.ground_truth)
    ring = ndimage.binary_dilation(mask, iterations=2) & ~mask
    rows, cols = np.nonzero(ring)
    height, width = mask.shape
    return format_points([((cols[0] + 0.5) / width, (rows[0] + 0.5) / height)])


def test_a_near_miss_fails_everywhere_with_both_figures_shown(location: tuple[str, Sample]) -> None:
    sample_id, location = location
    solution = f"<think>.</think><answer>{near_miss(location)}</answer>"
    score = compute_score(location.data_source, solution, location.ground_truth, location.extra_info)
    assert score["acc"] == 0.0 and score["score"] > 0.5  # the dense reward calls it nearly right
    assert headline_value(location.data_source, score) == ("acc", 0.0)
    assert not passed(location.data_source, score)

    trajectory = Trajectory(
        task_id=sample_id, data_source=location.data_source,
        messages=[{"role": "assistant", "content": solution}], tool_calls=[], answer=solution,
        turns=1, score=score, parse_errors=0, stats={}, wall_s=1.0,
    )  # fmt: skip
    row = json.loads(json.dumps(sample_row(location, trajectory, location.question)))
    assert row["passed"] is False

    card = build_card(row, location, side_files=False).card
    assert card.outcome == "fail" and (card.headline_name, card.headline) == ("acc", 0.0)
    page = str(_ENVIRONMENT.get_template("report_sample.html").module.sample_card(card, 0))  # type: ignore[attr-defined]
    assert "acc 0.00 · score" in page and f"{score['score']:.2f}" in page

    right = {**row, "id": f"{sample_id}-again", "score": {**score, "acc": 1.0}}
    summary = summarize([row, right], policy="p", profile="exact", data="d", resamples=20)
    (bench,) = summary.benchmarks.values()
    assert bench.passed == 1
    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    assert " 1/2 " in console.export_text()


def test_a_scorer_failure_row_falls_back_to_its_score() -> None:
    assert headline_value("spatialsim_reflocation", {"score": 0.0, "reason": "scorer failed"}) == (
        "score",
        0.0,
    )
    assert passed("spatialsim_boppose", {"score": 0.7, "iou": 0.7})
    assert not passed("spatialsim_bopgrasp", {"score": 0.9, "mace": 0.2})


def test_the_page_is_readable_its_rows_link_their_samples_and_a_share_has_a_wilson_interval(
    location: tuple[str, Sample], tmp_path: Path
) -> None:
    sample_id, sample = location
    solution = f"<think>.</think><answer>{near_miss(sample)}</answer>"
    score = compute_score(sample.data_source, solution, sample.ground_truth, sample.extra_info)
    rows = [
        {
            "id": f"{sample_id}-{k}",
            "data_source": sample.data_source,
            "question": sample.question,
            "score": {**score, "acc": 1.0},
            "trajectory": Trajectory(
                task_id=f"{sample_id}-{k}",
                data_source=sample.data_source,
                messages=[{"role": "assistant", "content": solution}],
                tool_calls=[CALL],
                answer=solution,
                turns=1,
                score=score,
                parse_errors=0,
                stats={},
                wall_s=1.0,
            ).to_dict(),
            "tool_images": [],
        }
        for k in range(20)
    ]
    summary = summarize(rows, policy="p", profile="exact", data="d", resamples=50)
    (bench,) = summary.benchmarks.values()
    low, high = bench.interval() or (0.0, 0.0)
    assert bench.metrics["headline"] == 100.0 and 80.0 < low < 86.0 and high == 100.0  # Wilson, 20 of 20
    path = write_report(tmp_path / "report.html", summary, rows, {row["id"]: sample for row in rows})
    assert path.stat().st_mode & 0o777 == 0o644
    page = path.read_text()
    assert "href='#family=reflocation'" in page and "href='#family=reflocation&amp;outcome=fail'" in page
    assert "<th>status</th>" in page
