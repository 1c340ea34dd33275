"""The verl parquet layout of the SpaceTools evaluation sets: `Sample`, `write_parquet`, `read_samples`,
and a sample's episode: `load_samples` (by task id), `task_from_sample` (what the policy sees) and
`episode_input` (the task, the scene for the tools alone, the scorer).

One row per question with the columns `data_source`, `prompt` (chat messages), `images` (a list of
`{"image": "data:image/jpeg;base64,..."}`), `ability`, `reward_model` (`ground_truth`, `style`) and
`extra_info` (`answer`, `choices`, `index`, `question`, `split`, ...). Reading also accepts the original
eval set, whose images may be `{"bytes": ...}` dicts and whose ground truth may be bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from spacetools.agent.types import EpisodeInput, Task
from spacetools.kit import imagecodec
from spacetools.rewards import compute_score

JPEG_QUALITY = 95

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
_IMAGE = pa.struct([("image", pa.string())])
_REWARD_MODEL = pa.struct([("ground_truth", pa.string()), ("style", pa.string())])

#: The typed keys `extra_info` may hold in files we write (absent keys are stored as null).
EXTRA_INFO_FIELDS: dict[str, pa.DataType] = {
    "answer": pa.string(),
    "choices": pa.list_(pa.string()),
    "index": pa.int64(),
    "question": pa.string(),
    "split": pa.string(),
    "qa_type": pa.string(),
    "category": pa.string(),
    "scene": pa.string(),
    "image_index": pa.int64(),
    "marked_points": pa.list_(pa.list_(pa.float64())),
}

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(_MESSAGE)),
        ("images", pa.list_(_IMAGE)),
        ("ability", pa.string()),
        ("reward_model", _REWARD_MODEL),
        ("extra_info", pa.struct(list(EXTRA_INFO_FIELDS.items()))),
    ]
)


class Sample(BaseModel):
    """One benchmark question: chat prompt, RGB images, ground truth and bookkeeping."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    data_source: str
    prompt: list[dict[str, Any]]
    images: list[np.ndarray]
    ability: str = "spatial"
    ground_truth: str
    style: str = "rule"
    extra_info: dict[str, Any]
    _image_urls: list[str] | None = PrivateAttr(default=None)

    @field_validator("images")
    @classmethod
    def _rgb_uint8(cls, images: list[np.ndarray]) -> list[np.ndarray]:
        for image in images:
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"images must be (H, W, 3) uint8 RGB, got {image.dtype} {image.shape}")
        return images

    @property
    def question(self) -> str:
        """The question text without the leading `<image>` tag."""
        return str(self.extra_info.get("question", "")).removeprefix("<image>\n")

    def image_urls(self) -> list[str]:
        """The images as the JPEG data URLs a parquet row stores, encoded on the first call only (and
        kept when the sample is pickled): a generator's worker processes encode their samples in parallel
        rather than leaving it all to the process that writes the file. The images must not change after."""
        if self._image_urls is None:
            self._image_urls = [
                imagecodec.to_data_url(image, "jpeg", quality=JPEG_QUALITY) for image in self.images
            ]
        return self._image_urls


def _extra_info_row(extra_info: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(extra_info) - set(EXTRA_INFO_FIELDS))
    if unknown:
        raise ValueError(
            f"extra_info keys {unknown} are not in the schema; allowed: {sorted(EXTRA_INFO_FIELDS)}"
        )
    return {key: extra_info.get(key) for key in EXTRA_INFO_FIELDS}


def write_parquet(samples: Sequence[Sample], path: str | Path) -> Path:
    """Write samples to one parquet file in the verl layout (images as JPEG data URIs)."""
    path = Path(path)
    rows = [
        {
            "data_source": sample.data_source,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in sample.prompt],
            "images": [{"image": url} for url in sample.image_urls()],
            "ability": sample.ability,
            "reward_model": {"ground_truth": sample.ground_truth, "style": sample.style},
            "extra_info": _extra_info_row(sample.extra_info),
        }
        for sample in samples
    ]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return path


def _ground_truth_text(value: Any) -> str:
    if isinstance(value, bytes):
        # The original RefSpatial rows keep the mask PNG as raw bytes; carry it as a data URI.
        if value.startswith(b"\x89PNG"):
            return imagecodec.encoded_data_url(value, "png")
        return value.decode("utf-8")
    return str(value)


