"""Realism profiles: how the simulated perception tools fail the way real models do.

`exact` is the oracle (the simulator's truth). `realistic` and `harsh` add the failures seen with
real pointing, segmentation and monocular depth models: depth noise growing with distance plus a
global scale error and a wrong focal length, mask boundaries eroded or dilated or bleeding into a
neighbour, pointing jitter and misses on ambiguous or unknown names, and occasional failed calls.
A robot's RGB-D camera is a different instrument from a monocular estimator: it measures depth
(structured light or stereo), so it has millimetre-level noise growing with distance and no global
scale error; `perturb_sensor_depth` models it (Nguyen et al. 2012's axial noise for a Kinect-class
sensor, sigma = a + b (z - 0.4 m)^2) and `perturb_depth` the estimator.
Every perturbation draws from the call's `ctx.rng`, so a seeded session is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage


@dataclass(frozen=True)
class Profile:
    """The parameters of one realism profile; all zero (the default) is the `exact` profile."""

    name: str
    depth_noise_per_m2: float = 0.0
    """Per-pixel depth noise sigma at 1 m, metres; it grows with the square of the distance."""
    depth_smooth_relative: float = 0.0
    """Sigma of a smooth, low-frequency relative depth error (a warped surface)."""
    depth_scale_sigma: float = 0.0
    """Sigma of one global multiplicative depth scale error per call."""
    focal_relative_sigma: float = 0.0
    """Sigma of the relative error of the estimated focal length."""
    mask_boundary_px: int = 0
    """Largest erosion or dilation of a mask boundary, pixels."""
    mask_bleed_probability: float = 0.0
    """Chance that a mask bleeds into a touching neighbour."""
    point_jitter: float = 0.0
    """Sigma of pointing jitter, as a fraction of the image size."""
    ambiguous_miss_probability: float = 0.0
    """Chance of pointing at another match when an expression fits several objects."""
    unknown_guess_probability: float = 0.0
    """Chance of pointing at some object anyway when an expression matches nothing."""
    failure_probability: float = 0.0
    """Chance that a perception call fails outright."""
    sensor_noise_base_m: float = 0.0
    """RGB-D camera: per-pixel axial noise sigma near the sensor (0.4 m), metres."""
    sensor_noise_quadratic: float = 0.0
    """RGB-D camera: growth of the noise sigma with (z - 0.4 m)^2, metres per square metre."""


PROFILES: dict[str, Profile] = {
    "exact": Profile(name="exact"),
    "realistic": Profile(
        name="realistic",
        depth_noise_per_m2=0.004,
        depth_smooth_relative=0.01,
        depth_scale_sigma=0.03,
        focal_relative_sigma=0.02,
        mask_boundary_px=2,
        mask_bleed_probability=0.1,
        point_jitter=0.008,
        ambiguous_miss_probability=0.25,
        unknown_guess_probability=0.5,
        failure_probability=0.02,
        sensor_noise_base_m=0.0012,  # Nguyen et al. 2012 (Kinect): 0.0012 + 0.0019 (z - 0.4)^2
        sensor_noise_quadratic=0.0019,
    ),
    "harsh": Profile(
        name="harsh",
        depth_noise_per_m2=0.012,
        depth_smooth_relative=0.03,
        depth_scale_sigma=0.08,
        focal_relative_sigma=0.06,
        mask_boundary_px=5,
        mask_bleed_probability=0.3,
        point_jitter=0.02,
        ambiguous_miss_probability=0.5,
        unknown_guess_probability=0.8,
        failure_probability=0.08,
        sensor_noise_base_m=0.003,
        sensor_noise_quadratic=0.006,
    ),
}
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)


def get_profile(name: str) -> Profile:
    """The profile called ``name``; a ``ValueError`` listing the choices otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose one of: {', '.join(PROFILE_NAMES)}") from None


def maybe_fail(profile: Profile, rng: np.random.Generator, model: str) -> None:
    """Raise a transient ``RuntimeError`` with the profile's failure probability."""
    if profile.failure_probability and rng.random() < profile.failure_probability:
        raise RuntimeError(f"{model} inference failed (transient error); retry the call")


