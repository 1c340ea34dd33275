"""The tool-set YAML: the default file is the V1 set, every mistake is named with its file and setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spacetools.tools.diagnostics import EchoTool
from spacetools.tools.segmentation import Sam2Tool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.config import BACKENDS, load_toolset_config
from spacetools.toolshed.toolsets import TOOLSETS, with_profile

CONFIGS = Path(__file__).parents[2] / "configs" / "toolsets"


def write(tmp_path: Path, tools: dict) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": tools}))
    return path


def saved_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_sim_yaml_is_the_v1_tool_set() -> None:
    assert load_toolset_config(CONFIGS / "sim.yaml") == TOOLSETS["v1"]


def test_real_yaml_names_every_v1_tool_and_stops_at_its_placeholder_folders() -> None:
    real = yaml.safe_load((CONFIGS / "real.yaml").read_text())
    assert set(real["tools"]) == set(BACKENDS)
    with pytest.raises(
        ValueError, match=r"real\.yaml: tools\.vlm: model_path: model folder .* does not exist"
    ):
        load_toolset_config(CONFIGS / "real.yaml")


def test_a_model_backend_gets_its_settings_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    saved_model(tmp_path / "models" / "depth")
    path = write(
        tmp_path,
        {
            "depth_estimator": {
                "backend": "depth_anything",
                "model_path": "models/depth",
                "device": "cuda:1",
                "batch_size": 4,
                "instances": 2,
                "timeout_s": 90,
                "options": {"fov_deg": 70},
            },
            "vision_ops": {"backend": "builtin", "runtime": "inprocess"},
        },
    )
    depth, vision = load_toolset_config(path)
    assert depth.tool == "spacetools.tools.models.depth:DepthAnythingTool"
    assert (depth.instances, depth.backend, depth.timeout_s) == (2, "process", 90)
    assert depth.config == {
        "model_path": str(tmp_path / "models" / "depth"),
        "device": "cuda:1",
        "batch_size": 4,
        "fov_deg": 70,
    }
    assert vision.backend == "inprocess" and vision.config == {}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ({"sam3": {"backend": "sim"}}, r"tools\.sam3: unknown tool; choose from roborefer, vlm, sam2"),
        (
            {"sam2": {"backend": "sam3"}},
            r"tools\.sam2\.backend: unknown backend 'sam3'; choose from sim, sam2, sam",
        ),
        ({"sam2": {"backend": "sam2"}}, r"tools\.sam2: model_path: Field required"),
        (
            {"sam2": {"backend": "sam2", "model_path": "nowhere"}},
            r"tools\.sam2: model_path: model folder '.*nowhere' does not exist",
        ),
        (
            {"sam2": {"backend": "sam2", "model_path": "m", "device": "gpu0"}},
            r"tools\.sam2: device: device must be cpu, cuda, cuda:N or mps, got 'gpu0'",
        ),
        (
            {"sam2": {"backend": "sam2", "model_path": "m", "options": {"colour": 1}}},
            r"tools\.sam2: colour: unknown setting",
        ),
        (
            {"sam2": {"backend": "sim", "model_path": "m"}},
            r"tools\.sam2: backend 'sim' loads no model \(remove model_path\)",
        ),
        (
            {"sam2": {"backend": "sim", "runtime": "cloud"}},
            r"tools\.sam2\.runtime: Input should be 'inprocess', 'process' or 'ray'",
        ),
        (
            {"vlm": {"backend": "endpoint", "options": {"model": "m"}}},
            r"tools\.vlm: base_url: Field required",
        ),
        ({}, r"tools: Dictionary should have at least 1 item"),
        *(
            (
                {"sam2": {"backend": "sim", "runtime": runtime, "options": {"colour": 1}}},
                r"tools\.sam2\.options: unknown option colour for backend 'sim' \(known: .*profile",
            )
            for runtime in ("inprocess", "process", "ray")
        ),
        (
            {"vision_ops": {"backend": "builtin", "options": {"fast": True}}},
            r"tools\.vision_ops\.options: unknown option fast for backend 'builtin' \(known: none\)",
        ),
        (
            {"sam2": {"backend": "sim", "timeout_s": float("inf")}},
            r"tools\.sam2\.timeout_s: Input should be a finite",
        ),
        (
            {"sam2": {"backend": "sim", "timeout_s": 1e9}},
            r"tools\.sam2\.timeout_s: Input should be less than",
        ),
    ],
)
def test_mistakes_are_named_with_the_file_and_the_setting(tmp_path: Path, tools: dict, message: str) -> None:
    saved_model(tmp_path / "m")
    with pytest.raises(ValueError, match=r"tools\.yaml: " + message):
        load_toolset_config(write(tmp_path, tools))


def test_a_missing_file_and_broken_yaml_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such tool-set config"):
        load_toolset_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("tools: [unclosed")
    with pytest.raises(ValueError, match=r"broken\.yaml: not valid YAML"):
        load_toolset_config(broken)


def test_a_tool_that_names_its_settings_takes_no_others_in_code_either() -> None:
    for backend in ("inprocess", "process", "ray"):
        with pytest.raises(ValueError, match=r"tool 'sam2' has no setting colour \(its settings: .*profile"):
            Toolshed([ToolDeployment(tool=Sam2Tool, backend=backend, config={"colour": 1})])
    with pytest.raises(ValueError, match="timeout_s"):
        ToolDeployment(tool=Sam2Tool, timeout_s=float("inf"))


def test_realism_is_a_deployment_setting_that_the_toolshed_reports() -> None:
    realistic = with_profile("v1", "realistic")
    assert {d.name: d.config.get("profile") for d in realistic} == {
        "roborefer": "realistic",
        "vlm": "realistic",
        "sam2": "realistic",
        "depth_estimator": "realistic",
        "bounding_box": None,  # geometry on what perception returned: no realism of its own
        "grasp_generator": None,
        "vision_ops": None,
    }
    assert TOOLSETS["v1"][0].config == {}  # the named tool set itself is left as it was
    assert Toolshed(realistic).profile == "realistic"  # what `GET /health` reports
    mixed = [*with_profile(TOOLSETS["v1"][:1], "exact"), *with_profile(TOOLSETS["v1"][2:3], "harsh")]
    echo = [ToolDeployment(tool=EchoTool, backend="inprocess")]
    assert Toolshed(mixed).profile is None and Toolshed(echo).profile is None
    with pytest.raises(ValueError, match="unknown profile 'perfect'"):
        with_profile("v1", "perfect")
    with pytest.raises(TypeError):  # no second way to set it on the Toolshed
        Toolshed("v1", profile="exact")  # type: ignore[call-arg]
