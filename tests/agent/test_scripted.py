"""The scripted expert's plans on tool texts in the tools' own formats (no tools run here).

End-to-end runs with live tools are in tests/bench/test_evaluate*.py.
"""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from spacetools.agent.policies import make_policy
from spacetools.agent.policies.scripted import (
    QuestionNotUnderstood,
    ScriptedPolicy,
    ToolOutcome,
    ToolReplay,
    choose_plan,
    read_box,
    read_grasp,
    tool_batches,
)
from spacetools.agent.protocol import parse_turn, tool_message
from spacetools.agent.types import EpisodeState, Task
from spacetools.bench.spatialsim import templates
from spacetools.rewards import compute_score

IMAGE = np.zeros((48, 64, 3), dtype=np.uint8)
NAMES = ("red mug", "small blue box")


def make_task(data_source: str, question: str, **extra: object) -> Task:
    return Task(id="t", data_source=data_source, question=question, images=[IMAGE], extra_info=dict(extra))


def run_plan(task: Task, results: list[list[str]]) -> tuple[list[list[tuple[str, dict]]], str]:
    """Drive the policy like the rollout does: each turn's calls get the next scripted results."""
    policy = ScriptedPolicy()
    messages: list[dict] = [{"role": "user", "content": task.question}]
    turns: list[list[tuple[str, dict]]] = []
    for turn in range(8):
        text = asyncio.run(policy.act(EpisodeState(task, messages, [IMAGE], turn, [])))
        parsed = parse_turn(text)
        assert not parsed.errors, parsed.errors
        messages.append({"role": "assistant", "content": text})
        if parsed.answer is not None:
            return turns, parsed.answer
        calls = [(call.name, call.arguments) for call in parsed.tool_calls]
        turns.append(calls)
        replies = results[len(turns) - 1]
        assert len(replies) == len(calls), (calls, replies)
        messages.extend(tool_message(reply) for reply in replies)
    raise AssertionError("the plan never answered")


def detected(name: str, x: float, y: float) -> str:
    return f"Detected 1 instance(s) of '{name}': [({x:.3f}, {y:.3f})]"


NO_POINT = "Detected 0 instance(s) of 'free space': []"
DEPTH_TEXT = (
    "Generated 64x48 depth map and 3,072 3D points. Depth range in point cloud: 0.65m to 1.29m (mean: 0.95m). "
    "Use $depth_map (numpy array, 48x64), $point_cloud (numpy array, 3072x3) and $focal_length_px (float)."
)
SEGMENTED = (
    "Segmented object at normalized coords (0.300, 0.500) with IoU score: 0.946. Use $segmentation_mask."
)


def box_text(centre: tuple[float, float, float], corners_2d: list[tuple[float, float]] | None = None) -> str:
    """A compute_bbox result for a 10 cm cube at ``centre`` whose up is camera -y."""
    cx, cy, cz = centre
    bottom = [(cx - 0.05, cy + 0.05, cz - 0.05), (cx + 0.05, cy + 0.05, cz - 0.05)]
    bottom += [(cx + 0.05, cy + 0.05, cz + 0.05), (cx - 0.05, cy + 0.05, cz + 0.05)]
    corners = bottom + [(x, y - 0.1, z) for x, y, z in bottom]
    corners_2d = corners_2d or [(0.1 * k, 0.05 * k) for k in range(8)]
    return (
        "Oriented bounding box computed from 500/3072 points.\n"
        f"Corners in 3D: {np.round(corners, 3).tolist()}\n"
        f"Corners in normalized image coordinates: {np.round(corners_2d, 3).tolist()}\n"
        "Edges: [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7)]\n"
        "Extent: [0.1, 0.1, 0.1]\nVolume: 0.001000"
    )


