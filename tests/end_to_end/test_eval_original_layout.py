"""`spacetools eval` on the original eval set's layout: `data/<key>.parquet` with base64 or byte images.

The rows carry real ground truths from the official per-sample scores; the replay policy gives the
released checkpoint's raw answers back, so our scores must equal the official ones. A simulated tool
called on such a (non-simulated) picture must answer with a clear error, not crash the run. One file
numbers its rows in ``extra_info.index``, the other leaves it out (a row is then known by its position
in its own file, as the official evaluation's ``sample_id``).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from spacetools.agent.types import Trajectory, write_trajectories

from .eval_run import read_run, run_eval

OFFICIAL_SCORES = Path(__file__).parents[1] / "data" / "official_scores"
SYSTEM_PROMPT = "You are a helpful assistant."
POSE_QUESTION = (
    "What is the 3D oriented bounding box of the object in the image? Give the 8 corners of the box "
    "projected into the image as a list of tuples [(x1, y1), ..., (x8, y8)], normalized to [0, 1]."
)
# The first row of each key asks a simulated tool first; there is no simulated scene behind a photo.
TOOL_TURN = (
    '<think>I point at the {obj} first.</think>\n<tool_call>{{"name": "roborefer.detect_one", '
    '"arguments": {{"obj_name": "{obj}", "image_index": 0}}}}</tool_call>'
)


def _official(key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (OFFICIAL_SCORES / f"{key}.jsonl").read_text().splitlines()]


def _pick(rows: list[dict[str, Any]], *conditions: Any) -> list[dict[str, Any]]:
    """The first row meeting each condition, in that order."""
    return [next(row for row in rows if condition(row)) for condition in conditions]


def robospatial_rows() -> list[dict[str, Any]]:
    """Vacant-point and yes/no rows, each once scored 1 and once 0 by the official code."""
    rows = _official("robospatial")
    return _pick(
        rows,
        lambda r: r["gt"].startswith("[") and r["score"] == 1.0,
        lambda r: r["gt"].startswith("[") and r["score"] == 0.0,
        lambda r: not r["gt"].startswith("[") and r["score"] == 1.0,
        lambda r: not r["gt"].startswith("[") and r["score"] == 0.0,
    )


def boppose_rows() -> list[dict[str, Any]]:
    """A pose row scored 0, and two with partial hull overlap."""
    rows = _official("boppose")
    return _pick(
        rows,
        lambda r: r["score"] == 0.0,
        lambda r: 0.0 < r["score"] < 0.8,
        lambda r: r["score"] >= 0.8,
    )


def plain_photo(seed: int) -> np.ndarray:
    """An RGB picture with no scene behind it: a colour gradient with a few flat rectangles."""
    rng = np.random.default_rng(seed)
    height, width = 120, 160
    ys, xs = np.mgrid[0:height, 0:width]
    image = np.stack([xs * 255 // width, ys * 255 // height, np.full_like(xs, 128)], axis=-1).astype(np.uint8)
    for _ in range(3):
        x, y = int(rng.integers(0, width - 30)), int(rng.integers(0, height - 30))
        image[y : y + 30, x : x + 30] = rng.integers(0, 256, 3, dtype=np.uint8)
    return image


def _encoded(image: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=fmt)
    return buffer.getvalue()


def write_original_parquet(
    path: Path, key: str, rows: list[dict[str, Any]], *, image_bytes: bool, indexed: bool
) -> None:
    """One benchmark file as the original eval set stores it.

    Images are PNG ``{"bytes": …}`` entries with ``image_bytes``, else JPEG data URIs; ``indexed`` rows
    carry ``extra_info.index``. Pose rows keep BOP-ASK's dangling ``extra_info.image`` path.
    """
    records = []
    for row in rows:
        question = row.get("question") or POSE_QUESTION
        image = plain_photo(row["sample_id"])
        images = (
            [{"bytes": _encoded(image, "PNG"), "path": None}]
            if image_bytes
            else [{"image": "data:image/jpeg;base64," + base64.b64encode(_encoded(image, "JPEG")).decode()}]
        )
        extra_info = {
            "answer": row["gt"],
            "choices": None,
            "question": f"<image>\n{question}",
            "split": "test",
        }
        if indexed:
            extra_info["index"] = row["sample_id"]
        if key == "boppose":
            extra_info["image"] = "images/scene_000001_frame_000000.png"
        records.append(
            {
                "data_source": key,
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"<image>\n{question}"},
                ],
                "images": images,
                "ability": "spatial",
                "reward_model": {"ground_truth": row["gt"], "style": "rule"},
                "extra_info": extra_info,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)


def task_ids(key: str, rows: list[dict[str, Any]], *, indexed: bool) -> list[str]:
    """The evaluation's task ids: `<key>/<extra_info.index>`, or `<key>/<row position>` without an index."""
    return [f"{key}/{row['sample_id'] if indexed else position}" for position, row in enumerate(rows)]


