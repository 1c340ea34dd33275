"""The V1 tool set's model-facing schemas match the checked-in snapshot (names, arguments, texts).

The snapshot holds the tag protocol's names (`roborefer.detect_one`); `tools schemas --format openai`
prints the same schemas with the API's names (`roborefer-detect_one`, tests/cli/test_vocabulary.py).
After a deliberate change, regenerate the snapshot with:
    .venv/bin/python -c "import json; from tests.tools.test_tools_schemas import current_schemas; \
        print(json.dumps(current_schemas(), indent=2, ensure_ascii=False))" > tests/tools/v1_schemas.json
"""

from __future__ import annotations

import json
from pathlib import Path

from spacetools.kit.definition import tool_specs
from spacetools.toolshed.toolsets import TOOLSETS

SNAPSHOT = Path(__file__).with_name("v1_schemas.json")

V1_TOOL_NAMES = {
    "roborefer.detect_one",
    "roborefer.detect_all",
    "vlm.detect_one",
    "vlm.detect_all",
    "sam2.segment_from_point",
    "sam2.segment_from_points",
    "depth_estimator.estimate_depth",
    "depth_estimator.estimate_depth_with_pointcloud",
    "bounding_box.compute_bbox",
    "grasp_generator.compute_grasp",
    "vision_ops.index_at",
    "vision_ops.mask_crop",
    "vision_ops.point_crop",
    "vision_ops.project_2d_points_to_3d",
    "vision_ops.project_3d_points_to_2d",
}


def current_schemas() -> list[dict]:
    return [spec.to_openai() for d in TOOLSETS["v1"] for spec in tool_specs(d.tool_class())]


def test_v1_schemas_match_the_snapshot() -> None:
    assert current_schemas() == json.loads(SNAPSHOT.read_text())


def test_v1_has_the_original_names_and_argument_names() -> None:
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in current_schemas()}
    assert set(schemas) == V1_TOOL_NAMES
    assert list(schemas["roborefer.detect_one"]["properties"]) == ["obj_name", "image_index"]
    assert list(schemas["sam2.segment_from_point"]["properties"]) == ["x", "y", "image_index"]
    assert list(schemas["bounding_box.compute_bbox"]["properties"]) == [
        "point_cloud",
        "mask",
        "focal_length_px",
    ]
    assert list(schemas["grasp_generator.compute_grasp"]["properties"]) == [
        "point_cloud",
        "mask",
        "focal_length_px",
        "image_index",
    ]
    assert list(schemas["vision_ops.index_at"]["properties"]) == ["data", "u", "v"]