@pytest.mark.parametrize("template", templates.CONFIGURATION)
@pytest.mark.parametrize("relation", ["left of", "right of", "in front of", "behind", "above", "below"])
def test_configuration_compares_box_centres(template: str, relation: str) -> None:
    question = template.format(a=NAMES[0], b=NAMES[1], relation=relation) + " " + templates.YES_NO_INSTRUCTION
    task = make_task("spatialsim_robospatial", question, qa_type="configuration")
    # The red mug is left of, in front of and above the box.
    a_box, b_box = box_text((-0.2, -0.1, 0.8)), box_text((0.2, 0.0, 1.1))
    turns, answer = run_plan(
        task,
        [
            [detected(NAMES[0], 0.3, 0.5), detected(NAMES[1], 0.7, 0.5), DEPTH_TEXT],
            [
                SEGMENTED,
                "Value at (0.300, 0.500): [-0.2, -0.1, 0.8]",
                "Value at (0.700, 0.500): [0.2, 0.0, 1.1]",
            ],
            [a_box],
            [SEGMENTED],
            [b_box],
        ],
    )
    assert turns[0][0] == ("roborefer.detect_one", {"obj_name": NAMES[0], "image_index": 0})
    assert turns[0][1][1]["obj_name"] == NAMES[1]
    assert turns[2] == [
        (
            "bounding_box.compute_bbox",
            {
                "point_cloud": "$point_cloud",
                "mask": "$segmentation_mask",
                "focal_length_px": "$focal_length_px",
            },
        )
    ]
    expected = "Yes" if relation in ("left of", "in front of", "above") else "No"
    assert answer == expected


@pytest.mark.parametrize("first_reply", ["Error: RuntimeError: pointing inference failed", NO_POINT])
def test_a_failed_or_empty_pointing_call_goes_to_the_second_pointing_model(first_reply: str) -> None:
    question = f"Is the {NAMES[0]} left of the {NAMES[1]}? Answer yes or no."
    task = make_task("spatialsim_robospatial", question)
    policy = ScriptedPolicy()
    messages: list[dict] = [{"role": "user", "content": question}]
    first = asyncio.run(policy.act(EpisodeState(task, messages, [IMAGE], 0, [])))
    messages.append({"role": "assistant", "content": first})
    for reply in [first_reply, detected(NAMES[1], 0.7, 0.5), DEPTH_TEXT]:
        messages.append(tool_message(reply))
    second = parse_turn(asyncio.run(policy.act(EpisodeState(task, messages, [IMAGE], 1, []))))
    assert [(c.name, c.arguments["obj_name"]) for c in second.tool_calls] == [("vlm.detect_one", NAMES[0])]


def test_a_failed_segmentation_is_asked_again_before_the_box_fit() -> None:
    corners = [(0.30 + 0.01 * k, 0.40 + 0.02 * (k % 4)) for k in range(8)]
    question = templates.POSE[0].format(a=NAMES[0]) + " " + templates.CORNERS_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_boppose", question),
        [
            [detected(NAMES[0], 0.3, 0.45), DEPTH_TEXT],
            ["Error: RuntimeError: SAM2 inference failed (transient error); retry the call"],
            [SEGMENTED],
            [box_text((0, 0, 1), corners)],
        ],
    )
    assert [turn[0][0] for turn in turns[1:]] == [
        "sam2.segment_from_point",
        "sam2.segment_from_point",
        "bounding_box.compute_bbox",
    ]
    assert answer == "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in corners) + "]"


@pytest.mark.parametrize("template", templates.COMPATIBILITY)
@pytest.mark.parametrize(
    ("side", "expected_phrase"),
    [
        ("to the left of", f"free space to the left of the {NAMES[1]} where the {NAMES[0]} can be placed"),
        ("behind", f"free space behind the {NAMES[1]} where the {NAMES[0]} can be placed"),
    ],
)
@pytest.mark.parametrize(("reply", "expected"), [(detected("spot", 0.2, 0.7), "Yes"), (NO_POINT, "No")])
def test_compatibility_asks_roborefer_where_the_object_can_be_placed(
    template: str, side: str, expected_phrase: str, reply: str, expected: str
) -> None:
    question = template.format(a=NAMES[0], b=NAMES[1], side=side) + " " + templates.YES_NO_INSTRUCTION
    task = make_task("spatialsim_robospatial", question, qa_type="compatibility")
    turns, answer = run_plan(task, [[reply]])
    assert turns == [[("roborefer.detect_one", {"obj_name": expected_phrase, "image_index": 0})]]
    assert answer == expected


