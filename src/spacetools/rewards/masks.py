"""Load a ground-truth region mask from any of the forms a dataset may store it in."""

from __future__ import annotations

import base64
import binascii
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

_DATA_URI_PREFIX = "data:image/"
_PNG_BASE64_START = "iVBORw0KGgo"  # base64 of the PNG signature, for strings without a data-URI header


def _decode_image_bytes(data: bytes) -> np.ndarray:
    """Decode encoded image bytes (PNG, or anything Pillow reads) to a boolean mask: non-zero is inside."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("L")) > 0
    except (UnidentifiedImageError, OSError) as error:
        raise ValueError(f"mask ground truth is not a readable image ({len(data)} bytes): {error}") from error


def load_mask(mask: Any) -> np.ndarray:
    """A 2D boolean mask ``(H, W)`` from a ``data:image/png;base64,…`` string, bare PNG base64, a file
    path, raw PNG bytes or an array (non-zero means inside; a 3-channel array counts any channel).

    Raises ValueError with the reason when ``mask`` is none of these.
    """
    if isinstance(mask, np.ndarray):
        array = mask
    elif isinstance(mask, bytes | bytearray | memoryview):
        array = _decode_image_bytes(bytes(mask))
    elif isinstance(mask, str | os.PathLike):
        array = _mask_from_text(os.fspath(mask))
    elif isinstance(mask, list | tuple):
        array = np.asarray(mask)
    else:
        raise ValueError(f"mask ground truth of type {type(mask).__name__} is not supported")
    if array.ndim == 3:
        array = np.asarray(array.any(axis=2))
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"mask ground truth must be a non-empty 2D array, got shape {array.shape}")
    return array.astype(bool)


def _mask_from_text(text: str) -> np.ndarray:
    """Decode a data URI or bare PNG base64 string, or read the PNG file the string names."""
    stripped = text.strip()
    if stripped.startswith(_DATA_URI_PREFIX) or stripped.startswith(_PNG_BASE64_START):
        payload = stripped.split(",", 1)[1] if stripped.startswith(_DATA_URI_PREFIX) else stripped
        try:
            return _decode_image_bytes(base64.b64decode(payload, validate=False))
        except (binascii.Error, IndexError) as error:
            raise ValueError(f"mask ground truth is not valid base64: {error}") from error
    path = Path(stripped)
    if not path.is_file():
        raise ValueError(f"mask ground truth is neither a data URI nor an existing file: {stripped[:80]!r}")
    return _decode_image_bytes(path.read_bytes())
