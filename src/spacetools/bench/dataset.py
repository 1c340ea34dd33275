"""The verl parquet layout of the SpaceTools evaluation sets: `Sample`, `write_parquet`, `read_samples`.

One row per question with the columns `data_source`, `prompt` (chat messages), `images` (a list of
`{"image": "data:image/jpeg;base64,..."}`), `ability`, `reward_model` (`ground_truth`, `style`) and
`extra_info` (`answer`, `choices`, `index`, `question`, `split`, ...). Reading also accepts the original
eval set, whose images may be `{"bytes": ...}` dicts and whose ground truth may be bytes.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image
from pydantic import BaseModel, ConfigDict, field_validator

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


def encode_jpeg_data_uri(image: np.ndarray, quality: int = JPEG_QUALITY) -> str:
    """Encode an RGB image as a `data:image/jpeg;base64,` URI."""
    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def encode_png_data_uri(array: np.ndarray) -> str:
    """Encode a boolean mask (as 0/255 grey) or an RGB image as a `data:image/png;base64,` URI."""
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    buffer = io.BytesIO()
    # optimize=False and no metadata keep the bytes a pure function of the pixels.
    Image.fromarray(array).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image_bytes(data: str | bytes | dict[str, Any]) -> bytes:
    """The encoded image bytes of a data URI, a plain base64 string, raw bytes or `{"bytes": ...}`."""
    if isinstance(data, dict):
        if data.get("bytes") is not None:
            return bytes(data["bytes"])
        if data.get("image") is not None:
            return decode_image_bytes(data["image"])
        if data.get("path"):
            return Path(data["path"]).read_bytes()
        raise ValueError(f"image entry has no 'image', 'bytes' or 'path': keys {sorted(data)}")
    if isinstance(data, bytes):
        return data
    payload = data.split(",", 1)[1] if data.startswith("data:") else data
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as error:
        raise ValueError(f"image is not valid base64 ({error}): {data[:40]!r}...") from error


def decode_image(data: str | bytes | dict[str, Any], mode: str = "RGB") -> np.ndarray:
    """Decode any image form `decode_image_bytes` accepts into an array (RGB by default, `"L"` grey)."""
    with Image.open(io.BytesIO(decode_image_bytes(data))) as image:
        return np.asarray(image.convert(mode))


def decode_mask(data: str | bytes) -> np.ndarray:
    """Decode a PNG mask (data URI or bytes) into an (H, W) bool array."""
    return decode_image(data, mode="L") > 127


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
            "images": [{"image": encode_jpeg_data_uri(image)} for image in sample.images],
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
            return "data:image/png;base64," + base64.b64encode(value).decode("ascii")
        return value.decode("utf-8")
    return str(value)


def _sample_from_row(row: dict[str, Any]) -> Sample:
    reward_model = row.get("reward_model") or {}
    prompt = [dict(message) for message in row.get("prompt") or []]
    extra_info = {key: value for key, value in (row.get("extra_info") or {}).items() if value is not None}
    return Sample(
        data_source=row["data_source"],
        prompt=prompt,
        images=[decode_image(entry) for entry in row.get("images") or []],
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
        samples.extend(_sample_from_row(row) for row in pq.read_table(file).to_pylist())
    return samples
