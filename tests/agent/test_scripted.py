"""The scripted expert's plans on tool texts in the tools' own formats (no tools run here).

End-to-end runs with live tools are in tests/bench/test_evaluate*.py.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

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
from spacetools.agent.protocol import parse_turn
from spacetools.agent.types import EpisodeState, Task, ToolCallRecord
from spacetools.bench.spatialsim import templates
from spacetools.rewards import compute_score
from spacetools.tools.projection import as_normalized_points

IMAGE = np.zeros((48, 64, 3), dtype=np.uint8)
NAMES = ("red mug", "small blue box")


def make_task(data_source: str, question: str, **extra: object) -> Task:
    return Task(id="t", data_source=data_source, question=question, images=[IMAGE], extra_info=dict(extra))


def result(value: object, text: str = "ok") -> ToolOutcome:
    """A successful tool result with a structured value (the expert reads only the value)."""
    return ToolOutcome(text, False, value)


def error(
    text: str = "Error: RuntimeError: inference failed (transient error); retry the call",
) -> ToolOutcome:
    return ToolOutcome(text, True, None)


def run_plan(task: Task, results: list) -> tuple[list[list[tuple[str, dict]]], str]:
    """Drive the policy like the rollout does: each turn's calls get the next scripted results."""
    return run_plan_full(task, results)[:2]  # type: ignore[return-value]


def run_plan_full(task: Task, results: list) -> tuple[list, str, str, bool]:
    """The tool turns, the answer, the answer turn's text, and whether the policy marked it a fallback."""
    policy = ScriptedPolicy()
    messages: list[dict] = [{"role": "user", "content": task.question}]
    records: list[ToolCallRecord] = []
    turns: list[list[tuple[str, dict]]] = []
    for turn in range(8):
        state = EpisodeState(task, messages, [IMAGE], turn, [], tool_calls=list(records))
        text = asyncio.run(policy.act(state))
        parsed = parse_turn(text)
        assert not parsed.errors, parsed.errors
        messages.append({"role": "assistant", "content": text})
        if parsed.answer is not None:
            return turns, parsed.answer, text, state.fallback
        calls = [(call.name, call.arguments) for call in parsed.tool_calls]
        turns.append(calls)
        replies = results[len(turns) - 1]
        if callable(replies):  # computed from the calls made
            replies = replies(calls)
        assert len(replies) == len(calls), (calls, replies)
        for (name, arguments), reply in zip(calls, replies, strict=True):
            records.append(
                ToolCallRecord(
                    name, arguments, reply.text, reply.is_error, [], 0.0, turn + 1, value=reply.value
                )
            )
    raise AssertionError("the plan never answered")


def detected(x: float, y: float) -> ToolOutcome:
    return result({"points": [[x, y]]})


NO_POINT = result({"points": []})
DEPTH = result({"width": 64, "height": 48, "focal_length_px": 60.0, "depth_min": 0.6, "depth_max": 1.3})
SEGMENTED = result({"iou": 0.946, "point": [0.3, 0.5], "shape": [48, 64]})


def box(
    centre: tuple[float, float, float], corners_2d: list[tuple[float, float]] | None = None
) -> ToolOutcome:
    """A compute_bbox value for a 10 cm cube at ``centre`` whose up is camera -y (the tool's keys)."""
    cx, cy, cz = centre
    bottom = [(cx - 0.05, cy + 0.05, cz - 0.05), (cx + 0.05, cy + 0.05, cz - 0.05)]
    bottom += [(cx + 0.05, cy + 0.05, cz + 0.05), (cx - 0.05, cy + 0.05, cz + 0.05)]
    corners = bottom + [(x, y - 0.1, z) for x, y, z in bottom]
    corners_2d = corners_2d or [(0.1 * k, 0.05 * k) for k in range(8)]
    return result({"corners_3d": [list(c) for c in corners], "corners_2d": [list(c) for c in corners_2d]})


def point_3d(x: float, y: float, z: float) -> ToolOutcome:
    return result([x, y, z])


