"""Task validation and the trajectory's JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spacetools.agent.types import (
    EpisodeInput,
    Task,
    ToolCallRecord,
    Trajectory,
    read_trajectories,
    write_trajectories,
)


def trajectory(task_id: str = "t1") -> Trajectory:
    return Trajectory(
        task_id=task_id,
        data_source="spatialsim_boppose",
        messages=[
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "Q"}]},
            {"role": "assistant", "content": '<tool_call>{"name": "echo.echo"}</tool_call>'},
            {"role": "tool", "content": "<tool_response>\nok\n</tool_response>"},
            {"role": "assistant", "content": "<answer>(A)</answer>"},
        ],
        tool_calls=[ToolCallRecord("echo.echo", {"text": "x"}, "ok", False, ["v"], 0.01, 1)],
        answer="(A)",
        turns=2,
        score={"score": 1.0},
        parse_errors=0,
        stats={"tool_calls_by_name": {"echo.echo": 1}},
        wall_s=0.5,
        images=[np.random.default_rng(0).integers(0, 255, (6, 7, 3), dtype=np.uint8)],
    )


def test_trajectory_survives_a_json_round_trip(tmp_path: Path) -> None:
    original = trajectory()
    restored = Trajectory.from_dict(json.loads(json.dumps(original.to_dict())))
    np.testing.assert_array_equal(restored.images[0], original.images[0])
    assert restored.tool_calls == original.tool_calls
    assert {k: v for k, v in vars(restored).items() if k != "images"} == {
        k: v for k, v in vars(original).items() if k != "images"
    }
    path = tmp_path / "runs.jsonl"
    write_trajectories([original, trajectory("t2")], path)
    write_trajectories([trajectory("t3")], path, append=True)
    assert [t.task_id for t in read_trajectories(path)] == ["t1", "t2", "t3"]
    rows = tmp_path / "samples.jsonl"  # an evaluation run's rows carry the trajectory inside
    rows.write_text(json.dumps({"id": "t9", "score": {}, "trajectory": trajectory("t9").to_dict()}) + "\n")
    assert [t.task_id for t in read_trajectories(rows)] == ["t9"]


def test_solution_text_joins_the_assistant_turns() -> None:
    assert trajectory().solution_text == '<tool_call>{"name": "echo.echo"}</tool_call>\n<answer>(A)</answer>'


def test_bad_records_and_images_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a trajectory record"):
        Trajectory.from_dict({"task_id": "x"})
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(trajectory().to_dict()) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        read_trajectories(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        read_trajectories(path)
    with pytest.raises(ValueError, match="not a trajectory record: cannot decode the image"):
        Trajectory.from_dict({**trajectory().to_dict(), "images": ["data:image/png;base64,AAAA"]})


def test_task_keeps_public_metadata_and_an_input_one_attachment_per_image() -> None:
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    extra = {"qa_type": "depth", "choices": ["A", "B"], "scene": "{}", "answer": "A", "ground_truth": "A"}
    task = Task("a", "d", "q", [image, image], extra_info=extra)
    assert task.extra_info == {"qa_type": "depth", "choices": ["A", "B"]}
    assert EpisodeInput(task).attachments == [None, None]
    with pytest.raises(ValueError, match="has no image"):
        Task("a", "d", "q", [])
    with pytest.raises(ValueError, match="1 attachments for 2 images"):
        EpisodeInput(task, attachments=[{"scene": "{}"}])


def test_a_lone_surrogate_survives_the_trajectory_file(tmp_path: Path) -> None:
    broken = trajectory()
    broken.tool_calls[0].arguments = {"text": "\ud800"}
    path = tmp_path / "runs.jsonl"
    write_trajectories([broken], path)
    assert read_trajectories(path)[0].tool_calls[0].arguments == {"text": "\ud800"}