def test_compatibility_is_read_from_the_wording_without_a_qa_type() -> None:
    question = f"Is there enough room for the {NAMES[0]} in front of the {NAMES[1]}? Answer yes or no."
    turns, answer = run_plan(make_task("spatialsim_robospatial", question), [[detected("spot", 0.5, 0.9)]])
    assert turns[0][0][1]["obj_name"].startswith(f"free space in front of the {NAMES[1]} where")
    assert answer == "Yes"


@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        (["Error: RuntimeError: pointing inference failed", detected("spot", 0.3, 0.6)], "Yes"),
        (["Error: RuntimeError: pointing inference failed", NO_POINT], "No"),
        (["Error: RuntimeError: pointing inference failed"] * 2, "No"),
    ],
)
def test_compatibility_retries_only_a_failed_call_and_never_asks_the_vlm(
    replies: list[str], expected: str
) -> None:
    question = f"Can the {NAMES[0]} fit right of the {NAMES[1]}? Answer yes or no."
    turns, answer = run_plan(
        make_task("spatialsim_robospatial", question, qa_type="compatibility"), [[r] for r in replies]
    )
    phrase = f"free space to the right of the {NAMES[1]} where the {NAMES[0]} can be placed"
    assert turns == [[("roborefer.detect_one", {"obj_name": phrase, "image_index": 0})]] * len(replies)
    assert answer == expected


@pytest.mark.parametrize("template", templates.BLINK_DEPTH)
@pytest.mark.parametrize(("depths", "closer"), [((0.9, 1.3), "A"), ((1.4, 1.0), "B")])
def test_blink_depth_reads_the_depth_map_at_the_marked_points(
    template: str, depths: tuple[float, float], closer: str
) -> None:
    question = templates.with_choices(template, ["B", "A"])  # letters shuffled: (A) B, (B) A
    task = make_task(
        "spatialsim_blinkdepth", question, marked_points=[[0.2, 0.3], [0.6, 0.7]], choices=["B", "A"]
    )
    turns, answer = run_plan(
        task,
        [
            ["Estimated depth map for 64x48 image. Focal length: 60.0px. Use $depth_map."],
            [f"Value at (0.200, 0.300): {depths[0]}", f"Value at (0.600, 0.700): {depths[1]}"],
        ],
    )
    assert turns[1][0] == ("vision_ops.index_at", {"data": "$depth_map", "u": 0.2, "v": 0.3})
    assert answer == ("(B)" if closer == "A" else "(A)")


@pytest.mark.parametrize("template", templates.CVB_2D_RELATION)
@pytest.mark.parametrize(
    "options", [["left", "right"], ["right", "left"], ["above", "below"], ["below", "above"]]
)
def test_relation_2d_compares_image_positions(template: str, options: list[str]) -> None:
    question = templates.with_choices(template.format(a=NAMES[0], b=NAMES[1]), options)
    task = make_task("spatialsim_cvb2drelation", question, choices=options)
    # The mug is left of and above the box in the image.
    _, answer = run_plan(task, [[detected(NAMES[0], 0.2, 0.2), detected(NAMES[1], 0.7, 0.8)]])
    truth = "left" if "left" in options else "above"
    assert answer == f"({'AB'[options.index(truth)]})"


@pytest.mark.parametrize("template", templates.CVB_3D_DEPTH)
def test_depth_3d_picks_the_closer_named_object(template: str) -> None:
    question = templates.with_choices(template.format(a=NAMES[0], b=NAMES[1]), list(NAMES))
    task = make_task("spatialsim_cvb3ddepth", question, choices=list(NAMES))
    _, answer = run_plan(
        task,
        [
            [
                detected(NAMES[0], 0.2, 0.2),
                detected(NAMES[1], 0.7, 0.8),
                "Estimated depth map. Use $depth_map.",
            ],
            ["Value: 1.25", "Value: 0.85"],
        ],
    )
    assert answer == "(B)"