def perturb_depth(depth: np.ndarray, profile: Profile, rng: np.random.Generator) -> np.ndarray:
    """Depth with a global scale error, a smooth warp and per-pixel noise growing with distance."""
    if (
        profile.depth_noise_per_m2 == 0
        and profile.depth_scale_sigma == 0
        and profile.depth_smooth_relative == 0
    ):
        unchanged: np.ndarray = depth.copy()
        return unchanged
    height, width = depth.shape
    scale = 1.0 + rng.normal(0.0, profile.depth_scale_sigma)
    coarse = rng.normal(0.0, profile.depth_smooth_relative, size=(4, 5))
    warp = ndimage.zoom(coarse, (height / 4, width / 5), order=1)[:height, :width]
    noise = rng.normal(0.0, 1.0, size=depth.shape) * profile.depth_noise_per_m2 * depth**2
    noisy = depth * scale * (1.0 + warp) + noise
    perturbed: np.ndarray = np.maximum(noisy, 1e-3).astype(np.float32)
    return perturbed


def perturb_sensor_depth(depth: np.ndarray, profile: Profile, rng: np.random.Generator) -> np.ndarray:
    """What an RGB-D camera measures: per-pixel axial noise growing with distance, never a global scale.

    The noise is quantised to the millimetre, as a sensor's 16-bit depth image in millimetres is.
    """
    if profile.sensor_noise_base_m == 0 and profile.sensor_noise_quadratic == 0:
        unchanged: np.ndarray = depth.copy()
        return unchanged
    sigma = profile.sensor_noise_base_m + profile.sensor_noise_quadratic * (depth - 0.4) ** 2
    noisy = depth + rng.normal(0.0, 1.0, size=depth.shape) * sigma
    measured: np.ndarray = np.maximum(np.round(noisy * 1000.0) / 1000.0, 1e-3).astype(np.float32)
    return measured


def perturb_focal_length(focal_length_px: float, profile: Profile, rng: np.random.Generator) -> float:
    """The focal length a monocular model would estimate."""
    if profile.focal_relative_sigma == 0:
        return focal_length_px
    return float(focal_length_px * (1.0 + rng.normal(0.0, profile.focal_relative_sigma)))


def perturb_mask(
    mask: np.ndarray, segmentation: np.ndarray, profile: Profile, rng: np.random.Generator
) -> np.ndarray:
    """A mask with its boundary eroded or dilated and, sometimes, bleeding into a touching neighbour."""
    result: np.ndarray = mask.copy()
    if profile.mask_boundary_px:
        radius = int(rng.integers(0, profile.mask_boundary_px + 1))
        if radius:
            grow = rng.random() < 0.5
            operation = ndimage.binary_dilation if grow else ndimage.binary_erosion
            changed = operation(result, iterations=radius)
            # Erosion must not wipe out a thin object entirely: a segmenter still returns something.
            result = changed if changed.any() else result
    if profile.mask_bleed_probability and rng.random() < profile.mask_bleed_probability:
        ring = ndimage.binary_dilation(result, iterations=3) & ~result
        neighbours = np.unique(segmentation[ring & (segmentation >= 0)])
        neighbours = neighbours[~np.isin(neighbours, np.unique(segmentation[mask]))]
        if len(neighbours):
            neighbour = segmentation == rng.choice(neighbours)
            reach = ndimage.binary_dilation(result, iterations=int(rng.integers(4, 16)))
            result |= neighbour & reach
    return result


def perturb_point(point: np.ndarray, profile: Profile, rng: np.random.Generator) -> np.ndarray:
    """A normalized point with pointing jitter, kept inside the image."""
    if profile.point_jitter == 0:
        return point
    return np.clip(point + rng.normal(0.0, profile.point_jitter, size=2), 0.0, 1.0)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two boolean masks (0 when both are empty)."""
    union = int(np.logical_or(a, b).sum())
    return int(np.logical_and(a, b).sum()) / union if union else 0.0


def predicted_iou(mask: np.ndarray, truth: np.ndarray, profile: Profile, rng: np.random.Generator) -> float:
    """The quality score a segmenter reports: the true IoU, blurred by the profile's uncertainty."""
    iou = mask_iou(mask, truth)
    if profile.name == "exact":
        return 0.99 * iou
    return float(np.clip(iou + rng.normal(0.0, 0.03), 0.05, 0.999))
