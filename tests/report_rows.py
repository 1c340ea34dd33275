"""Many scored rows of real SpatialSim samples, without running the episodes: a run of any size for
the report's tests and benchmarks/report_open.py.

Each row is what the evaluation writes: the sample's own question, a trajectory that answers right or
(two rows in seven) with another sample's right answer, scored by the real scorer, and tool calls
carrying pictures as large as the tools' (a 320-pixel JPEG thumbnail of the scene); every tenth row
has a failed tool call and every 25th a policy error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spacetools.agent.types import ToolCallRecord, Trajectory
from spacetools.bench.dataset import Sample
from spacetools.bench.evaluate import thumbnail_data_url
from spacetools.bench.report import answer_kind
from spacetools.rewards import compute_score, format_points, load_mask, mask_centroid


def answer_for(sample: Sample) -> str:
    """What a right answer says: the ground truth, or for a mask truth a point at its centroid."""
    if answer_kind(sample.data_source, sample.ground_truth) == "mask":
        return format_points([mask_centroid(load_mask(sample.ground_truth))])
    return sample.ground_truth


def synthesized_rows(
    samples: Mapping[str, Sample], count: int
) -> tuple[list[dict[str, Any]], dict[str, Sample]]:
    """``count`` rows cycling over ``samples``, and the samples by the rows' ids."""
    pool = list(samples.values())
    pictures = {id(sample): thumbnail_data_url(sample.images[0]) for sample in pool}
    rows: list[dict[str, Any]] = []
    by_id: dict[str, Sample] = {}
    for k in range(count):
        sample = pool[k % len(pool)]
        family_mates = [other for other in pool if other.data_source == sample.data_source]
        place = next(i for i, other in enumerate(family_mates) if other is sample)
        wrong = family_mates[(place + 1) % len(family_mates)]
        answer = answer_for(wrong if k % 7 in (2, 5) else sample)
        solution = f"<think>Measured with the tools.</think><answer>{answer}</answer>"
        calls = [
            ToolCallRecord("roborefer.detect_one", {"image_index": 0, "obj_name": "object"},
                           "Detected 1 instance(s): [(0.5, 0.5)]", False, [], 0.05, 1, [1], {"points": [[0.5, 0.5]]},
                           {"points": "points"}),
            ToolCallRecord("sam2.segment_from_point", {"image_index": 0, "point": [0.5, 0.5]},
                           "Segmented object (mask 1).", False, [], 0.08, 2, [2]),
        ]  # fmt: skip
        if k % 10 == 0:
            calls.append(
                ToolCallRecord("bounding_box.compute_bbox", {"mask": "$mask1"}, "Error: too few points",
                               True, [], 0.01, 3)
            )  # fmt: skip
        trajectory = Trajectory(
            task_id=f"{sample.data_source}/{k}",
            data_source=sample.data_source,
            messages=[{"role": "assistant", "content": solution}],
            tool_calls=calls,
            answer=answer,
            turns=len(calls) + 1,
            score=None,
            parse_errors=0,
            stats={},
            wall_s=1.0 + k % 7,
            error="policy failed: connection refused" if k % 25 == 24 else None,
        )
        row_id = f"{sample.data_source}/{k}"
        rows.append(
            {
                "id": row_id,
                "data_source": sample.data_source,
                "question": sample.question,
                "score": compute_score(sample.data_source, solution, sample.ground_truth, sample.extra_info),
                "trajectory": trajectory.to_dict(),
                "tool_images": [pictures[id(sample)], pictures[id(sample)]],
            }
        )
        by_id[row_id] = sample
    return rows, by_id
