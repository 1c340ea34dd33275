"""Real backends from a tool-set config through the command line: `tools run --image` and `eval`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image
from tests.end_to_end.eval_run import read_run, run_eval
from tests.end_to_end.test_eval_original_layout import robospatial_rows, task_ids, write_original_parquet
from typer.testing import CliRunner

from chat_server import RespondingChatServer
from spacetools.agent.types import Trajectory, write_trajectories
from spacetools.cli.main import app

from .conftest import photo

runner = CliRunner()
CLOUD_ARGUMENTS = {
    "point_cloud": "$point_cloud",
    "mask": "$segmentation_mask",
    "focal_length_px": "$focal_length_px",
}
# Every V1 perception tool on the photo, then geometry on what they measured.
FIRST_TURN = [
    {"name": "depth_estimator.estimate_depth_with_pointcloud", "arguments": {"image_index": 0}},
    {"name": "roborefer.detect_one", "arguments": {"obj_name": "the bowl", "image_index": 0}},
    {"name": "vlm.detect_all", "arguments": {"obj_name": "bowl", "image_index": 0}},
    {"name": "sam2.segment_from_point", "arguments": {"x": 0.5, "y": 0.5, "image_index": 0}},
]
SECOND_TURN = [
    {"name": "bounding_box.compute_bbox", "arguments": CLOUD_ARGUMENTS},
    {"name": "grasp_generator.compute_grasp", "arguments": {**CLOUD_ARGUMENTS, "image_index": 0}},
]


def real_config(tmp_path: Path, model_dir: Callable[[str], Path], endpoint_url: str) -> Path:
    """Every V1 tool on a real backend: tiny models, a local pointing endpoint, geometric grasps."""
    inprocess = {"runtime": "inprocess"}  # worker processes are covered elsewhere; keep the 2 cores free
    pointing = {"base_url": endpoint_url, "model": "pointer", "point_format": "normalized"}
    config = {
        "tools": {
            "roborefer": {"backend": "endpoint", "options": pointing, **inprocess},
            "vlm": {"backend": "endpoint", "options": pointing, **inprocess},
            "sam2": {"backend": "sam", "model_path": str(model_dir("sam")), **inprocess},
            "depth_estimator": {
                "backend": "depth_pro",
                "model_path": str(model_dir("depth_pro")),
                **inprocess,
            },
            "bounding_box": {"backend": "geometric", **inprocess},
            "grasp_generator": {"backend": "geometric", **inprocess},
            "vision_ops": {"backend": "builtin", **inprocess},
        }
    }
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def point_at_the_centre(body: dict[str, Any]) -> str:
    return "[(0.5, 0.5)]"


def test_tools_run_on_a_photo_with_a_config_of_real_backends(
    tmp_path: Path, model_dir, capfd: pytest.CaptureFixture[str]
) -> None:
    image = tmp_path / "photo.png"
    Image.fromarray(photo()).save(image)
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps(FIRST_TURN + SECOND_TURN))
    with RespondingChatServer(point_at_the_centre) as endpoint:
        config = real_config(tmp_path, model_dir, endpoint.base_url)
        result = runner.invoke(
            app,
            ["tools", "run", "--image", str(image), "--calls", str(calls), "--toolset-config", str(config)],
        )
    assert result.exit_code == 0, result.output
    results = json.loads(capfd.readouterr().out)  # the command writes its JSON to file descriptor 1
    by_name = {entry["name"]: entry for entry in results}
    assert by_name["depth_estimator.estimate_depth_with_pointcloud"]["variables"] == [
        "depth_map",
        "focal_length_px",
        "point_cloud",
    ]
    # The text's number format belongs to the simulated tool; the point is the endpoint's.
    assert re.match(
        r"Detected 1 instance\(s\) of 'the bowl': \[\(0\.50*, 0\.50*\)\]",
        by_name["roborefer.detect_one"]["text"],
    )
    assert by_name["sam2.segment_from_point"]["variables"] == ["segmentation_mask"]
    for entry in results[:4]:
        assert not entry["is_error"], entry
    for entry in results:
        assert "simulated scene" not in entry["text"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["tools", "run", "--calls", "c.json"], "give exactly one of --scene and --image"),
        (["tools", "run", "--calls", "c.json", "--scene", "0", "--image", "p.png"], "give exactly one"),
        (["tools", "run", "--calls", "c.json", "--image", "absent.png"], "no such file: absent.png"),
        (["tools", "list", "--toolset-config", "absent.yaml"], "no such tool-set config: absent.yaml"),
        (["serve", "--toolset-config", "absent.yaml"], "no such tool-set config: absent.yaml"),
        (
            [
                "eval",
                "--policy",
                "scripted",
                "--data",
                ".",
                "--out",
                "o",
                "--toolshed-url",
                "http://x",
                "--toolset-config",
                "t.yaml",
            ],
            "a Toolshed server has its own tools",
        ),
    ],
)
def test_bad_arguments_print_one_clear_line(arguments: list[str], message: str) -> None:
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())


@pytest.mark.slow
def test_eval_on_the_original_layout_runs_every_tool_on_the_photos(tmp_path: Path, model_dir) -> None:
    rows = robospatial_rows()[:2]
    write_original_parquet(
        tmp_path / "eval" / "data" / "robospatial.parquet",
        "robospatial",
        rows,
        image_bytes=True,
        indexed=True,
    )
    turns = [
        "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in FIRST_TURN),
        "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in SECOND_TURN),
        "<answer>[(0.5, 0.5)]</answer>",
    ]
    recordings = [
        Trajectory(
            task_id=task_id,
            data_source="robospatial",
            messages=[{"role": "assistant", "content": turn} for turn in turns],
            tool_calls=[],
            answer=None,
            turns=len(turns),
            score=None,
            parse_errors=0,
            stats={},
            wall_s=0.0,
        )
        for task_id in task_ids("robospatial", rows, indexed=True)
    ]
    replay = tmp_path / "replay.jsonl"
    write_trajectories(recordings, replay)
    with RespondingChatServer(point_at_the_centre) as endpoint:
        config = real_config(tmp_path, model_dir, endpoint.base_url)
        run_eval(
            [
                "--policy", "replay",
                "--option", f"trajectories={replay}",
                "--data", str(tmp_path / "eval"),
                "--out", str(tmp_path / "run"),
                "--toolset-config", str(config),
                "--concurrency", "2",
            ]
        )  # fmt: skip
        requests = len(endpoint.requests)
    samples, _summary = read_run(tmp_path / "run")
    assert len(samples) == 2 and requests == 4  # roborefer and vlm, once per episode
    for sample in samples:
        calls = sample["trajectory"]["tool_calls"]
        assert [call["name"] for call in calls] == [call["name"] for call in FIRST_TURN + SECOND_TURN]
        for call in calls[:4]:
            assert not call["is_error"], call["result_text"]
        assert all("simulated scene" not in call["result_text"] for call in calls)
        assert sample["trajectory"]["answer"] == "[(0.5, 0.5)]"
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["tools"]["toolset_config"] == str(config)
