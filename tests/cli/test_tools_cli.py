"""`spacetools tools list / schemas / run`: schemas in both formats, a real run, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.cli.tools import app
from spacetools.sim.layout import build_scene

runner = CliRunner()

CHAIN = [
    {"name": "vlm.detect_one", "arguments": {"obj_name": "{name}", "image_index": 0}},
    {"name": "sam2.segment_from_points", "arguments": {"points": "${var}", "image_index": 0}},
    {"name": "depth_estimator.estimate_depth_with_pointcloud", "arguments": {"image_index": 0}},
    {
        "name": "bounding_box.compute_bbox",
        "arguments": {
            "point_cloud": "$point_cloud",
            "mask": "$segmentation_mask",
            "focal_length_px": "$focal_length_px",
        },
    },
    {"name": "vision_ops.index_at", "arguments": {"data": "$depth_map", "u": 0.5, "v": 0.5}},
    {"name": "vision_ops.index_at", "arguments": {"data": "$nothing", "u": 0.5, "v": 0.5}},
]


def test_list_shows_every_v1_tool() -> None:
    result = runner.invoke(app, ["list", "--toolset", "v1"])
    assert result.exit_code == 0, result.output
    for name in ("roborefer.detect_one", "grasp_generator.compute_grasp", "vision_ops.index_at"):
        assert name in result.output


def test_schemas_openai_is_a_json_array_of_functions() -> None:
    result = runner.invoke(app, ["schemas", "--toolset", "v1", "--format", "openai"])
    assert result.exit_code == 0, result.output
    schemas = json.loads(result.output)
    assert len(schemas) == 15
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object" for s in schemas)


def test_schemas_hermes_is_the_tools_block() -> None:
    result = runner.invoke(app, ["schemas", "--format", "hermes"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "<tools>" and lines[-1] == "</tools>"
    assert json.loads(lines[1])["function"]["name"] == "roborefer.detect_one"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["schemas", "--toolset", "v9"], "unknown toolset 'v9'"),
        (["schemas", "--format", "xml"], "unknown format 'xml'"),
        (["run", "--scene", "0", "--calls", "/nonexistent/calls.json"], "no such file"),
        (["run", "--scene", "0", "--calls", "calls.json", "--profile", "noisy"], "unknown profile 'noisy'"),
    ],
)
def test_bad_options_exit_with_code_2(arguments: list[str], message: str) -> None:
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_bad_calls_files_exit_with_code_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    result = runner.invoke(app, ["run", "--scene", "0", "--calls", str(broken)])
    assert result.exit_code == 2 and "not valid JSON" in result.output
    nameless = tmp_path / "nameless.json"
    nameless.write_text('[{"arguments": {}}]')
    result = runner.invoke(app, ["run", "--scene", "0", "--calls", str(nameless)])
    assert result.exit_code == 2 and 'needs a string "name"' in result.output


def test_a_scene_that_is_neither_a_folder_nor_a_seed_exits_with_code_2(tmp_path: Path) -> None:
    calls = tmp_path / "calls.json"
    calls.write_text("[]")
    result = runner.invoke(app, ["run", "--scene", str(tmp_path / "missing"), "--calls", str(calls)])
    assert result.exit_code == 2 and "neither a scene directory nor an integer seed" in " ".join(
        result.output.split()
    )


@pytest.mark.slow
def test_run_executes_a_chain_on_a_saved_scene_in_worker_processes(tmp_path: Path) -> None:
    with build_scene(5) as scene:
        scene.save(tmp_path / "scene")
        names = [o.name for o in scene.spec.objects]
    name = next(n for n in names if names.count(n) == 1)
    text = json.dumps(CHAIN).replace("{name}", name).replace("{var}", name.replace(" ", "_") + "_detections")
    (tmp_path / "calls.json").write_text(text)
    command = [sys.executable, "-m", "spacetools.cli.main", "tools", "run"]
    command += [
        "--scene",
        str(tmp_path / "scene"),
        "--calls",
        str(tmp_path / "calls.json"),
        "--profile",
        "exact",
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout)  # stdout holds only the JSON: banners went to stderr
    assert [r["name"] for r in results] == [c["name"] for c in CHAIN]
    assert [r["is_error"] for r in results] == [False] * 5 + [True]
    assert results[0]["text"].startswith(f"Detected 1 instance(s) of '{name}': [(")
    assert results[3]["variables"] == ["edges", "extent", "obb_corners_2d", "obb_corners_3d"]
    assert len(results[3]["value"]["corners_2d"]) == 8  # the structured result beside the text
    assert "nothing" in results[5]["text"]