@pytest.mark.parametrize("template", templates.POSE)
def test_pose_answers_the_fitted_box_corners_and_scores_one(template: str) -> None:
    corners = [(0.30 + 0.01 * k, 0.40 + 0.02 * (k % 4)) for k in range(8)]
    question = template.format(a=NAMES[0]) + " " + templates.CORNERS_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_boppose", question),
        [[detected(NAMES[0], 0.3, 0.45), DEPTH_TEXT], [SEGMENTED], [box_text((0, 0, 1), corners)]],
    )
    assert [call[0] for turn in turns for call in turn] == [
        "roborefer.detect_one",
        "depth_estimator.estimate_depth_with_pointcloud",
        "sam2.segment_from_point",
        "bounding_box.compute_bbox",
    ]
    truth = "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in corners) + "]"
    assert compute_score("spatialsim_boppose", f"<answer>{answer}</answer>", truth)["score"] == pytest.approx(
        1.0
    )


@pytest.mark.parametrize("template", templates.GRASP)
def test_grasp_copies_the_generated_gripper_points(template: str) -> None:
    points = [(0.5, 0.5), (0.45, 0.5), (0.55, 0.5), (0.45, 0.6), (0.55, 0.6)]
    grasp_text = (
        "Generated collision-free grasp with confidence 0.953 from 400/3072 masked points. "
        "Filtered 100 → 8 collision-free grasps. Projected 2D gripper points: "
        + "["
        + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in points)
        + "]"
    )
    question = template.format(a=NAMES[0]) + " " + templates.GRASP_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_bopgrasp", question),
        [[detected(NAMES[0], 0.5, 0.5), DEPTH_TEXT], [SEGMENTED], [box_text((0, 0, 1)), grasp_text]],
    )
    assert [name for name, _ in turns[2]] == ["bounding_box.compute_bbox", "grasp_generator.compute_grasp"]
    assert read_grasp(ToolOutcome(grasp_text)) == points
    truth = ", ".join(
        f"{label}: [{x}, {y}]"
        for label, (x, y) in zip(
            ["Grasp center", "Left finger base", "Right finger base", "Left finger tip", "Right finger tip"],
            points,
            strict=True,
        )
    )
    assert compute_score("spatialsim_bopgrasp", f"<answer>{answer}</answer>", truth)[
        "score"
    ] == pytest.approx(1.0)


def test_a_failed_grasp_falls_back_to_a_grasp_across_the_box() -> None:
    question = f"Propose a grasp of the {NAMES[0]} with a parallel gripper."
    _, answer = run_plan(
        make_task("spatialsim_bopgrasp", question),
        [
            [detected(NAMES[0], 0.5, 0.5), DEPTH_TEXT],
            [SEGMENTED],
            [box_text((0, 0, 1)), "Error: RuntimeError: No collision-free grasps found."],
        ],
    )
    assert answer.startswith("Grasp center: [") and answer.count("[") == 5


@pytest.mark.parametrize(
    ("data_source", "question", "expected_phrase"),
    [
        ("spatialsim_robospatial", t.format(b="red mug", side=s) + " " + templates.POINTS_INSTRUCTION, p)
        for t, (s, p) in itertools.product(
            templates.VACANT,
            [
                ("to the left of", "vacant space to the left of the red mug"),
                ("behind", "vacant space behind the red mug"),
            ],
        )
    ]
    + [
        ("spatialsim_refplacement", t.format(a="small blue box", b="red mug", side="in front of"), p)
        for t, p in zip(templates.PLACEMENT, ["vacant space in front of the red mug"] * 3, strict=True)
    ],
)
def test_free_space_questions_ask_the_pointer_for_vacant_space(
    data_source: str, question: str, expected_phrase: str
) -> None:
    turns, answer = run_plan(
        make_task(data_source, question, qa_type="vacant"), [[detected(expected_phrase, 0.2, 0.8)]]
    )
    assert turns[0] == [("roborefer.detect_one", {"obj_name": expected_phrase, "image_index": 0})]
    assert answer == "[(0.200, 0.800)]"


