"""Distances inside object masks, as pointing and question generation read them."""

from __future__ import annotations

import numpy as np
from scipy import ndimage


def inside_distance(mask: np.ndarray) -> np.ndarray:
    """Each pixel's distance to the nearest pixel outside the mask (0 outside it; beyond the image's border
    counts as outside).

    Computed on the mask's bounding box with a one-pixel border: a pixel's nearest outside pixel is never
    farther than that border, so the values are those of the whole image at a fraction of the work.
    """
    mask = np.asarray(mask, dtype=bool)
    distance = np.zeros(mask.shape)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size:
        top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        crop = np.pad(mask[top:bottom, left:right], 1)
        distance[top:bottom, left:right] = ndimage.distance_transform_edt(crop)[1:-1, 1:-1]
    return distance