@pytest.mark.parametrize("template", templates.CONFIGURATION)
@pytest.mark.parametrize("relation", ["left of", "right of", "in front of", "behind", "above", "below"])
def test_configuration_compares_box_centres(template: str, relation: str) -> None:
    question = template.format(a=NAMES[0], b=NAMES[1], relation=relation) + " " + templates.YES_NO_INSTRUCTION
    task = make_task("spatialsim_robospatial", question, qa_type="configuration")
    # The red mug is left of, in front of and above the box.
    a_box, b_box = box((-0.2, -0.1, 0.8)), box((0.2, 0.0, 1.1))
    turns, answer = run_plan(
        task,
        [
            [detected(0.3, 0.5), detected(0.7, 0.5), DEPTH],
            [SEGMENTED, point_3d(-0.2, -0.1, 0.8), point_3d(0.2, 0.0, 1.1)],
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


@pytest.mark.parametrize("first_reply", [error(), NO_POINT])
def test_a_failed_or_empty_pointing_call_goes_to_the_second_pointing_model(first_reply: ToolOutcome) -> None:
    question = f"Is the {NAMES[0]} left of the {NAMES[1]}? Answer yes or no."
    task = make_task("spatialsim_robospatial", question)
    records = [
        ToolCallRecord(name, {}, reply.text, reply.is_error, [], 0.0, 1, value=reply.value)
        for name, reply in zip(["a", "b", "c"], [first_reply, detected(0.7, 0.5), DEPTH], strict=True)
    ]
    state = EpisodeState(task, [], [IMAGE], 1, [], tool_calls=records)
    second = parse_turn(asyncio.run(ScriptedPolicy().act(state)))
    assert [(c.name, c.arguments["obj_name"]) for c in second.tool_calls] == [("vlm.detect_one", NAMES[0])]


def test_a_failed_segmentation_is_asked_again_before_the_box_fit() -> None:
    corners = [(0.30 + 0.01 * k, 0.40 + 0.02 * (k % 4)) for k in range(8)]
    question = templates.POSE[0].format(a=NAMES[0]) + " " + templates.CORNERS_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_boppose", question),
        [
            [detected(0.3, 0.45), DEPTH],
            [error()],
            [SEGMENTED],
            [box((0, 0, 1), corners)],
        ],
    )
    assert [turn[0][0] for turn in turns[1:]] == [
        "sam2.segment_from_point",
        "sam2.segment_from_point",
        "bounding_box.compute_bbox",
    ]
    assert answer == "[" + ", ".join(f"({x:.3f}, {y:.3f})" for x, y in corners) + "]"


ITEM_BOX = box((-0.6, 0.0, 2.0))  # the item stands elsewhere; its footprint is 10 x 10 cm
ANCHOR_BOX = box((0.2, 0.0, 1.1))  # the table plane is its bottom face, y = 0.05 (up is camera -y)
ON_TABLE = point_3d(0.0, 0.05, 1.0)


def bare_table(calls: list[tuple[str, dict]]) -> list[ToolOutcome]:
    """Point-cloud readings that are all bare table (the plane y = 0.05)."""
    return [
        result({"points": [[0.0, 0.05, 1.0]] * len(as_normalized_points(a["points_2d"]))}) for _, a in calls
    ]


def compatibility_replies(ring: object, spot: ToolOutcome | None = None) -> list[object]:
    return [
        [detected(0.2, 0.5), detected(0.6, 0.5), spot or detected(0.5, 0.6), DEPTH],
        [SEGMENTED],
        [ITEM_BOX],
        [SEGMENTED],
        [ANCHOR_BOX],
        ring,
    ]


# A small tabletop to measure compatibility on: a level camera 40 cm above a table whose far edge may be
# given; beyond it the floor lies 80 cm lower. Objects are upright boxes standing on the table.
TABLE_Y, FLOOR_Y = 0.4, 1.2
CAMERA = {"width": 640, "height": 480, "focal_length_px": 600.0, "depth_min": 0.5, "depth_max": 4.0}
SPOT = (0.0, 1.5)  # the proposed spot's (x, z) on the table


@dataclass(frozen=True)
class Block:
    """An upright box on the table: centre (x, z), sides along x and z, height."""

    x: float
    z: float
    size_x: float
    size_z: float
    height: float

    def corners(self) -> list[tuple[float, float, float]]:
        bottom = [
            (self.x + sx * self.size_x / 2, TABLE_Y, self.z + sz * self.size_z / 2)
            for sx, sz in ((-1, -1), (1, -1), (1, 1), (-1, 1))
        ]
        return bottom + [(x, y - self.height, z) for x, y, z in bottom]

    def hit(self, ray: np.ndarray) -> float | None:
        """Where a camera ray first enters the box (slab method), as a ray parameter."""
        low = np.array([self.x - self.size_x / 2, TABLE_Y - self.height, self.z - self.size_z / 2])
        high = np.array([self.x + self.size_x / 2, TABLE_Y, self.z + self.size_z / 2])
        with np.errstate(divide="ignore", invalid="ignore"):
            t0, t1 = low / ray, high / ray
        near, far = np.nanmax(np.minimum(t0, t1)), np.nanmin(np.maximum(t0, t1))
        return float(near) if near <= far and near > 0 else None


def cast(u: float, v: float, blocks: list[Block], table_far_z: float) -> list[float]:
    """The camera-frame point the camera sees at a normalized image point (what the point cloud holds)."""
    ray = np.array([(u - 0.5) * 640 / 600, (v - 0.5) * 480 / 600, 1.0])
    hits = [t for t in (block.hit(ray) for block in blocks) if t is not None]
    table = TABLE_Y / ray[1] if ray[1] > 0 else np.inf
    if table * ray[2] > table_far_z:
        table = FLOOR_Y / ray[1] if ray[1] > 0 else 100.0
    return (ray * min([table, *hits])).tolist()


def measured_fit(item: Block, anchor: Block, others: list[Block], table_far_z: float = 9.0) -> str:
    """The expert's answer on the tabletop, every tool reply computed from the scene."""
    blocks = [item, anchor, *others]

    def project(point: tuple[float, float, float]) -> tuple[float, float]:
        return (0.5 + 600 * point[0] / (point[2] * 640), 0.5 + 600 * point[1] / (point[2] * 480))

    def fitted(block: Block) -> ToolOutcome:
        corners = block.corners()
        return result({"corners_3d": [list(c) for c in corners], "corners_2d": [project(c) for c in corners]})

    def read(calls: list[tuple[str, dict]]) -> list[ToolOutcome]:
        assert {name for name, _ in calls} == {"vision_ops.project_2d_points_to_3d"}
        replies = []
        for _, arguments in calls:
            pixels = as_normalized_points(arguments["points_2d"])
            replies.append(result({"points": [cast(u, v, blocks, table_far_z) for u, v in pixels]}))
        return replies

    question = f"Can the {NAMES[0]} fit left of the {NAMES[1]}? Answer yes or no."
    task = make_task("spatialsim_robospatial", question, qa_type="compatibility")
    spot = detected(*project((SPOT[0], TABLE_Y, SPOT[1])))
    first = [detected(*project((item.x, TABLE_Y, item.z))), detected(*project((anchor.x, TABLE_Y, anchor.z)))]
    _, answer, text, fallback = run_plan_full(
        task,
        [[*first, spot, result(CAMERA)], [SEGMENTED], [fitted(item)], [SEGMENTED], [fitted(anchor)], read],
    )
    assert not fallback and "Fallback" not in text
    return answer


ANCHOR = Block(0.35, 1.5, 0.12, 0.12, 0.1)  # right of the spot
CUBE = Block(-0.6, 2.0, 0.08, 0.08, 0.08)  # stands elsewhere; it is the one moved
TRAY = Block(-0.5, 2.2, 0.40, 0.10, 0.03)  # long along x
TRAY_ALONG_Z = Block(-0.5, 2.2, 0.10, 0.40, 0.03)


def ring_of_blocks(radius: float) -> list[Block]:
    """Eight 4 cm blocks around the spot (the anchor stands further right)."""
    angles = np.radians(np.arange(0, 360, 45))
    return [
        Block(SPOT[0] + radius * np.cos(a), SPOT[1] + radius * np.sin(a), 0.04, 0.04, 0.06) for a in angles
    ]


@pytest.mark.parametrize(
    ("item", "others", "table_far_z", "expected"),
    [
        pytest.param(CUBE, [], 9.0, "Yes", id="bare table"),
        pytest.param(TRAY, [], 9.0, "Yes", id="large tray on bare table"),
        pytest.param(CUBE, ring_of_blocks(0.12), 9.0, "Yes", id="small item inside a ring of blocks"),
        pytest.param(TRAY, ring_of_blocks(0.12), 9.0, "No", id="tray whose corners reach the ring"),
        pytest.param(CUBE, [Block(0.0, 1.5, 0.03, 0.03, 0.05)], 9.0, "No", id="a block on the spot"),
        pytest.param(CUBE, [Block(-0.09, 1.5, 0.03, 0.03, 0.05)], 9.0, "Yes", id="a block 3 cm away"),
        pytest.param(TRAY_ALONG_Z, [], 1.57, "Yes", id="fits turned 90 degrees before the table edge"),
        pytest.param(CUBE, [], 1.53, "No", id="overhangs the table edge"),
    ],
)
def test_compatibility_measures_the_whole_footprint(
    item: Block, others: list[Block], table_far_z: float, expected: str
) -> None:
    """Fixed tabletops with known answers: the cases the inscribed circle got wrong included."""
    assert measured_fit(item, ANCHOR, others, table_far_z) == expected


@pytest.mark.parametrize("template", templates.COMPATIBILITY)
@pytest.mark.parametrize(
    ("side", "expected_phrase"),
    [
        ("to the left of", f"free space to the left of the {NAMES[1]} where the {NAMES[0]} can be placed"),
        ("behind", f"free space behind the {NAMES[1]} where the {NAMES[0]} can be placed"),
    ],
)
def test_compatibility_asks_for_a_spot_and_reads_the_point_cloud_there(
    template: str, side: str, expected_phrase: str
) -> None:
    question = template.format(a=NAMES[0], b=NAMES[1], side=side) + " " + templates.YES_NO_INSTRUCTION
    task = make_task("spatialsim_robospatial", question, qa_type="compatibility")
    turns, answer = run_plan(task, compatibility_replies(lambda calls: [error()] * len(calls)))
    assert turns[0][2] == ("roborefer.detect_one", {"obj_name": expected_phrase, "image_index": 0})
    assert turns[0][3][0] == "depth_estimator.estimate_depth_with_pointcloud"
    assert {name for name, _ in turns[5]} == {"vision_ops.project_2d_points_to_3d"}
    assert {arguments["depth"] for _, arguments in turns[5]} == {"$point_cloud"}
    pixels = np.concatenate([as_normalized_points(arguments["points_2d"]) for _, arguments in turns[5]])
    np.testing.assert_allclose(np.median(pixels, axis=0), [0.5, 0.6], atol=0.03)  # around the spot
    assert answer == "No"  # nothing was read, so nothing is known to be free


def test_compatibility_without_a_spot_is_a_marked_fallback() -> None:
    question = f"Can the {NAMES[0]} fit right of the {NAMES[1]}? Answer yes or no."
    task = make_task("spatialsim_robospatial", question, qa_type="compatibility")
    turns, answer, text, fallback = run_plan_full(
        task, [[detected(0.2, 0.5), detected(0.6, 0.5), error(), DEPTH], [error()]]
    )
    assert turns[1] == [turns[0][2]]  # the failed placement request is asked again, never the VLM
    assert answer == "No" and fallback  # recorded on the episode, for training to drop
    assert text.startswith("<think>Fallback guess:")  # and owned up to in the reasoning


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
            [DEPTH],
            [result(depths[0]), result(depths[1])],
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
    _, answer, text, _ = run_plan_full(task, [[detected(0.2, 0.2), detected(0.7, 0.8)]])
    truth = "left" if "left" in options else "above"
    assert answer == f"({'AB'[options.index(truth)]})"
    # The thought spells the comparison out along the options' axis, down to the letter.
    compared = "x 0.200 < 0.700" if truth == "left" else "y 0.200 < 0.800"
    assert (
        f"{compared}, so the {NAMES[0]} is {'left of' if truth == 'left' else 'above'} the {NAMES[1]}, which is {answer}."
        in text
    )


def crop(x0: int, y0: int, x1: int, y1: int) -> ToolOutcome:
    return result({"box": [x0, y0, x1, y1], "coverage": 80.0})


def lifted(depths: list[float]) -> ToolOutcome:
    """A ``project_2d_points_to_3d`` value: one 3D point per depth (x and y do not matter here)."""
    return result({"points": [[0.0, 0.0, z] for z in depths]})


@pytest.mark.parametrize("template", templates.CVB_3D_DEPTH)
def test_depth_3d_compares_the_median_depth_around_each_object(template: str) -> None:
    question = templates.with_choices(template.format(a=NAMES[0], b=NAMES[1]), list(NAMES))
    task = make_task("spatialsim_cvb3ddepth", question, choices=list(NAMES))
    # Three of the mug's readings see into its opening (3.0 m), its median is 0.9 m; the box is at 1.0 m.
    mug = lifted([0.9] * 6 + [3.0] * 3)
    turns, answer = run_plan(
        task, [[detected(0.2, 0.2), detected(0.7, 0.8), DEPTH], [mug, lifted([1.0] * 9)]]
    )
    assert [name for name, _ in turns[0]] == [
        "roborefer.detect_one",
        "roborefer.detect_one",
        "depth_estimator.estimate_depth",
    ]
    assert [name for name, _ in turns[1]] == ["vision_ops.project_2d_points_to_3d"] * 2
    assert {args["depth"] for _, args in turns[1]} == {"$depth_map"}
    mug_patch = as_normalized_points(turns[1][0][1]["points_2d"])
    assert len(mug_patch) == 9 and np.all(np.abs(mug_patch - [0.2, 0.2]) <= 0.02)  # around the mug's point
    assert answer == "(A)"


def test_depth_3d_without_readings_is_a_marked_fallback() -> None:
    question = templates.with_choices(templates.CVB_3D_DEPTH[0].format(a=NAMES[0], b=NAMES[1]), list(NAMES))
    task = make_task("spatialsim_cvb3ddepth", question, choices=list(NAMES))
    _, answer, _, fallback = run_plan_full(
        task, [[detected(0.2, 0.2), detected(0.7, 0.8), DEPTH], [error(), lifted([1.0] * 9)]]
    )
    assert answer == "(A)" and fallback


@pytest.mark.parametrize("template", templates.POSE)
def test_pose_answers_the_fitted_box_corners_and_scores_one(template: str) -> None:
    corners = [(0.30 + 0.01 * k, 0.40 + 0.02 * (k % 4)) for k in range(8)]
    question = template.format(a=NAMES[0]) + " " + templates.CORNERS_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_boppose", question),
        [[detected(0.3, 0.45), DEPTH], [SEGMENTED], [box((0, 0, 1), corners)]],
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
    grasp = result({"confidence": 0.953, "points_2d": [list(p) for p in points]})
    question = template.format(a=NAMES[0]) + " " + templates.GRASP_INSTRUCTION
    turns, answer = run_plan(
        make_task("spatialsim_bopgrasp", question), [[detected(0.5, 0.5), DEPTH], [SEGMENTED], [grasp]]
    )
    assert [name for turn in turns for name, _ in turn] == [
        "roborefer.detect_one",
        "depth_estimator.estimate_depth_with_pointcloud",
        "sam2.segment_from_point",
        "grasp_generator.compute_grasp",
    ]
    assert read_grasp(grasp) == points
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
    _, answer, text, fallback = run_plan_full(
        make_task("spatialsim_bopgrasp", question),
        [
            [detected(0.5, 0.5), DEPTH],
            [SEGMENTED],
            [error("Error: RuntimeError: No collision-free grasps found.")],
            [box((0, 0, 1))],  # the box only when no grasp came back
        ],
    )
    assert answer.startswith("Grasp center: [") and answer.count("[") == 5
    assert fallback and text.startswith("<think>Fallback guess:")  # a guess after a failure is marked


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
    turns, answer = run_plan(make_task(data_source, question, qa_type="vacant"), [[detected(0.2, 0.8)]])
    assert turns[0] == [("roborefer.detect_one", {"obj_name": expected_phrase, "image_index": 0})]
    assert answer == "[(0.200, 0.800)]"


@pytest.mark.parametrize("template", templates.LOCATION)
def test_location_points_at_the_whole_expression(template: str) -> None:
    question = template.format(a="mug", relation="left of", b="small blue box")
    turns, answer = run_plan(make_task("spatialsim_reflocation", question), [[detected(0.41, 0.62)]])
    assert turns[0][0][1]["obj_name"] == "mug left of the small blue box"
    assert answer == "[(0.410, 0.620)]"


@pytest.mark.parametrize("template", templates.DETECT)
def test_detection_boxes_every_instance_from_its_mask(template: str) -> None:
    question = template.format(a="mug") + " " + templates.BOXES_INSTRUCTION
    two = result({"points": [[0.2, 0.3], [0.6, 0.7]]})
    crop_a, crop_b = crop(6, 9, 19, 19), crop(32, 24, 45, 38)
    turns, answer = run_plan(
        make_task("spatialsim_detect2d", question), [[two], [SEGMENTED], [crop_a], [SEGMENTED], [crop_b]]
    )
    assert turns[0][0] == ("roborefer.detect_all", {"obj_name": "mug", "image_index": 0})
    assert turns[2] == [("vision_ops.mask_crop", {"image_index": 0, "mask": "$segmentation_mask"})]
    # Pixel corners over the 64x48 image.
    assert answer == "[[0.094, 0.188, 0.297, 0.396], [0.500, 0.500, 0.703, 0.792]]"


def test_read_box_rejects_errors_and_malformed_values() -> None:
    assert read_box(error("Error: too few object points")) is None
    assert read_box(result({"corners_3d": [[0, 0, 0]], "corners_2d": []})) is None
    assert read_box(result({"corners_3d": [[float("nan")] * 3] * 8, "corners_2d": [[0, 0]] * 8})) is None
    fitted = read_box(box((0.0, 0.0, 1.0)))
    assert fitted is not None
    assert fitted.centre == pytest.approx((0.0, -0.0, 1.0), abs=1e-9)
    assert fitted.up == pytest.approx((0.0, -1.0, 0.0))
    assert fitted.footprint == pytest.approx((0.1, 0.1))


def test_tool_batches_group_the_records_of_each_turn() -> None:
    records = [
        ToolCallRecord("a", {}, "one", False, [], 0.0, 1, value=1.0),
        ToolCallRecord("b", {}, "Error: two", True, [], 0.0, 1),
        ToolCallRecord("c", {}, "three", False, [], 0.0, 2, value={"points": []}),
    ]
    batches = tool_batches(records)
    assert [[o.text for o in batch] for batch in batches] == [["one", "Error: two"], ["three"]]
    assert batches[0][1].is_error and batches[0][0].value == 1.0


def test_replay_asks_for_the_first_missing_batch() -> None:
    replay = ToolReplay([[result(None, "r1")]])
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


class NoScene(dict):
    """Task metadata that fails the test if anyone reads the scene (the expert must not)."""

    def __getitem__(self, key: object) -> object:
        assert key != "scene", "the expert read extra_info['scene']"
        return super().__getitem__(key)

    def get(self, key: object, default: object = None) -> object:
        assert key != "scene", "the expert read extra_info['scene']"
        return super().get(key, default)


def test_the_expert_never_reads_the_scene_from_the_task_metadata() -> None:
    question = f"Can the {NAMES[0]} fit right of the {NAMES[1]}? Answer yes or no."
    task = make_task("spatialsim_robospatial", question)
    task.extra_info = NoScene(qa_type="compatibility", scene='{"seed": 1}')
    _, answer = run_plan(task, compatibility_replies(bare_table))
    assert answer == "Yes"
    options = list(NAMES)
    depth_task = make_task(
        "spatialsim_cvb3ddepth",
        templates.with_choices(templates.CVB_3D_DEPTH[0].format(a=NAMES[0], b=NAMES[1]), options),
    )
    depth_task.extra_info = NoScene(choices=options, scene='{"seed": 1}')
    _, answer = run_plan(
        depth_task,
        [[detected(0.2, 0.2), detected(0.7, 0.8), DEPTH], [lifted([0.9] * 9), lifted([1.0] * 9)]],
    )
    assert answer == "(A)"
