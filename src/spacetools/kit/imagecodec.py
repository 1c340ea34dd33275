"""The one image codec: RGB arrays to and from PNG/JPEG bytes and base64 data URLs.

Every layer that moves an image as bytes (the parquet layout, the HTTP wire, chat messages, the report)
encodes and decodes it here, so the accepted forms, the size limit and the error wording are the same
everywhere.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

from spacetools.kit.errors import ImageDecodeError, ImageTooLargeError

ImageFormat = Literal["png", "jpeg"]
MEDIA_TYPES: dict[str, ImageFormat] = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg"}
JPEG_QUALITY = 90


def check_rgb(image: Any) -> np.ndarray:
    """The image as an `(H, W, 3)` uint8 array; `ValueError` saying what is wrong otherwise."""
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got shape {array.shape} {array.dtype}")
    return array


def encode(image: np.ndarray, format: ImageFormat = "png", *, quality: int = JPEG_QUALITY) -> bytes:
    """An image as PNG or JPEG bytes. Boolean masks are written as 0/255 grey PNGs.

    PNG uses compress level 1 (images are written once and read once) and no metadata, so the bytes are a
    pure function of the pixels.
    """
    array = np.asarray(image)
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    elif array.ndim != 2:
        array = check_rgb(array)
    buffer = io.BytesIO()
    if format == "png":
        Image.fromarray(array).save(buffer, format="PNG", compress_level=1)
    else:
        Image.fromarray(array).convert("RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def to_data_url(image: np.ndarray, format: ImageFormat = "png", *, quality: int = JPEG_QUALITY) -> str:
    """An image as a `data:image/<png|jpeg>;base64,…` URL."""
    return encoded_data_url(encode(image, format, quality=quality), format)


def encoded_data_url(encoded: bytes, format: ImageFormat) -> str:
    """PNG or JPEG bytes as a `data:image/<png|jpeg>;base64,…` URL, as they are (not encoded again)."""
    return f"data:image/{format};base64,{base64.b64encode(encoded).decode('ascii')}"


def thumbnail_data_url(image: np.ndarray, width: int) -> str:
    """A small JPEG data URL of an RGB image, at most `width` pixels on its longer side."""
    picture = Image.fromarray(check_rgb(image))
    picture.thumbnail((width, width))
    return to_data_url(np.asarray(picture), "jpeg", quality=80)


def image_bytes(data: str | bytes | dict[str, Any]) -> bytes:
    """The encoded bytes of a data URL, a plain base64 string, raw bytes, or a parquet image entry
    (`{"bytes": …}`, `{"image": …}` or `{"path": …}`)."""
    if isinstance(data, dict):
        if data.get("bytes") is not None:
            return bytes(data["bytes"])
        if data.get("image") is not None:
            return image_bytes(data["image"])
        if data.get("path"):
            return Path(data["path"]).read_bytes()
        raise ImageDecodeError(f"image entry has no 'image', 'bytes' or 'path': keys {sorted(data)}")
    if isinstance(data, bytes):
        return data
    if data.startswith("data:"):
        header, comma, payload = data.partition(",")
        media_type = header.removeprefix("data:").removesuffix(";base64")
        if not comma or not header.endswith(";base64"):
            raise ImageDecodeError(
                f"expected a base64 data URL like 'data:image/png;base64,…', got {data[:40]!r}"
            )
        if media_type not in MEDIA_TYPES:
            raise ImageDecodeError(f"unsupported image type {media_type!r}; send image/png or image/jpeg")
    else:
        payload = data
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageDecodeError(f"the image is not valid base64: {exc}") from None


def decode(
    data: str | bytes | dict[str, Any], mode: str = "RGB", *, max_pixels: int | None = None
) -> np.ndarray:
    """Decode any form `image_bytes` accepts into an array (`"RGB"`: `(H, W, 3)` uint8, `"L"`: grey).

    `max_pixels` is checked from the header before any pixel is decoded, so a small file that would
    decompress into a huge image is refused cheaply.
    """
    raw = image_bytes(data)
    try:
        with Image.open(io.BytesIO(raw)) as picture:
            width, height = picture.size
            if max_pixels is not None and width * height > max_pixels:
                raise ImageTooLargeError(
                    f"image of {width}x{height} pixels is over the limit of {max_pixels:,} pixels"
                )
            return np.asarray(picture.convert(mode), dtype=np.uint8)
    except ImageDecodeError:
        raise
    except Image.DecompressionBombError as exc:  # past Pillow's own limit, before ours was checked
        raise ImageTooLargeError(f"the image is too large to decode: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ImageDecodeError(f"cannot decode the image: {exc}") from None


def decode_mask(data: str | bytes | dict[str, Any]) -> np.ndarray:
    """A PNG mask (0/255 grey) as an `(H, W)` bool array."""
    return decode(data, mode="L") > 127
