"""Realism profiles: exact is the identity, the others perturb reproducibly and fail sometimes."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.sim.realism import (
    PROFILES,
    get_profile,
    mask_iou,
    maybe_fail,
    perturb_depth,
    perturb_mask,
    perturb_point,
)
from spacetools.sim.referring import parse_expression


def _depth() -> np.ndarray:
    return np.linspace(0.5, 2.5, 60 * 80, dtype=np.float32).reshape(60, 80)


def _two_blocks() -> tuple[np.ndarray, np.ndarray]:
    segmentation = np.full((60, 80), -1, dtype=np.int32)
    segmentation[20:40, 20:40] = 0
    segmentation[20:40, 40:60] = 1  # a touching neighbour to bleed into
    return segmentation == 0, segmentation


def test_unknown_profiles_are_rejected_with_the_choices() -> None:
    with pytest.raises(ValueError, match="exact, realistic, harsh"):
        get_profile("noisy")


def test_exact_changes_nothing() -> None:
    exact, rng = PROFILES["exact"], np.random.default_rng(0)
    depth = _depth()
    np.testing.assert_array_equal(perturb_depth(depth, exact, rng), depth)
    mask, segmentation = _two_blocks()
    np.testing.assert_array_equal(perturb_mask(mask, segmentation, exact, rng), mask)
    np.testing.assert_array_equal(perturb_point(np.array([0.3, 0.4]), exact, rng), [0.3, 0.4])
    for _ in range(100):
        maybe_fail(exact, rng, "model")


@pytest.mark.parametrize("name", ["realistic", "harsh"])
def test_depth_error_grows_with_distance_and_is_seeded(name: str) -> None:
    profile, depth = PROFILES[name], _depth()
    first = perturb_depth(depth, profile, np.random.default_rng(3))
    np.testing.assert_array_equal(first, perturb_depth(depth, profile, np.random.default_rng(3)))
    # Remove the global scale to look at the per-pixel noise, which grows with the square of depth.
    errors = []
    for seed in range(20):
        noisy = perturb_depth(depth, profile, np.random.default_rng(seed))
        residual = noisy / (np.median(noisy / depth)) - depth
        errors.append((np.std(residual[:5]), np.std(residual[-5:])))
    near, far = np.mean(errors, axis=0)
    assert far > 2 * near


def test_harsh_is_worse_than_realistic_on_masks() -> None:
    mask, segmentation = _two_blocks()
    quality = {}
    for name in ("realistic", "harsh"):
        rng = np.random.default_rng(0)
        quality[name] = np.mean(
            [mask_iou(perturb_mask(mask, segmentation, PROFILES[name], rng), mask) for _ in range(200)]
        )
    assert 0.5 < quality["harsh"] < quality["realistic"] < 1.0


def test_masks_sometimes_bleed_into_the_neighbour() -> None:
    mask, segmentation = _two_blocks()
    rng = np.random.default_rng(1)
    bled = [perturb_mask(mask, segmentation, PROFILES["harsh"], rng) for _ in range(100)]
    into_neighbour = [int((m & (segmentation == 1)).sum()) for m in bled]
    assert sum(count > 20 for count in into_neighbour) >= 10


def test_failures_happen_at_about_the_profile_rate() -> None:
    rng, failures = np.random.default_rng(2), 0
    for _ in range(2000):
        try:
            maybe_fail(PROFILES["harsh"], rng, "SAM2")
        except RuntimeError as error:
            assert "retry" in str(error)
            failures += 1
    assert 0.05 < failures / 2000 < 0.11


@pytest.mark.parametrize(
    ("text", "target", "relation", "anchor", "free"),
    [
        ("red mug", ("red", "mug"), None, None, False),
        ("the mug left of the tray", ("mug",), "left of", ("tray",), False),
        (
            "Point to the ball to the right of the small blue box.",
            ("ball",),
            "right of",
            ("small", "blue", "box"),
            False,
        ),
        ("vacant space in front of the box", (), "in front of", ("box",), True),
        ("free spot close to and behind the teddy bear", (), "behind", ("teddy", "bear"), True),
        ("the cylinder next to the duck", ("cylinder",), "near", ("duck",), False),
    ],
)
def test_parse_expression(text, target, relation, anchor, free) -> None:
    parsed = parse_expression(text)
    assert parsed.target.words == target
    assert parsed.relation == relation
    assert (parsed.anchor.words if parsed.anchor else None) == anchor
    assert parsed.free_space is free


def test_superlatives_and_side_adjectives() -> None:
    assert parse_expression("the leftmost box").target.superlative == "leftmost"
    assert parse_expression("the left mug").target.superlative == "leftmost"
    assert parse_expression("the nearest ball").target.words == ("ball",)