def _sample_from_row(row: dict[str, Any]) -> Sample:
    reward_model = row.get("reward_model") or {}
    prompt = [dict(message) for message in row.get("prompt") or []]
    extra_info = {key: value for key, value in (row.get("extra_info") or {}).items() if value is not None}
    return Sample(
        data_source=row["data_source"],
        prompt=prompt,
        images=[imagecodec.decode(entry) for entry in row.get("images") or []],
        ability=row.get("ability") or "spatial",
        ground_truth=_ground_truth_text(reward_model.get("ground_truth", "")),
        style=reward_model.get("style") or "rule",
        extra_info=extra_info,
    )


def parquet_files(path_or_dir: str | Path, keys: Iterable[str] | None = None) -> list[Path]:
    """The parquet files of a file, a folder (`*.parquet`), or a folder's `data/` subfolder, by key."""
    root = Path(path_or_dir)
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    if root.is_file():
        return [root]
    folder = root / "data" if not any(root.glob("*.parquet")) and (root / "data").is_dir() else root
    available = {file.stem: file for file in sorted(folder.glob("*.parquet"))}
    if keys is None:
        return list(available.values())
    wanted = list(keys)
    missing = [key for key in wanted if key not in available]
    if missing:
        raise FileNotFoundError(f"no parquet for keys {missing} in {folder}; found {sorted(available)}")
    return [available[key] for key in wanted]


def read_samples(path_or_dir: str | Path, keys: Iterable[str] | None = None) -> list[Sample]:
    """Read samples from a parquet file or a folder of `<key>.parquet` files (ours or the original set)."""
    samples: list[Sample] = []
    for file in parquet_files(path_or_dir, keys):
        try:
            rows = pq.read_table(file).to_pylist()
        except (pa.ArrowException, OSError) as error:
            raise ValueError(f"{file} is not a readable parquet file: {error}") from None
        samples.extend(_sample_from_row(row) for row in rows)
    return samples


def task_id(sample: Sample, position: int) -> str:
    """A stable id: the data source and the row's ``extra_info.index``, or else ``position``, the row's
    place among its benchmark's rows (what the original evaluation calls ``sample_id``)."""
    return f"{sample.data_source}/{sample.extra_info.get('index', position)}"


def _question(sample: Sample) -> str:
    """The user's question as the model reads it, without ``<image>`` tags."""
    users = [m for m in sample.prompt if m.get("role") == "user" and isinstance(m.get("content"), str)]
    text = users[-1]["content"] if users else sample.question
    return text.replace("<image>", "").strip()


def task_from_sample(sample: Sample, id: str) -> Task:
    """The policy's view of a sample: question, images and public metadata (never answer or scene)."""
    return Task(
        id=id,
        data_source=sample.data_source,
        question=_question(sample),
        images=list(sample.images),
        extra_info=dict(sample.extra_info),  # Task keeps the public keys only
    )


def episode_input(sample: Sample, id: str) -> EpisodeInput:
    """One episode of a sample: the policy's task, its scene for the tools only, and its scorer."""
    scene = sample.extra_info.get("scene")
    attachments: list[dict[str, Any] | None] = [None] * len(sample.images)
    if scene is not None:
        attachments[0] = {"scene": scene}
    return EpisodeInput(
        task_from_sample(sample, id), attachments=attachments, scorer=partial(score_text, sample)
    )


def load_samples(
    data: str | Path, benches: Sequence[str] | None = None, limit: int | None = None
) -> dict[str, Sample]:
    """Samples by task id, in file order; ``limit`` keeps the first ``limit`` of each benchmark."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    selected: dict[str, Sample] = {}
    rows_seen: dict[str, int] = {}
    for sample in read_samples(data, keys=benches):
        # Positions count within each benchmark, so an unindexed row's id does not depend on other files.
        position = rows_seen.get(sample.data_source, 0)
        rows_seen[sample.data_source] = position + 1
        if limit is not None and position >= limit:
            continue
        key = task_id(sample, position)
        if key in selected:
            raise ValueError(f"two samples share the id {key!r} (duplicate extra_info.index in {data})")
        selected[key] = sample
    if not selected:
        raise ValueError(
            f"no samples found in {data}" + (f" for benchmarks {list(benches)}" if benches else "")
        )
    return selected


def score_text(sample: Sample, solution_text: str) -> dict[str, Any]:
    """The reward module's score of a solution text against the sample's ground truth."""
    return compute_score(sample.data_source, solution_text, sample.ground_truth, sample.extra_info)