@pytest.mark.parametrize("template", templates.LOCATION)
def test_location_points_at_the_whole_expression(template: str) -> None:
    question = template.format(a="mug", relation="left of", b="small blue box")
    turns, answer = run_plan(make_task("spatialsim_reflocation", question), [[detected("x", 0.41, 0.62)]])
    assert turns[0][0][1]["obj_name"] == "mug left of the small blue box"
    assert answer == "[(0.410, 0.620)]"


@pytest.mark.parametrize("template", templates.DETECT)
def test_detection_boxes_every_instance_from_its_mask(template: str) -> None:
    question = template.format(a="mug") + " " + templates.BOXES_INSTRUCTION
    two = "Detected 2 instance(s) of 'mug': [(0.200, 0.300), (0.600, 0.700)]"
    crop_a = "Cropped masked region from (6, 9) to (19, 19) [size: 13x10], mask coverage: 80.0%."
    crop_b = "Cropped masked region from (32, 24) to (45, 38) [size: 13x14], mask coverage: 75.0%."
    turns, answer = run_plan(
        make_task("spatialsim_detect2d", question), [[two], [SEGMENTED], [crop_a], [SEGMENTED], [crop_b]]
    )
    assert turns[0][0] == ("roborefer.detect_all", {"obj_name": "mug", "image_index": 0})
    assert turns[2] == [("vision_ops.mask_crop", {"image_index": 0, "mask": "$segmentation_mask"})]
    # Pixel corners over the 64x48 image.
    assert answer == "[[0.094, 0.188, 0.297, 0.396], [0.500, 0.500, 0.703, 0.792]]"


def test_read_box_rejects_errors_and_unreadable_texts() -> None:
    assert read_box(ToolOutcome("Error: ToolError: too few object points")) is None
    assert read_box(ToolOutcome("Corners in 3D: [[0, 0, 0]]")) is None
    box = read_box(ToolOutcome(box_text((0.0, 0.0, 1.0))))
    assert box is not None
    assert box.centre == pytest.approx((0.0, -0.0, 1.0), abs=1e-9)
    assert box.up == pytest.approx((0.0, -1.0, 0.0))


def test_tool_batches_group_the_responses_of_each_turn() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        tool_message("one"),
        tool_message("Error: two"),
        {"role": "assistant", "content": "b"},
        tool_message("three"),
    ]
    batches = tool_batches(messages)
    assert [[o.text for o in batch] for batch in batches] == [["one", "Error: two"], ["three"]]
    assert batches[0][1].is_error and not batches[0][0].is_error


def test_replay_asks_for_the_first_missing_batch() -> None:
    replay = ToolReplay([[ToolOutcome("r1")]])
    assert [o.text for o in replay.call("t", ("echo.echo", {"text": "x"}))] == ["r1"]
    assert replay.turns_left == 6
    with pytest.raises(Exception, match="second"):
        replay.call("second", ("echo.echo", {"text": "y"}))


def test_unknown_questions_and_sources_give_clear_errors() -> None:
    with pytest.raises(QuestionNotUnderstood, match="no plan for data source"):
        choose_plan(make_task("mystery", "What?"))
    policy = make_policy("scripted")
    task = make_task("spatialsim_boppose", "Tell me a story.")
    with pytest.raises(QuestionNotUnderstood, match="cannot read this pose question"):
        asyncio.run(policy.act(EpisodeState(task, [], [IMAGE], 0, [])))
    with pytest.raises(ValueError, match="max_turns"):
        ScriptedPolicy(max_turns=1)
