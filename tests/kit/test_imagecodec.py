"""The one image codec: round trips, every accepted form, and clear errors."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from spacetools.kit import imagecodec


def _image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (12, 17, 3), dtype=np.uint8)


def test_png_round_trip_is_lossless_in_every_form() -> None:
    image = _image()
    url = imagecodec.to_data_url(image)
    raw = imagecodec.encode(image)
    for form in (url, raw, base64.b64encode(raw).decode(), {"bytes": raw}, {"image": url}):
        assert np.array_equal(imagecodec.decode(form), image)


def test_jpeg_is_close_and_masks_round_trip() -> None:
    image = np.full((8, 8, 3), 120, np.uint8)
    assert np.abs(imagecodec.decode(imagecodec.to_data_url(image, "jpeg")).astype(int) - 120).max() <= 2
    mask = np.zeros((5, 6), bool)
    mask[1:3, 2:5] = True
    assert np.array_equal(imagecodec.decode_mask(imagecodec.to_data_url(mask)), mask)


def test_encoded_bytes_become_a_data_url_as_they_are() -> None:
    jpeg = imagecodec.encode(_image(), "jpeg", quality=70)
    url = imagecodec.encoded_data_url(jpeg, "jpeg")
    assert url.startswith("data:image/jpeg;base64,")
    assert imagecodec.image_bytes(url) == jpeg
    assert imagecodec.to_data_url(_image()) == imagecodec.encoded_data_url(imagecodec.encode(_image()), "png")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("data:image/gif;base64,AAAA", "unsupported image type"),
        ("data:image/png,AAAA", "base64 data URL"),
        ("not base64 at all!", "not valid base64"),
        (base64.b64encode(b"hello").decode(), "cannot decode"),
        ({"other": 1}, "has no 'image'"),
    ],
)
def test_bad_input_says_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(imagecodec.ImageDecodeError, match=message):
        imagecodec.decode(data)  # type: ignore[arg-type]


def test_pixel_limit_is_checked_before_decoding() -> None:
    url = imagecodec.to_data_url(np.zeros((100, 100, 3), np.uint8))
    assert imagecodec.decode(url, max_pixels=10_000).shape == (100, 100, 3)
    with pytest.raises(imagecodec.ImageDecodeError, match="over the limit"):
        imagecodec.decode(url, max_pixels=9_999)


def test_encode_refuses_non_images() -> None:
    with pytest.raises(ValueError, match="uint8 RGB"):
        imagecodec.encode(np.zeros((4, 4, 3), np.float32))
