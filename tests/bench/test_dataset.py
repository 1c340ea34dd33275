"""The verl parquet layout: schema, round trip, and reading the original eval set's variants."""

from __future__ import annotations

import base64
import io
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from spacetools.bench.dataset import SCHEMA, Sample, read_samples, write_parquet
from spacetools.kit.imagecodec import decode as decode_image
from spacetools.kit.imagecodec import decode_mask
from spacetools.kit.imagecodec import to_data_url as encode_png_data_uri


def _image(seed: int = 0) -> np.ndarray:
    # Smooth gradients survive JPEG almost exactly, so round trips can be compared tightly.
    y, x = np.mgrid[0:48, 0:64]
    return np.stack([x * 4, y * 5, (x + y + seed) * 2], axis=-1).astype(np.uint8)


def _sample(index: int, **extra: object) -> Sample:
    question = f"<image>\nIs the red mug left of the box? Answer yes or no. ({index})"
    return Sample(
        data_source="spatialsim_robospatial",
        prompt=[{"role": "user", "content": question}],
        images=[_image(index)],
        ground_truth="Yes" if index % 2 == 0 else "No",
        extra_info={
            "answer": "Yes",
            "choices": [],
            "index": index,
            "question": question,
            "split": "test",
            **extra,
        },
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    samples = [_sample(0, qa_type="configuration"), _sample(1, marked_points=[[0.1, 0.2], [0.3, 0.4]])]
    path = write_parquet(samples, tmp_path / "spatialsim_robospatial.parquet")
    back = read_samples(path)
    assert len(back) == 2
    for original, read in zip(samples, back, strict=True):
        assert read.data_source == original.data_source
        assert read.prompt == original.prompt
        assert read.ground_truth == original.ground_truth
        assert read.extra_info == original.extra_info  # absent keys are not invented as None
        assert read.images[0].shape == original.images[0].shape
        assert np.abs(read.images[0].astype(int) - original.images[0]).mean() < 2.0


def test_images_encoded_before_pickling_write_the_same_file(tmp_path: Path) -> None:
    # A generator's workers encode the JPEGs and send the samples to the process that writes the file.
    encoded = _sample(0)
    assert encoded.image_urls()[0].startswith("data:image/jpeg;base64,")
    sent_bytes = pickle.dumps(encoded)
    assert encoded.image_urls()[0].encode() in sent_bytes  # the encoding travels: no second one
    moved = pickle.loads(sent_bytes)
    assert moved.image_urls() == encoded.image_urls()
    sent = write_parquet([moved], tmp_path / "sent.parquet")
    assert sent.read_bytes() == write_parquet([_sample(0)], tmp_path / "fresh.parquet").read_bytes()


def test_file_has_the_verl_schema(tmp_path: Path) -> None:
    path = write_parquet([_sample(0)], tmp_path / "x.parquet")
    table = pq.read_table(path)
    assert table.schema.equals(SCHEMA)
    row = table.to_pylist()[0]
    assert row["images"][0]["image"].startswith("data:image/jpeg;base64,")
    assert row["reward_model"] == {"ground_truth": "Yes", "style": "rule"}
    assert row["prompt"][0]["content"].startswith("<image>\n")


def test_unknown_extra_info_key_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not in the schema"):
        write_parquet([_sample(0, surprise=1)], tmp_path / "x.parquet")


def test_images_must_be_rgb_uint8() -> None:
    with pytest.raises(ValueError, match="uint8 RGB"):
        Sample(
            data_source="x", prompt=[], images=[np.zeros((4, 4), np.uint8)], ground_truth="", extra_info={}
        )


def test_reads_original_layout_with_bytes_images_and_bytes_truth(tmp_path: Path) -> None:
    """The original RefSpatial files keep images as {"bytes": ...} and the mask PNG as raw bytes."""
    jpeg = io.BytesIO()
    Image.fromarray(_image()).save(jpeg, format="JPEG", quality=95)
    mask = np.zeros((48, 64), bool)
    mask[10:20, 30:40] = True
    png = base64.b64decode(encode_png_data_uri(mask).split(",", 1)[1])
    table = pa.Table.from_pylist(
        [
            {
                "data_source": "reflocation",
                "prompt": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "<image>\nPoint."},
                ],
                "images": [{"bytes": jpeg.getvalue(), "path": None}],
                "ability": "spatial",
                "reward_model": {"ground_truth": png, "style": "rule"},
                "extra_info": {
                    "index": 3,
                    "question": "<image>\nPoint.",
                    "split": "test",
                    "qa_type": "location",
                },
            }
        ]
    )
    (tmp_path / "data").mkdir()
    pq.write_table(table, tmp_path / "data" / "reflocation.parquet")
    [sample] = read_samples(tmp_path, keys=["reflocation"])
    assert sample.images[0].shape == (48, 64, 3)
    assert np.array_equal(decode_mask(sample.ground_truth), mask)
    assert sample.question == "Point."
    assert sample.prompt[0]["role"] == "system"


def test_missing_key_and_missing_folder_are_clear_errors(tmp_path: Path) -> None:
    write_parquet([_sample(0)], tmp_path / "spatialsim_robospatial.parquet")
    with pytest.raises(FileNotFoundError, match="spatialsim_blinkdepth"):
        read_samples(tmp_path, keys=["spatialsim_blinkdepth"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_samples(tmp_path / "nowhere")


def test_bad_base64_image_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not valid base64"):
        decode_image("data:image/jpeg;base64,@@@not-base64@@@")


def test_a_file_that_is_not_parquet_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "spatialsim_robospatial.parquet"
    bogus.write_text("not a table")
    with pytest.raises(ValueError, match="is not a readable parquet file"):
        read_samples(bogus)