def replay_recording(
    key: str, rows: list[dict[str, Any]], ids: list[str], tool_object: str
) -> list[Trajectory]:
    """One recorded episode per row, under its task id, ending in the official raw answer."""
    recordings = []
    for position, (row, task_id) in enumerate(zip(rows, ids, strict=True)):
        answer = f"<think>Reading the image.</think>\n<answer>{row['raw_answer']}</answer>"
        turns = [TOOL_TURN.format(obj=tool_object), answer] if position == 0 else [answer]
        recordings.append(
            Trajectory(
                task_id=task_id,
                data_source=key,
                messages=[{"role": "assistant", "content": turn} for turn in turns],
                tool_calls=[],
                answer=row["raw_answer"],
                turns=len(turns),
                score=None,
                parse_errors=0,
                stats={},
                wall_s=0.0,
            )
        )
    return recordings


@pytest.mark.slow
def test_replayed_official_answers_on_the_original_layout_get_the_official_scores(tmp_path: Path) -> None:
    eval_set = tmp_path / "eval_set"
    robospatial, boppose = robospatial_rows(), boppose_rows()
    data = eval_set / "data"
    write_original_parquet(
        data / "robospatial.parquet", "robospatial", robospatial, image_bytes=False, indexed=False
    )
    write_original_parquet(data / "boppose.parquet", "boppose", boppose, image_bytes=True, indexed=True)
    robospatial_ids = task_ids("robospatial", robospatial, indexed=False)
    boppose_ids = task_ids("boppose", boppose, indexed=True)
    replay_file = tmp_path / "official_answers.jsonl"
    write_trajectories(
        replay_recording("robospatial", robospatial, robospatial_ids, "bowl")
        + replay_recording("boppose", boppose, boppose_ids, "object"),
        replay_file,
    )

    out = tmp_path / "run"
    run_eval(
        [
            "--policy", "replay",
            "--option", f"trajectories={replay_file}",
            "--data", str(eval_set),
            "--out", str(out),
            "--profile", "exact",
        ]
    )  # fmt: skip

    rows, summary = read_run(out)
    by_id = {row["id"]: row for row in rows}
    official = dict(zip(robospatial_ids + boppose_ids, robospatial + boppose, strict=True))
    assert sorted(by_id) == sorted(official)
    for task_id, expected in official.items():
        row = by_id[task_id]
        assert row["trajectory"]["error"] is None, row["trajectory"]["error"]
        assert row["trajectory"]["finish_reason"] == "answer"
        assert row["score"]["score"] == pytest.approx(expected["score"], abs=1e-6), task_id

    # The simulated tool answered with an error the model can read, and the episode went on to score.
    for task_id in (robospatial_ids[0], boppose_ids[0]):
        (call,) = by_id[task_id]["trajectory"]["tool_calls"]
        assert call["name"] == "roborefer.detect_one" and call["is_error"]
        assert "image 0 has no simulated scene" in call["result_text"]
        tool_messages = [m for m in by_id[task_id]["trajectory"]["messages"] if m["role"] == "tool"]
        assert "no simulated scene" in tool_messages[0]["content"]

    # Benchmark figures (×100) from the same rows as the official scores give.
    figures = summary["benchmarks"]
    yes_no = [r["score"] for r in robospatial if not r["gt"].startswith("[")]
    vacant = [r["score"] for r in robospatial if r["gt"].startswith("[")]
    assert figures["robospatial"]["metrics"]["vqa"] == pytest.approx(100 * np.mean(yes_no))
    assert figures["robospatial"]["metrics"]["vacant"] == pytest.approx(100 * np.mean(vacant))
    assert figures["boppose"]["metrics"]["headline"] == pytest.approx(
        100 * np.mean([r["score"] for r in boppose])
    )
