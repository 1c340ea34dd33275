"""`inside_distance` on a mask's bounding box gives the distances of the whole image."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from spacetools.sim.masks import inside_distance


def _whole_image(mask: np.ndarray) -> np.ndarray:
    return ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]


@pytest.mark.parametrize("seed", range(6))
def test_the_distances_are_those_of_the_whole_image(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = np.zeros((48, 64), dtype=bool)
    for _ in range(3):  # blobs, some cut by the image's border
        row, col = rng.integers(-5, 50), rng.integers(-5, 66)
        mask[max(row, 0) : row + rng.integers(3, 20), max(col, 0) : col + rng.integers(3, 20)] = True
    mask &= rng.random(mask.shape) > 0.05  # with holes
    np.testing.assert_array_equal(inside_distance(mask), _whole_image(mask))


def test_an_empty_mask_is_zero_everywhere() -> None:
    empty = np.zeros((5, 7), dtype=bool)
    np.testing.assert_array_equal(inside_distance(empty), _whole_image(empty))
    full = np.ones((5, 7), dtype=bool)
    np.testing.assert_array_equal(inside_distance(full), _whole_image(full))
