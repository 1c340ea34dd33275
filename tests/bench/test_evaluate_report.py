"""The run's report page and end-of-run table, on hand-written rows (the end-to-end run is in
test_evaluate.py)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from spacetools.agent.types import ToolCallRecord, Trajectory
from spacetools.bench.dataset import Sample
from spacetools.bench.evaluate import thumbnail_data_url
from spacetools.bench.report import (
    PREDICTED,
    TRUTH,
    annotate,
    answer_kind,
    render_report,
    tool_geometry_picture,
    write_report,
)
from spacetools.bench.report.images import ReportImages
from spacetools.bench.report.toolchain import declared_geometry, tool_points
from spacetools.bench.summary import summarize, summary_table
from spacetools.rewards import compute_score
from spacetools.toolshed import Toolshed

IMAGE = np.full((120, 160, 3), 90, dtype=np.uint8)
QUESTION = (
    "Two points are circled on the image, labeled by A and B beside each circle. Which point is closer to "
    "the camera? Select from the following choices. (A) A (B) B"
)
BOX_RESULT = (
    "Oriented bounding box computed from 500/3072 points.\n"
    "Corners in 3D: [[-0.05, 0.05, 0.95], [0.05, 0.05, 0.95], [0.05, 0.05, 1.05], [-0.05, 0.05, 1.05], "
    "[-0.05, -0.05, 0.95], [0.05, -0.05, 0.95], [0.05, -0.05, 1.05], [-0.05, -0.05, 1.05]]\n"
    "Corners in normalized image coordinates: [(0.4, 0.6), (0.6, 0.6), (0.58, 0.55), (0.42, 0.55), "
    "(0.4, 0.4), (0.6, 0.4), (0.58, 0.35), (0.42, 0.35)]\n"
)

#: What the v1 tools declare as geometry in their values (the report draws these keys only).
GEOMETRY = {spec.name: spec.geometry for spec in Toolshed("v1").specs()}
# The structured values the tools return beside those texts (the report draws from these).
BOX_VALUE = {
    "corners_3d": [
        [-0.05, 0.05, 0.95],
        [0.05, 0.05, 0.95],
        [0.05, 0.05, 1.05],
        [-0.05, 0.05, 1.05],
        [-0.05, -0.05, 0.95],
        [0.05, -0.05, 0.95],
        [0.05, -0.05, 1.05],
        [-0.05, -0.05, 1.05],
    ],
    "corners_2d": [
        [0.4, 0.6],
        [0.6, 0.6],
        [0.58, 0.55],
        [0.42, 0.55],
        [0.4, 0.4],
        [0.6, 0.4],
        [0.58, 0.35],
        [0.42, 0.35],
    ],
}
GRASP_VALUE = {
    "confidence": 0.792,
    "points_2d": [[0.5, 0.5], [0.46, 0.5], [0.54, 0.5], [0.46, 0.56], [0.54, 0.56]],
}

GRASP_RESULT = (
    "Generated collision-free grasp with confidence 0.792 from 835/3072 masked points. Filtered 100 → 55 "
    "collision-free grasps. Projected 2D gripper points: [(0.5, 0.5), (0.46, 0.5), (0.54, 0.5), (0.46, 0.56), "
    "(0.54, 0.56)]"
)


def sample(data_source: str, ground_truth: str, **extra: object) -> Sample:
    return Sample(
        data_source=data_source,
        prompt=[{"role": "user", "content": "<image>" + QUESTION}],
        images=[IMAGE],
        ground_truth=ground_truth,
        extra_info={"index": 0, "question": "<image>\n" + QUESTION, **extra},
    )


def row(data_source: str, answer: str, truth: str, calls: list[ToolCallRecord], pictures: int = 0) -> dict:
    trajectory = Trajectory(
        task_id=f"{data_source}/0",
        data_source=data_source,
        messages=[{"role": "assistant", "content": f"<answer>{answer}</answer>"}],
        tool_calls=calls,
        answer=answer,
        turns=len(calls) + 1,
        score=None,
        parse_errors=0,
        stats={},
        wall_s=0.5,
    )
    shade = [np.full((30, 40, 3), 40 + 60 * k, dtype=np.uint8) for k in range(pictures)]
    return {
        "id": f"{data_source}/0",
        "data_source": data_source,
        "question": QUESTION,
        "score": compute_score(data_source, f"<answer>{answer}</answer>", truth, {"choices": ["A", "B"]}),
        "trajectory": trajectory.to_dict(),
        "tool_images": [thumbnail_data_url(image) for image in shade],
    }


def call(
    name: str, result: str, turn: int, image_indices: list[int] | None = None, value: object = None
) -> ToolCallRecord:
    return ToolCallRecord(
        name,
        {"image_index": 0},
        result,
        False,
        [],
        0.01,
        turn,
        image_indices or [],
        value,
        GEOMETRY.get(name, {}),
    )


def page_for(rows: list[dict], samples: dict[str, Sample]) -> str:
    summary = summarize(rows, policy="scripted", profile="exact", data="d")
    return render_report(summary, rows, samples)


def test_sample_line_shows_a_clean_prefix_and_the_body_the_full_question() -> None:
    key = "spatialsim_blinkdepth"
    page = page_for([row(key, "(A)", "(A)", [])], {f"{key}/0": sample(key, "(A)", choices=["A", "B"])})
    summary_line = re.search(r"<summary>(.*?)</summary>", page, re.DOTALL).group(1)  # type: ignore[union-attr]
    shown = summary_line.rsplit("</code> ", 1)[1]
    assert shown.endswith("…") and "[" not in shown and len(shown) <= 111
    assert QUESTION.startswith(shown.removesuffix("…"))
    assert f"<b>Question.</b> {QUESTION}" in page


def test_every_tool_picture_sits_in_the_row_of_the_call_that_made_it() -> None:
    key = "spatialsim_boppose"
    corners = "[(0.4, 0.6), (0.6, 0.6), (0.58, 0.55), (0.42, 0.55), (0.4, 0.4), (0.6, 0.4), (0.58, 0.35), (0.42, 0.35)]"
    calls = [
        call(
            "roborefer.detect_one",
            "Detected 1 instance(s) of 'box': [(0.5, 0.5)]",
            1,
            [1],
            {"points": [[0.5, 0.5]]},
        ),
        call("depth_estimator.estimate_depth_with_pointcloud", "Generated depth.", 1, [2]),
        call("sam2.segment_from_point", "Segmented object.", 2, [3]),
        call("bounding_box.compute_bbox", BOX_RESULT, 3, value=BOX_VALUE),
        call("grasp_generator.compute_grasp", GRASP_RESULT, 3, [4], GRASP_VALUE),
    ]
    the_row = row(key, corners, corners, calls, pictures=4)
    page = page_for([the_row], {f"{key}/0": sample(key, corners)})
    chain = page.split("<table class='chain'>", 1)[1].split("</table>", 1)[0]
    call_rows = chain.split("<tr>")[2:]  # after the header row
    assert len(call_rows) == 5
    # Each picture as the page holds it: recompressed (distinct shades, so distinct pictures).
    shown = [ReportImages(side_files=False).tool_picture(url, "x")[0] for url in the_row["tool_images"]]
    assert len(set(shown)) == 4
    for call_row, url in zip(call_rows[:3], shown[:3], strict=True):
        assert call_row.count("<img") == 1 and url in call_row
    # The box fit returns no picture: the report draws its corners; a grasp gets a zoom beside its own.
    assert call_rows[3].count("<img") == 1 and "fitted box" in call_rows[3]
    assert call_rows[4].count("<img") == 2 and shown[3] in call_rows[4]
    assert "gripper points" in call_rows[4]


@pytest.mark.parametrize(("kind", "answer", "truth"), [("yes_no", "No", "Yes"), ("choice", "(B)", "(A)")])
def test_verdicts_are_written_under_the_picture_in_red_and_green(kind: str, answer: str, truth: str) -> None:
    plain = annotate(IMAGE, "points", "", "")
    picture = np.asarray(annotate(IMAGE, kind, answer, truth))
    assert picture.shape[0] > plain.height  # a strip below the image
    strip = picture[plain.height :].reshape(-1, 3).astype(int)
    for colour in (PREDICTED, TRUTH):  # anti-aliased text: look for its full colour, give or take
        assert (np.abs(strip - colour).max(axis=1) < 30).sum() >= 20, colour


def test_end_of_run_table_fits_80_columns_with_the_headline_on_the_benchmark_line() -> None:
    grasp = (
        "Grasp center: [0.5, 0.5], Left finger base: [0.45, 0.5], Right finger base: [0.55, 0.5], "
        "Left finger tip: [0.45, 0.6], Right finger tip: [0.55, 0.6]"
    )
    rows = [
        row("spatialsim_robospatial", "Yes", "Yes", []),
        row("spatialsim_bopgrasp", grasp, grasp, []),
        row("spatialsim_cvb2drelation", "(B)", "(A)", []),
    ]
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(summary_table(summarize(rows, policy="scripted", profile="exact", data="/tmp/some/data")))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    for name, headline in (("robospatial", "100.0"), ("bopgrasp", "100.0"), ("cvb2drelation", "0.0")):
        (line,) = [line for line in lines if line.split() and line.split()[0] == name]
        assert line.split()[1:3] == ["1", headline]


def test_a_lone_surrogate_anywhere_still_writes_a_whole_page(tmp_path: Path) -> None:
    """Issue 9, item 6: a lone surrogate (legal JSON) in a tool argument made report.html 0 bytes."""
    key = "spatialsim_robospatial"
    hostile = ToolCallRecord(
        "roborefer.detect_one", {"obj_name": "\ud800"}, "Error: \udfff", True, [], 0.01, 1
    )
    the_row = row(key, "Yes \ud800", "Yes", [hostile])
    the_row["question"] = "Is it \udc00 there?"
    rows, samples = [the_row], {f"{key}/0": sample(key, "Yes")}
    path = write_report(
        tmp_path / "report.html", summarize(rows, policy="p\ud800", profile="exact", data="d"), rows, samples
    )
    page = path.read_text(encoding="utf-8")
    assert page.endswith("</html>") and "roborefer.detect_one" in page
    assert "\\ud800" in page  # the argument, escaped by JSON; the other surrogates are replaced
    # No temporary file left behind: the page and its full-size pictures only.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report_files"]


def test_tool_geometry_is_read_from_the_value_under_the_keys_the_tool_declared() -> None:
    assert GEOMETRY["bounding_box.compute_bbox"] == {"corners_2d": "corners"}
    assert GEOMETRY["grasp_generator.compute_grasp"] == {"points_2d": "grasp"}
    assert GEOMETRY["roborefer.detect_one"] == {"points": "points"}
    assert GEOMETRY["sam2.segment_from_point"] == {}  # its prompt points are not drawn
    corners = BOX_VALUE["corners_2d"]
    box = call("bounding_box.compute_bbox", BOX_RESULT, 1, value=BOX_VALUE).__dict__
    (found,) = declared_geometry(box)
    assert found == ("corners", [tuple(corner) for corner in corners])
    drawn = tool_geometry_picture(IMAGE, *found)
    assert drawn is not None and "fitted box" in drawn[1]
    # Never from the result text, nor from a key the tool did not declare.
    assert declared_geometry({**box, "value": None}) == []
    assert declared_geometry({**box, "geometry": {}}) == []
    assert declared_geometry({**box, "value": {"corners_3d": corners}}) == []
    # A kind's point count and finite numbers are checked; a failed call draws nothing.
    assert declared_geometry({**box, "value": {"corners_2d": corners[:7]}}) == []
    assert declared_geometry({**box, "value": {"corners_2d": [[float("nan"), 0.5]] * 8}}) == []
    assert declared_geometry({**box, "is_error": True}) == []
    # Points go on the sample's picture (blue crosses), not in a picture of their own.
    assert tool_geometry_picture(IMAGE, "points", [(0.5, 0.5)]) is None
    pointed = call("roborefer.detect_one", "Detected 1 instance(s)", 1, value={"points": [[0.25, 0.5]]})
    assert tool_points({"tool_calls": [pointed.__dict__, box]}) == [(0.25, 0.5)]


@pytest.mark.parametrize(
    ("data_source", "truth", "kind"),
    [("robospatial", "No", "yes_no"), ("robospatial", "[(0.1, 0.1)]", "points"), ("refunseen", "x", "mask"),
     ("spatialsim_detect2d", "[]", "boxes"), ("cvb3ddepth", "(A)", "choice"), ("someone_elses", "4", "text")],
)  # fmt: skip
def test_samples_are_drawn_by_their_registered_kind(data_source: str, truth: str, kind: str) -> None:
    assert answer_kind(data_source, truth) == kind


def test_turns_that_did_not_parse_are_summed_per_benchmark_and_shown(tmp_path: Path) -> None:
    key = "spatialsim_robospatial"
    rows = [row(key, "Yes", "Yes", []), row(key, "No", "Yes", [])]
    rows[0]["trajectory"]["stats"] = {"invalid_turns": 3}  # the rollout's count; an older row has none
    summary = summarize(rows, policy="p", profile="exact", data="d")
    assert summary.benchmarks[key].invalid_turns == 3
    page = write_report(tmp_path / "report.html", summary, rows, {f"{key}/0": sample(key, "Yes")}).read_text()
    assert "<th>invalid turns</th>" in page and "<td>3</td>" in page  # n is 2, the counts 0
